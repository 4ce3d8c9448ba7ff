// A visitor of a std::variant made of lambdas, one per alternative:
//   std::visit(overloaded{[](const a&) {...}, [](const b&) {...}}, v);
#pragma once

namespace tune {

template <class... Ts>
struct overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;

}  // namespace tune
