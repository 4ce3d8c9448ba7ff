// Running `tune start` as a daemon: the runtime directory with pid and log files,
// forking with a readiness pipe (the parent prints the child's first words: started,
// or why not), the signals a service waits for, and stopping what was started.
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune::cli {

// --runtime-dir, else $TUNE_RUNTIME_DIR, else $XDG_RUNTIME_DIR/libtune, else
// /tmp/libtune-<uid>; created with mode 0700.
expected<std::string> runtime_dir(const std::string& option);

// The process in a pid file, if the file names a live tune process.
int live_pid(const std::string& pid_file);
status write_pid_file(const std::string& path);

// How a service tells whoever started it that it is up, or why it is not.
class readiness {
 public:
  explicit readiness(int fd) : fd_(fd) {}
  void ready(const std::string& message) { tell(true, message); }
  void failed(const std::string& message) { tell(false, message); }
  bool told() const { return told_; }

 private:
  void tell(bool ok, const std::string& message);

  int fd_;  // the pipe to the parent, or -1 in the foreground (messages go to stdout/stderr)
  bool told_ = false;
};

// Runs `service` in a daemon child (new session, stdin from /dev/null, output to
// `log_file`), and waits up to `wait_s` for it to say ready (exit 0, its message on
// stdout) or failed (exit 1, its message on stderr). In the foreground (`block`), runs
// it here and returns its exit code.
int run_service(bool block, const std::string& log_file, int wait_s,
                const std::function<int(readiness&)>& service);

// Blocks the signals a service waits for (SIGTERM, SIGINT, SIGHUP, SIGUSR1) in this
// thread and every thread it starts after; sigwait on the set returned.
sigset_t service_signals();

// After a stop signal: the process ends within `limit` even if something hangs.
void exit_watchdog(std::chrono::seconds limit);

struct stopped {
  std::string name;  // "head-6380", "node-1a2b3c4d"
  int pid = 0;
  bool forced = false;  // SIGKILL after the grace period
};
// Stops every service with a pid file in `dir`: nodes first, then heads; SIGTERM,
// then SIGKILL after `grace_s`. Stale pid files are removed.
std::vector<stopped> stop_all(const std::string& dir, int grace_s);

}  // namespace tune::cli
