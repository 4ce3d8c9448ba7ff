// A typed actor's behavior made of parts: each part is a typed behavior checked against
// its own interface where it is written (its handlers, their arguments and replies),
// and the actor's interface must be exactly the union of the parts' (checked here), so
// an actor whose handlers live in several files is still checked whole. CAF's
// typed_behavior takes its handlers in one list; this lets each file keep its own.
#pragma once

#include <caf/all.hpp>

namespace tune {

template <class Iface, class... Parts>
typename Iface::behavior_type typed_union(Parts... parts) {
  using found = typename caf::detail::tl_concat<typename Parts::signatures...>::type;
  using mismatch = caf::interface_mismatch_t<found, typename Iface::signatures>;
  static_assert(mismatch::value == caf::detail::tl_size<found>::value &&
                    caf::detail::tl_size<found>::value == caf::detail::tl_size<typename Iface::signatures>::value,
                "the parts' handlers are not exactly the actor's interface");
  caf::message_handler all;
  ((all = all.or_else(caf::message_handler{parts.unbox().as_behavior_impl()})), ...);
  return {typename Iface::behavior_type::unsafe_init{}, caf::behavior{all}};
}

}  // namespace tune
