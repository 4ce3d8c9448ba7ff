#include "log.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace tune {

void log_line(const std::string& line) {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::fprintf(stderr, "%s.%03dZ %s\n", stamp, static_cast<int>(ms), line.c_str());
  std::fflush(stderr);
}

}  // namespace tune
