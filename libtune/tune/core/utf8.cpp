#include "tune/core/utf8.hpp"

namespace tune {

namespace {

// The length of the well-formed character at `at`, or 0 with `bad` set to the length of
// the maximal subpart of an ill-formed sequence there (at least 1).
size_t char_at(std::string_view s, size_t at, size_t& bad) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(at);
  bad = 0;
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) need = 3, lo = 0xA0;
  else if (c == 0xED) need = 3, hi = 0x9F;  // not a surrogate
  else if (c >= 0xE1 && c <= 0xEF) need = 3;
  else if (c == 0xF0) need = 4, lo = 0x90;
  else if (c == 0xF4) need = 4, hi = 0x8F;
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else return bad = 1, 0;  // a continuation byte alone, C0, C1, F5..FF
  size_t n = 1;
  for (; n < need && at + n < s.size(); ++n) {
    unsigned char x = b(at + n);
    if (n == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) break;
  }
  if (n == need) return need;
  bad = n;
  return 0;
}

}  // namespace

bool valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t bad;
    size_t n = char_at(text, i, bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string shown_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t start = 0;  // of the well-formed run not copied yet
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad;
    size_t n = char_at(text, i, bad);
    if (n > 0) {
      i += n;
      continue;
    }
    out.append(text.substr(start, i - start));
    out += "\xEF\xBF\xBD";
    i += bad;
    start = i;
  }
  if (start == 0) return std::string{text};
  out.append(text.substr(start));
  return out;
}

std::string_view utf8_prefix(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = 0;
  while (end < text.size()) {
    size_t bad;
    size_t n = char_at(text, end, bad);
    size_t step = n > 0 ? n : bad;
    if (end + step > max_bytes) break;
    end += step;
  }
  return text.substr(0, end);
}

}  // namespace tune
