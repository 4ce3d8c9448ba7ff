// Exact amounts of divisible resources (CPU, GPU, custom): fixed point with four
// decimal places, held in an int64. Ten 0.1-GPU requests make exactly one GPU.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "tune/core/status.hpp"

namespace tune {

class quantity {
 public:
  static constexpr int64_t scale = 10000;            // units per whole resource
  static constexpr int64_t max_whole = 1'000'000'000;  // largest amount accepted

  constexpr quantity() = default;
  static constexpr quantity from_units(int64_t units) { return quantity{units}; }
  static constexpr quantity whole(int64_t n) { return quantity{n * scale}; }

  // A user's number. Rejects NaN, infinities, negative amounts, amounts above
  // max_whole and positive amounts finer than the resolution (0.0001); rounds the
  // rest to the nearest unit. `what` names the amount in the error ("gpu").
  static expected<quantity> from_double(double value, std::string_view what);
  // A decimal text such as "0.25" or "2", parsed exactly (no float on the way).
  static expected<quantity> parse(std::string_view text, std::string_view what);

  constexpr int64_t units() const { return units_; }
  constexpr bool is_zero() const { return units_ == 0; }
  constexpr bool is_whole() const { return units_ % scale == 0; }
  constexpr int64_t whole_part() const { return units_ / scale; }
  double to_double() const { return static_cast<double>(units_) / scale; }
  // Shortest exact decimal: "0.25", "2", "0.0001".
  std::string to_string() const;

  constexpr quantity& operator+=(quantity o) { units_ += o.units_; return *this; }
  constexpr quantity& operator-=(quantity o) { units_ -= o.units_; return *this; }
  friend constexpr quantity operator+(quantity a, quantity b) { return a += b; }
  friend constexpr quantity operator-(quantity a, quantity b) { return a -= b; }
  friend constexpr auto operator<=>(quantity, quantity) = default;

 private:
  constexpr explicit quantity(int64_t units) : units_(units) {}
  int64_t units_ = 0;
};

// Byte amounts (memory, GPU memory). Accepts a whole number of bytes or a text with
// a unit: "512MiB", "16GiB", "2GB" (KB/MB/GB/TB are powers of 1000, KiB... of 1024).
expected<int64_t> parse_bytes(std::string_view text, std::string_view what);
expected<int64_t> bytes_from_double(double value, std::string_view what);
// "16 GiB", "512 MiB", "100 B": the largest binary unit that keeps one decimal.
std::string format_bytes(int64_t bytes);

}  // namespace tune
