// A trial's worker process. It starts in a process group of its own with exactly the
// environment it is given (nothing inherited: no stray CUDA_VISIBLE_DEVICES), its
// standard output and error and a report channel (fd 3, TUNE_REPORT_FD) on pipes.
// It is stopped gracefully (SIGTERM to the group), forced (SIGKILL to the group),
// paused and resumed (SIGSTOP / SIGCONT to the group). Killing the group takes the
// worker's own children with it. A small keeper process (a fork of the caller, no
// exec) leads the group and is the worker's parent: when the thread that started it
// dies (the node killed with SIGKILL), the keeper kills the whole group, the worker's
// children included, so nothing is orphaned. A child that leaves the group with
// setsid/setpgid does not escape either: in a cgroup (spec.contain.join) it stays in the
// trial's cgroup, which the keeper kills when the node dies and the node kills at the
// end; without cgroups the keeper is a child subreaper, orphans come back to it, and it
// kills every descendant it has at the end (left_behind() counts them).
//
// Threads: start, poll and wait from one thread, which must outlive the process (the
// death signal is tied to the thread that forked). Signals may come from any thread.
//
// Started through a spawner, the keeper is a fork of the spawner instead: a small
// process forked from the node once, early (before its threads and its memory grow),
// that starts workers on request. Forking a busy multi-threaded node for every trial
// costs it a copy of its page tables and, while the keeper lives, a copy-on-write fault
// and a TLB shootdown on every page it writes; forking the idle spawner costs neither.
// The spawner ends when the node's end of its channel closes (the node ended, however),
// and its keepers then kill their groups: nothing outlives the node either way.
//
// The processes, their channels and every frame between them: PROTOCOL.md beside this
// file. The node's side is process.cpp and spawner.cpp (spawner's methods), the spawner's
// loop spawner.cpp, the keeper keeper.cpp, the worker's start worker.cpp, the frames
// spawn_protocol.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tune/core/status.hpp"
#include "tune/trial/cgroup.hpp"

namespace tune {

struct channels;  // the five pipes' ends (spawn_protocol.hpp)

struct process_spec {
  std::vector<std::string> argv;           // argv[0]: the program (a path)
  std::map<std::string, std::string> env;  // the whole environment
  std::string cwd;                         // empty: the current one
  // How the keeper contains it (tune/trial/cgroup.hpp): the cgroups it joins before the
  // worker starts (everything the worker starts stays in them), the cgroup.kill file it
  // writes when the node dies, or, without cgroups, as a child subreaper that kills every
  // descendant it ever had at the end.
  containment_spec contain = {};
  // Who the worker runs as (tune/trial/account.hpp): it drops to this user, group and
  // supplementary groups just before exec; uid < 0: as the caller. Its keeper stays the
  // caller (it kills the trial's cgroup when the node dies).
  struct credentials {
    int64_t uid = -1;
    int64_t gid = -1;
    std::vector<uint32_t> groups;
  } run_as = {};
};

struct exit_info {
  bool exited = false;  // ended by exit(); else by a signal
  int code = 0;         // exit code, or the signal number
  bool ok() const { return exited && code == 0; }
  std::string describe() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

class spawner {
 public:
  // Forks the spawner now. Do it while the process is small, from a thread that lives
  // as long as the spawner is used.
  static expected<std::shared_ptr<spawner>> start();
  // Another program that speaks the spawner's protocol on fd 3 (its end of the channel;
  // 0-2 on /dev/null), started with exactly `env`: tune/trial/python_spawner.py.
  static expected<std::shared_ptr<spawner>> start_program(const std::vector<std::string>& argv,
                                                          const std::map<std::string, std::string>& env);
  // A program's own spawner (started by a node as `PROGRAM --tune-spawner` with the
  // channel on fd 3): serves the protocol as the node's spawner does, and a worker that
  // is this same program run with --tune-worker (and an environment that would not
  // change how it loads) is a fork of this process that runs `fn(argc, argv)` and exits
  // with what it returns: no exec, no dynamic loading, no static initialisation again.
  // Call it first thing in main, single-threaded; it never returns.
  using in_process_fn = int (*)(int argc, char** argv);
  [[noreturn]] static void serve(int channel, in_process_fn fn);
  ~spawner();  // closes the channel and reaps it: workers it started are killed
  bool gone();  // it closed its channel (ended, crashed): nothing more starts through it
  spawner(const spawner&) = delete;
  spawner& operator=(const spawner&) = delete;
  int pid() const { return pid_; }

 private:
  friend class worker_process;
  spawner() = default;
  // Forks a child that gets its end of a new channel and runs `child` (which must not
  // return, or it ends with 127).
  static expected<std::shared_ptr<spawner>> start_with(const std::function<void(int)>& child);
  // The keeper's pid and the read ends of its pipes, or an error; false in `usable` when
  // the spawner itself is gone.
  expected<int> spawn(const process_spec& spec, channels& read_ends, bool& usable);

  std::mutex mu_;  // one request and its answer at a time
  int sock_ = -1;
  int pid_ = -1;
  bool gone_ = false;
};

class worker_process {
 public:
  // Starts the process, through `via` when given (and alive; else as a child of this
  // process). A program that cannot be started (missing, not executable) is an error
  // naming it and why, not a process that exits 127.
  static expected<std::unique_ptr<worker_process>> start(const process_spec& spec, spawner* via = nullptr);
  ~worker_process();  // kills the group if it still runs, and reaps it
  worker_process(const worker_process&) = delete;
  worker_process& operator=(const worker_process&) = delete;

  int pid() const { return pid_; }           // the worker's
  int group() const { return keeper_; }      // its process group (the keeper's pid)

  // Waits up to `timeout` for output, then reads what is there. Complete report lines
  // are appended to `reports`; output and errors go to their tails, and complete lines
  // of standard output to `output_lines` as well when given. A line longer than
  // max_report_line (reports) or max_output_line (output) is dropped whole and counted
  // (overlong_lines): a worker that never writes a newline holds bounded memory here.
  // At most max_read_per_poll bytes are read from each pipe in one call: a worker that
  // writes as fast as it is read (a report flood) cannot make one call read without end
  // (the caller's flow control decides when it reads again).
  // False once every pipe is closed (the process and its children are gone or closed
  // them). With `wake_fd`, the wait also ends when it is readable or the keeper's news
  // of the end comes (the caller blocks here for everything it waits for).
  static constexpr size_t max_read_per_poll = 256 * 1024;
  bool poll(std::chrono::milliseconds timeout, std::vector<std::string>& reports,
            std::vector<std::string>* output_lines = nullptr, int wake_fd = -1);
  // Reaps the process if it has ended.
  std::optional<exit_info> try_wait();
  // Waits up to `timeout` for the keeper's news (the worker's end), or for `wake_fd` to
  // be readable: what to do instead of sleeping once poll() says every pipe is closed,
  // so an end is seen at once.
  void wait_for_end(std::chrono::milliseconds timeout, int wake_fd = -1);
  // Waits until it ends (reading its pipes meanwhile); nothing after `timeout`.
  std::optional<exit_info> wait(std::chrono::milliseconds timeout, std::vector<std::string>& reports);

  void terminate();  // SIGTERM to the group
  void kill();       // SIGKILL to the group
  void pause();      // SIGSTOP to the group
  void resume();     // SIGCONT to the group
  // SIGURG to the worker alone (ignored unless it asks for it): make a checkpoint now,
  // if you can (tune/trial/PROTOCOL.md).
  void ask_checkpoint();

  // Forwarding (Ray's log_to_driver): complete lines of its standard output and error,
  // in the order read, kept for take_forwarded() (a line over max_forwarded_line is
  // dropped whole and counted: forwarded_overlong()).
  void forward_output(bool on) { forward_ = on; }
  std::vector<std::string> take_forwarded() { return std::exchange(forwarded_, {}); }
  bool has_forwarded() const { return !forwarded_.empty(); }
  static constexpr size_t max_forwarded_line = 16 * 1024;
  size_t forwarded_overlong() const { return fwd_overlong_; }

  // The last bytes it wrote (at most 16 KiB each).
  const std::string& stdout_tail() const { return out_tail_; }
  const std::string& stderr_tail() const { return err_tail_; }

  static constexpr int report_fd = 3;
  static constexpr size_t tail_bytes = 16 * 1024;
  static constexpr size_t max_report_line = 1 << 20;
  static constexpr size_t max_output_line = 64 * 1024;
  size_t overlong_lines() const { return overlong_; }
  // A reused worker's next trial (tune/trial/reuse.hpp): its tails and counts start anew.
  void clear_tails() {
    out_tail_.clear();
    err_tail_.clear();
    overlong_ = 0;
  }
  // After the end, as a subreaper: how many processes the keeper found left behind
  // (started by the trial, alive after its worker ended) and killed; -1: not known.
  int left_behind() const { return left_behind_; }

 private:
  worker_process() = default;
  // Starts a keeper through `via` when given and alive, else as a child of this process
  // (`own`); its pid, with the read ends of its pipes in `ends`.
  static expected<int> start_keeper(const process_spec& spec, spawner* via, channels& ends, bool& own);
  void signal_group(int sig);
  // poll's parts: reads one ready pipe (at most max_read_per_poll; closed at its end),
  // and takes what a read of `fd` brought into its tail and lines.
  void read_pipe(int& fd, std::vector<std::string>& reports, std::vector<std::string>* output_lines);
  void take(const int& fd, const char* data, size_t n, std::vector<std::string>& reports,
            std::vector<std::string>* output_lines);

  int pid_ = -1;     // the worker
  int keeper_ = -1;  // its parent, the group's leader (keeper.hpp says why)
  bool own_keeper_ = true;  // a child of this process (reaped here); else the spawner's
  bool subreaper_ = false;  // the keeper is a subreaper (spec.contain.subreaper)
  int out_ = -1, err_ = -1, rep_ = -1, news_ = -1;  // read ends, -1 once closed
  std::string out_tail_, err_tail_, rep_partial_, out_partial_;
  bool rep_skipping_ = false, out_skipping_ = false;  // inside an overlong line, until its newline
  size_t overlong_ = 0;
  bool forward_ = false;
  std::vector<std::string> forwarded_;
  std::string fwd_out_partial_, fwd_err_partial_;
  bool fwd_out_skipping_ = false, fwd_err_skipping_ = false;
  size_t fwd_overlong_ = 0;
  int left_behind_ = -1;
  std::optional<exit_info> exit_;
};

// Writes all n bytes to fd (again after EINTR); false on an error or a zero write.
// Async-signal-safe (the keeper uses it after a fork).
bool write_all(int fd, const void* data, size_t n);

}  // namespace tune
