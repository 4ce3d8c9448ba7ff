// One line to standard error with a UTC timestamp: what daemons write to their log.
#pragma once

#include <string>

namespace tune {

void log_line(const std::string& line);

}  // namespace tune
