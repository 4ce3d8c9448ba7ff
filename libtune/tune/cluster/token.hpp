// The cluster token: a shared secret in a file that the head creates (mode 0600) and
// every node and client must present. Without the right token nothing joins or reads.
#pragma once

#include <string>
#include <string_view>

#include "tune/core/status.hpp"

namespace tune {

// ~/.tune/token (or $TUNE_TOKEN_FILE when set).
std::string default_token_file();

struct token_file {
  std::string token;
  bool created = false;   // ensure_token made it just now
  std::string warning;    // e.g. the file is readable by others
};

// The token in `path`. Errors name the file and what to do (a missing file: copy it
// from the head machine). The token is the file's first line, 16 to 256 characters
// from [A-Za-z0-9_-].
expected<token_file> read_token(const std::string& path);
// For the head: reads the token, or creates the file (and its folder, 0700) with a
// new random token, mode 0600.
expected<token_file> ensure_token(const std::string& path);

// A new token: 64 hex digits from the kernel's randomness.
expected<std::string> random_token();
// Writes `token` to `path` (its folder made 0700 when missing), mode 0600, replacing
// what was there; a symbolic link at `path` is refused.
status write_token_file(const std::string& path, const std::string& token);

// Compares in time independent of where the strings differ.
bool token_equal(std::string_view a, std::string_view b);

}  // namespace tune
