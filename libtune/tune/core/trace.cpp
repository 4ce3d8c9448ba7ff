#include "tune/core/trace.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tune {

step_trace::step_trace(const std::string& path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0)  // said once, where it is made; then nothing is traced
    std::fprintf(stderr, "libtune: the step trace %s cannot be opened for writing (%s): no step trace\n", path.c_str(),
                 std::strerror(errno));
}

step_trace::~step_trace() {
  if (fd_ >= 0) ::close(fd_);
}

void step_trace::operator()(const char* step, const std::string& trial) const {
  if (fd_ < 0) return;
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  char line[512];
  int n = std::snprintf(line, sizeof line, "%s %.*s %lld\n", step, static_cast<int>(std::min<size_t>(trial.size(), 400)),
                        trial.c_str(), static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec);
  if (n > 0) (void)!::write(fd_, line, static_cast<size_t>(std::min<int>(n, sizeof line - 1)));
}

namespace {
const step_trace& process_trace() {
  static const step_trace trace([] {
    const char* p = std::getenv("TUNE_TRACE_STEPS");
    return std::string{p ? p : ""};
  }());
  return trace;
}
}  // namespace

bool step_tracing() { return process_trace().on(); }

void trace_step(const char* step, const std::string& trial) { process_trace()(step, trial); }

}  // namespace tune
