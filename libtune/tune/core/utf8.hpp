// Text that came from outside (a program's output, a file's name, an environment value)
// as UTF-8. Programs print whatever bytes they like and file systems hold whatever names
// they like: where such text is shown (JSON, a log, a terminal), each ill-formed
// sequence becomes U+FFFD; where it is used (a file's name), it is kept as it is.
// Pure: no I/O, never throws.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tune {

// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong form, no surrogate
// U+D800..U+DFFF, nothing above U+10FFFF). NUL is well-formed.
bool valid_utf8(std::string_view text);

// `text` with each ill-formed sequence replaced by U+FFFD (one for each maximal subpart,
// as the Unicode standard recommends and as nlohmann::json's `replace` does); text that
// is well-formed comes back unchanged.
std::string shown_utf8(std::string_view text);

// The longest prefix of `text` of at most `max_bytes` bytes that does not cut a
// well-formed character in two (an ill-formed byte counts as one character).
std::string_view utf8_prefix(std::string_view text, size_t max_bytes);

}  // namespace tune
