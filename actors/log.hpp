// One line with a UTC timestamp: what daemons write to their log. Standard error by
// default; an embedded cluster sends its lines to a file (set_log_file).
#pragma once

#include <string>

#include "tune/core/status.hpp"

namespace tune {

void log_line(const std::string& line);
// From now on, lines go to the end of `path` (created); empty: back to standard error.
status set_log_file(const std::string& path);

}  // namespace tune
