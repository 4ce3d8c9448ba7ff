// SHA-256 of bytes and of files (OpenSSL), as lowercase hex: how programs shipped to
// nodes are named and checked.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "tune/core/status.hpp"

namespace tune {

std::string sha256_hex(std::string_view bytes);
// Whether `s` is a SHA-256 as these functions write one: 64 lowercase hex digits.
inline bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}
expected<std::string> sha256_file(const std::string& path);

// The same over bytes that come in pieces (a file received in chunks).
class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;
  void add(std::string_view bytes);
  std::string hex();  // once, at the end

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tune
