#include "log.hpp"

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "tune/core/utf8.hpp"

namespace tune {

namespace {
std::mutex log_mutex;
std::FILE* log_file = nullptr;  // null: stderr
}  // namespace

status set_log_file(const std::string& path) {
  std::lock_guard lock{log_mutex};
  if (log_file) std::fclose(log_file);
  log_file = nullptr;
  if (path.empty()) return status::ok();
  log_file = std::fopen(path.c_str(), "a");
  if (!log_file) return status{errc::invalid_argument, "cannot open the log " + path + ": " + std::strerror(errno)};
  return status::ok();
}

void log_line(const std::string& line) {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard lock{log_mutex};
  auto* out = log_file ? log_file : stderr;
  // Shown text: what came from a program or a file system (a process's name, an error
  // naming a file) with ill-formed UTF-8 as U+FFFD.
  std::fprintf(out, "%s.%03dZ %s\n", stamp, static_cast<int>(ms), shown_utf8(line).c_str());
  std::fflush(out);
}

}  // namespace tune
