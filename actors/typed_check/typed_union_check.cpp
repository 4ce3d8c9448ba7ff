// Compiled by the typed_union_check test twice: as it is it must compile; with
// -DLEAVE_ONE_OUT (a part without one of the interface's handlers) or -DWRONG_REPLY (a
// handler whose reply is not the interface's) it must not, and say why.
#include "typed.hpp"

namespace tune {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;

using part_a = caf::typed_actor<caf::replies_to<ping_atom, int>::with<pong_atom, int>>;
#ifdef LEAVE_ONE_OUT
using part_b = caf::typed_actor<caf::reacts_to<pong_atom, int>>;
#else
using part_b = caf::typed_actor<caf::reacts_to<pong_atom, int>, caf::reacts_to<tick_atom>>;
#endif
using whole = caf::typed_actor<caf::replies_to<ping_atom, int>::with<pong_atom, int>, caf::reacts_to<pong_atom, int>,
                               caf::reacts_to<tick_atom>>;

whole::behavior_type make() {
  part_a::behavior_type a{
#ifdef WRONG_REPLY
      [](ping_atom, int x) { return x; },
#else
      [](ping_atom, int x) { return caf::make_result(pong_atom::value, x); },
#endif
  };
#ifdef LEAVE_ONE_OUT
  part_b::behavior_type b{[](pong_atom, int) {}};
#else
  part_b::behavior_type b{[](pong_atom, int) {}, [](tick_atom) {}};
#endif
  return typed_union<whole>(a, b);
}

}  // namespace tune

int main() { return 0; }
