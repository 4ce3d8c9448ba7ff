#include "tune/core/quantity.hpp"

#include <cmath>
#include <cstdio>

namespace tune {

const char* to_string(errc code) {
  switch (code) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid argument";
    case errc::insufficient: return "insufficient resources";
    case errc::infeasible: return "infeasible";
    case errc::not_found: return "not found";
    case errc::already_exists: return "already exists";
    case errc::inconsistent: return "inconsistent";
  }
  return "unknown error";
}

namespace {

std::string quoted(std::string_view s) { return '\'' + std::string{s} + '\''; }

status bad_amount(std::string_view what, std::string_view shown, std::string_view why) {
  return {errc::invalid_argument,
          "the amount of " + std::string{what} + " (" + std::string{shown} + ") " +
              std::string{why}};
}

// A user's number must be finite, >= 0 and at most `limit` (named `limit_text`).
status check_number(double value, std::string_view what, const char* shown, double limit,
                    std::string_view limit_text) {
  if (std::isnan(value)) return bad_amount(what, shown, "is not a number; give a value >= 0");
  if (std::isinf(value)) return bad_amount(what, shown, "is infinite; give a finite value >= 0");
  if (value < 0) return bad_amount(what, shown, "is negative; give a value >= 0");
  if (value > limit)
    return bad_amount(what, shown, "is too large; at most " + std::string{limit_text} + " is accepted");
  return status::ok();
}

constexpr int64_t max_bytes = int64_t{1} << 56;  // 64 PiB: far above any node

}  // namespace

expected<quantity> quantity::from_double(double value, std::string_view what) {
  char shown[64];
  std::snprintf(shown, sizeof shown, "%g", value);
  if (auto st = check_number(value, what, shown, static_cast<double>(max_whole), "1e9"); !st) return st;
  auto units = static_cast<int64_t>(std::llround(value * scale));
  if (units == 0 && value > 0)
    return bad_amount(what, shown, "is below the resolution of 0.0001; ask for at least 0.0001");
  return quantity{units};
}

expected<quantity> quantity::parse(std::string_view text, std::string_view what) {
  auto fail = [&](std::string_view why) { return bad_amount(what, quoted(text), why); };
  if (text.empty()) return fail("is empty; give a number such as 0.5 or 2");
  if (text.front() == '-') return fail("is negative; give a value >= 0");
  if (text.front() == '+') text.remove_prefix(1);
  int64_t whole_units = 0, frac = 0;
  int frac_digits = 0;
  bool any_digit = false, dot = false;
  for (char c : text) {
    if (c == '.' && !dot) { dot = true; continue; }
    if (c < '0' || c > '9') return fail("is not a number; give a number such as 0.5 or 2");
    any_digit = true;
    int d = c - '0';
    if (!dot) {
      whole_units = whole_units * 10 + d;
      if (whole_units > max_whole) return fail("is too large; at most 1e9 is accepted");
    } else if (frac_digits < 4) {
      frac = frac * 10 + d;
      ++frac_digits;
    } else if (d != 0) {
      return fail("has more than four decimal places; the resolution is 0.0001");
    }
  }
  if (!any_digit) return fail("is not a number; give a number such as 0.5 or 2");
  while (frac_digits < 4) { frac *= 10; ++frac_digits; }
  quantity q{whole_units * scale + frac};
  if (q > whole(max_whole)) return fail("is too large; at most 1e9 is accepted");
  return q;
}

std::string quantity::to_string() const {
  int64_t u = units_;
  std::string sign = u < 0 ? "-" : "";
  if (u < 0) u = -u;
  std::string out = sign + std::to_string(u / scale);
  int64_t frac = u % scale;
  if (frac != 0) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%04lld", static_cast<long long>(frac));
    std::string f = buf;
    while (f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out;
}

expected<int64_t> bytes_from_double(double value, std::string_view what) {
  char shown[64];
  std::snprintf(shown, sizeof shown, "%g", value);
  if (auto st = check_number(value, what, shown, static_cast<double>(max_bytes), "64 PiB"); !st) return st;
  if (value != std::floor(value))
    return bad_amount(what, shown, "is not a whole number of bytes; use e.g. \"512MiB\"");
  return static_cast<int64_t>(value);
}

expected<int64_t> parse_bytes(std::string_view text, std::string_view what) {
  auto fail = [&](std::string_view why) { return bad_amount(what, quoted(text), why); };
  std::string_view number = text, unit;
  size_t i = 0;
  while (i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.')) ++i;
  number = text.substr(0, i);
  unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (!text.empty() && text.front() == '-') return fail("is negative; give bytes >= 0");
  struct unit_def { std::string_view name; int64_t factor; };
  static constexpr unit_def units[] = {
      {"", 1},          {"B", 1},
      {"KB", 1000},     {"MB", 1000'000},   {"GB", 1000'000'000}, {"TB", 1000'000'000'000},
      {"KiB", 1 << 10}, {"MiB", 1 << 20},   {"GiB", int64_t{1} << 30},
      {"TiB", int64_t{1} << 40}};
  int64_t factor = 0;
  for (auto& u : units)
    if (u.name == unit) factor = u.factor;
  if (factor == 0)
    return fail("has an unknown unit; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
  auto q = quantity::parse(number, what);  // exact decimal, four places
  if (!q) return fail("is not a size; give e.g. 1073741824, \"512MiB\" or \"16GiB\"");
  // bytes = units * factor / scale, exactly when it is a whole number of bytes.
  __int128 scaled = static_cast<__int128>(q->units()) * factor;
  if (scaled % quantity::scale != 0)
    return fail("is not a whole number of bytes; give more bytes or a smaller unit");
  __int128 bytes = scaled / quantity::scale;
  if (bytes > max_bytes) return fail("is too large; at most 64 PiB is accepted");
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int i = 0;
  while (v >= 1024 && i < 5) { v /= 1024; ++i; }
  char buf[32];
  if (i == 0 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, names[i]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, names[i]);
  return buf;
}

}  // namespace tune
