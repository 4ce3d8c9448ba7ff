#include "tune/trial/process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "tune/trial/keeper.hpp"
#include "tune/trial/spawn_protocol.hpp"

namespace tune {

bool write_all(int fd, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string exit_info::describe() const {
  if (exited) return "exit code " + std::to_string(code);
  const char* name = ::strsignal(code);
  return "killed by signal " + std::to_string(code) + (name ? std::string{" ("} + name + ")" : "");
}

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void keep_tail(std::string& tail, const char* data, size_t n) {
  tail.append(data, n);
  if (tail.size() > worker_process::tail_bytes) tail.erase(0, tail.size() - worker_process::tail_bytes);
}

}  // namespace

expected<int> worker_process::start_keeper(const process_spec& spec, spawner* via, channels& ends, bool& own) {
  own = true;
  if (!via) return keeper::start(spec, ends);
  bool usable = true;
  auto made = via->spawn(spec, ends, usable);
  own = false;
  if (made || usable) return made;
  own = true;  // the spawner is gone: a child of this process instead
  return keeper::start(spec, ends);
}

namespace {

// Waits for the start's outcome on the fail and news pipes (PROTOCOL.md, "Starting"):
// the worker's pid, or, when the keeper or the worker could not start, the error (both
// have ended then, the keeper reaped when it is `own`, every pipe closed).
expected<int> await_start(const process_spec& spec, int keeper, bool own, const channels& ends) {
  int32_t child_errno = 0, worker = 0;
  bool exec_failed = spawn_protocol::read_word(ends.fail, child_errno);  // EOF once the worker runs the program
  ::close(ends.fail);
  bool have_worker = spawn_protocol::read_word(ends.news, worker);
  if (!exec_failed && have_worker) return worker;
  for (int fd : {ends.out, ends.err, ends.report, ends.news}) ::close(fd);
  ::kill(-keeper, SIGKILL);
  int st = 0;
  while (own && ::waitpid(keeper, &st, 0) < 0 && errno == EINTR) {
  }
  if (exec_failed && child_errno < 0)  // the keeper could not join the trial's cgroups
    return status{errc::insufficient, "cannot move " + spec.argv[0] + " into its cgroup (" +
                                          (spec.contain.join.empty() ? std::string{"?"} : spec.contain.join.front()) +
                                          "): " + ::strerror(-child_errno)};
  return status{errc::invalid_argument,
                "cannot start " + spec.argv[0] + ": " + (exec_failed ? ::strerror(child_errno) : "its keeper process died")};
}

}  // namespace

expected<std::unique_ptr<worker_process>> worker_process::start(const process_spec& spec, spawner* via) {
  if (spec.argv.empty() || spec.argv[0].empty()) return status{errc::invalid_argument, "no program to run"};
  channels ends;
  bool own = true;
  auto keeper = start_keeper(spec, via, ends, own);
  if (!keeper) return keeper.error();
  auto worker = await_start(spec, *keeper, own, ends);
  if (!worker) return worker.error();
  std::unique_ptr<worker_process> p{new worker_process};
  p->pid_ = *worker;
  p->keeper_ = *keeper;
  p->own_keeper_ = own;
  p->subreaper_ = spec.contain.subreaper;
  p->out_ = ends.out;
  p->err_ = ends.err;
  p->rep_ = ends.report;
  p->news_ = ends.news;
  for (int fd : {p->out_, p->err_, p->rep_, p->news_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return p;
}

worker_process::~worker_process() {
  if (!exit_) {
    signal_group(SIGKILL);  // a subreaper keeper then sweeps what is left before it ends
    int st = 0;
    while (own_keeper_ && ::waitpid(keeper_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  close_fd(news_);
  close_fd(out_);
  close_fd(err_);
  close_fd(rep_);
}

namespace {

// Appends the complete lines of `data` (after what `partial` holds) to `lines`, keeping
// the unfinished rest in `partial`; a line longer than `limit` is dropped whole.
void split_lines(const char* data, size_t n, std::string& partial, bool& skipping, size_t limit,
                 std::vector<std::string>& lines, size_t& overlong) {
  const char* end = data + n;
  while (data < end) {
    auto* nl = static_cast<const char*>(std::memchr(data, '\n', static_cast<size_t>(end - data)));
    const char* stop = nl ? nl : end;
    if (!skipping) {
      partial.append(data, static_cast<size_t>(stop - data));
      if (partial.size() > limit) {
        partial.clear();
        skipping = true;
        ++overlong;
      }
    }
    if (!nl) break;
    if (!skipping) lines.push_back(std::move(partial));
    partial.clear();
    skipping = false;
    data = nl + 1;
  }
}

}  // namespace

void worker_process::take(const int& fd, const char* data, size_t n, std::vector<std::string>& reports,
                          std::vector<std::string>* output_lines) {
  if (&fd == &out_) {
    keep_tail(out_tail_, data, n);
    if (output_lines) split_lines(data, n, out_partial_, out_skipping_, max_output_line, *output_lines, overlong_);
    if (forward_) split_lines(data, n, fwd_out_partial_, fwd_out_skipping_, max_forwarded_line, forwarded_, fwd_overlong_);
  } else if (&fd == &err_) {
    keep_tail(err_tail_, data, n);
    if (forward_) split_lines(data, n, fwd_err_partial_, fwd_err_skipping_, max_forwarded_line, forwarded_, fwd_overlong_);
  } else {
    split_lines(data, n, rep_partial_, rep_skipping_, max_report_line, reports, overlong_);
  }
}

void worker_process::read_pipe(int& fd, std::vector<std::string>& reports, std::vector<std::string>* output_lines) {
  char buf[65536];
  for (size_t taken = 0; taken < max_read_per_poll;) {
    ssize_t got = ::read(fd, buf, std::min(sizeof buf, max_read_per_poll - taken));
    if (got > 0) {
      taken += static_cast<size_t>(got);
      take(fd, buf, static_cast<size_t>(got), reports, output_lines);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_fd(fd);
    break;
  }
}

bool worker_process::poll(std::chrono::milliseconds timeout, std::vector<std::string>& reports,
                          std::vector<std::string>* output_lines, int wake_fd) {
  pollfd fds[5];
  int* owners[3];
  nfds_t n = 0;
  for (int* fd : {&out_, &err_, &rep_})
    if (*fd >= 0) {
      fds[n] = {*fd, POLLIN, 0};
      owners[n++] = fd;
    }
  if (n == 0) return false;
  nfds_t pipes = n;
  if (wake_fd >= 0) {  // woken by the caller's descriptor, and by the keeper's news of the end
    fds[n++] = {wake_fd, POLLIN, 0};
    if (news_ >= 0 && !exit_) fds[n++] = {news_, POLLIN, 0};
  }
  int ready = ::poll(fds, n, static_cast<int>(timeout.count()));
  if (ready <= 0) return true;
  for (nfds_t i = 0; i < pipes; ++i)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_pipe(*owners[i], reports, output_lines);
  if (rep_ < 0 && !rep_partial_.empty()) {  // a last line without its newline
    reports.push_back(std::move(rep_partial_));
    rep_partial_.clear();
  }
  if (out_ < 0 && output_lines && !out_partial_.empty()) {
    output_lines->push_back(std::move(out_partial_));
    out_partial_.clear();
  }
  for (auto [fd, partial] : {std::pair{out_, &fwd_out_partial_}, std::pair{err_, &fwd_err_partial_}})
    if (fd < 0 && !partial->empty()) forwarded_.push_back(std::exchange(*partial, {}));  // a last line without its newline
  return out_ >= 0 || err_ >= 0 || rep_ >= 0;
}

std::optional<exit_info> worker_process::try_wait() {
  if (exit_) return exit_;
  // The keeper passes on the worker's wait status, then ends the group, itself last.
  // Its news channel closing without one: it was killed with the worker (a group
  // SIGKILL); that is then the status (the keeper's own, when it is a child of ours).
  spawn_protocol::word_bytes worker_status;
  ssize_t n;
  do n = ::read(news_, worker_status.data(), worker_status.size());
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
  int st = 0;
  bool passed_on = n == static_cast<ssize_t>(worker_status.size());
  if (passed_on && subreaper_) {
    // A subreaper kills what the trial left behind, then says how many had escaped
    // its group (a closed channel without it: the keeper was killed).
    pollfd p{news_, POLLIN, 0};
    spawn_protocol::word_bytes left;
    if (::poll(&p, 1, 10000) > 0 && ::read(news_, left.data(), left.size()) == static_cast<ssize_t>(left.size()))
      left_behind_ = spawn_protocol::decode_word(left);
  }
  if (own_keeper_) {
    while (::waitpid(keeper_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  exit_info e;
  if (passed_on || own_keeper_) {
    if (passed_on) st = spawn_protocol::decode_word(worker_status);
    e.exited = WIFEXITED(st);
    e.code = e.exited ? WEXITSTATUS(st) : WTERMSIG(st);
  } else {
    e.exited = false;
    e.code = SIGKILL;
  }
  close_fd(news_);
  exit_ = e;
  // The worker is gone; anything left in its group goes with it.
  ::kill(-keeper_, SIGKILL);
  return exit_;
}

std::optional<exit_info> worker_process::wait(std::chrono::milliseconds timeout, std::vector<std::string>& reports) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto e = try_wait()) {
      poll(std::chrono::milliseconds(0), reports);  // what it wrote last
      return e;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    if (!poll(std::min(left, std::chrono::milliseconds(20)), reports)) wait_for_end(std::min(left, std::chrono::milliseconds(20)));
  }
}

void worker_process::wait_for_end(std::chrono::milliseconds timeout, int wake_fd) {
  if (exit_ || news_ < 0) return;
  pollfd p[2] = {{news_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  ::poll(p, wake_fd >= 0 ? 2 : 1, static_cast<int>(timeout.count()));
}

void worker_process::signal_group(int sig) {
  if (keeper_ <= 0 || exit_) return;
  // A subreaper must outlive the worker to kill what it leaves behind: SIGKILL goes to the
  // worker, and the keeper kills the rest of the group and every orphan when it ends.
  if (sig == SIGKILL && subreaper_) ::kill(pid_, SIGKILL);
  else ::kill(-keeper_, sig);
}

void worker_process::terminate() { signal_group(SIGTERM); }
void worker_process::kill() { signal_group(SIGKILL); }  // a paused group dies too
void worker_process::pause() { signal_group(SIGSTOP); }
void worker_process::resume() { signal_group(SIGCONT); }

void worker_process::ask_checkpoint() {
  if (pid_ > 0 && !exit_) ::kill(pid_, SIGURG);
}

}  // namespace tune
