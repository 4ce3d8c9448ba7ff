// SHA-256 of bytes and of files (OpenSSL), as lowercase hex: how programs shipped to
// nodes are named and checked.
#pragma once

#include <string>
#include <string_view>

#include "tune/core/status.hpp"

namespace tune {

std::string sha256_hex(std::string_view bytes);
expected<std::string> sha256_file(const std::string& path);

}  // namespace tune
