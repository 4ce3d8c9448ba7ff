#include "tune/trial/process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace tune {

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

// In the child: tells the parent why it could not exec, and ends.
[[noreturn]] void fail_with(int fd, int e) {
  (void)!::write(fd, &e, sizeof e);
  ::_exit(127);
}

// In the child, after fork: only async-signal-safe calls until exec.
[[noreturn]] void exec_child(const process_spec& spec, char* const* argv, char* const* envp, int out_w, int err_w,
                             int rep_w, int fail_w, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before the line above
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // a node blocks its stop signals: not the trial
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  // The channel that tells the parent why exec failed: out of the way of 0..3 first.
  int fail = ::fcntl(fail_w, F_DUPFD_CLOEXEC, 64);
  if (fail < 0) ::_exit(127);
  int null = ::open("/dev/null", O_RDONLY);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(out_w, 1) < 0 || ::dup2(err_w, 2) < 0 ||
      ::dup2(rep_w, worker_process::report_fd) < 0)
    fail_with(fail, errno);
  // Nothing else of the node's leaks into the trial (sockets, files).
  if (::syscall(SYS_close_range, 4u, static_cast<unsigned>(fail - 1), 0u) != 0 ||
      ::syscall(SYS_close_range, static_cast<unsigned>(fail + 1), ~0u, 0u) != 0)
    for (int fd = 4; fd < 4096; ++fd)
      if (fd != fail) ::close(fd);
  if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) fail_with(fail, errno);
  ::execve(argv[0], argv, envp);
  fail_with(fail, errno);
}

}  // namespace

expected<std::unique_ptr<worker_process>> worker_process::start(const process_spec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) return status{errc::invalid_argument, "no program to run"};
  // Everything the child needs is built before fork: it may not allocate after.
  std::vector<std::string> env_strings;
  for (auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2], err[2], rep[2], fail[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return status{errc::insufficient, std::string{"pipe: "} + ::strerror(errno)};
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]), ::close(out[1]);
    return status{errc::insufficient, std::string{"pipe: "} + ::strerror(errno)};
  }
  if (::pipe2(rep, O_CLOEXEC) != 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    return status{errc::insufficient, std::string{"pipe: "} + ::strerror(errno)};
  }
  if (::pipe2(fail, O_CLOEXEC) != 0) {
    for (int fd : {out[0], out[1], err[0], err[1], rep[0], rep[1]}) ::close(fd);
    return status{errc::insufficient, std::string{"pipe: "} + ::strerror(errno)};
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1], rep[0], rep[1], fail[0], fail[1]}) ::close(fd);
    return status{errc::insufficient, std::string{"fork: "} + ::strerror(errno)};
  }
  if (pid == 0) exec_child(spec, argv.data(), envp.data(), out[1], err[1], rep[1], fail[1], parent);
  ::setpgid(pid, pid);  // also here: no window in which a signal to the group misses it
  for (int fd : {out[1], err[1], rep[1], fail[1]}) ::close(fd);
  int child_errno = 0;
  ssize_t n;
  do n = ::read(fail[0], &child_errno, sizeof child_errno);
  while (n < 0 && errno == EINTR);
  ::close(fail[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {  // exec failed: the child has exited
    for (int fd : {out[0], err[0], rep[0]}) ::close(fd);
    int st = 0;
    ::waitpid(pid, &st, 0);
    return status{errc::invalid_argument,
                  "cannot start " + spec.argv[0] + ": " + ::strerror(child_errno)};
  }
  std::unique_ptr<worker_process> p{new worker_process};
  p->pid_ = pid;
  p->out_ = out[0];
  p->err_ = err[0];
  p->rep_ = rep[0];
  for (int fd : {p->out_, p->err_, p->rep_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return p;
}

worker_process::~worker_process() {
  if (!exit_) {
    signal_group(SIGKILL);
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  close_fd(out_);
  close_fd(err_);
  close_fd(rep_);
}

bool worker_process::poll(std::chrono::milliseconds timeout, std::vector<std::string>& reports) {
  pollfd fds[3];
  int* owners[3];
  nfds_t n = 0;
  for (int* fd : {&out_, &err_, &rep_})
    if (*fd >= 0) {
      fds[n] = {*fd, POLLIN, 0};
      owners[n++] = fd;
    }
  if (n == 0) return false;
  int ready = ::poll(fds, n, static_cast<int>(timeout.count()));
  if (ready <= 0) return true;
  char buf[65536];
  for (nfds_t i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    int& fd = *owners[i];
    for (;;) {
      ssize_t got = ::read(fd, buf, sizeof buf);
      if (got > 0) {
        if (&fd == &out_) keep_tail(out_tail_, buf, static_cast<size_t>(got));
        else if (&fd == &err_) keep_tail(err_tail_, buf, static_cast<size_t>(got));
        else rep_partial_.append(buf, static_cast<size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_fd(fd);
      break;
    }
  }
  for (size_t nl; (nl = rep_partial_.find('\n')) != std::string::npos;) {
    reports.push_back(rep_partial_.substr(0, nl));
    rep_partial_.erase(0, nl + 1);
  }
  if (rep_ < 0 && !rep_partial_.empty()) {  // a last line without its newline
    reports.push_back(std::move(rep_partial_));
    rep_partial_.clear();
  }
  return out_ >= 0 || err_ >= 0 || rep_ >= 0;
}

std::optional<exit_info> worker_process::try_wait() {
  if (exit_) return exit_;
  int st = 0;
  pid_t r;
  do r = ::waitpid(pid_, &st, WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r != pid_) return std::nullopt;
  exit_info e;
  e.exited = WIFEXITED(st);
  e.code = e.exited ? WEXITSTATUS(st) : WTERMSIG(st);
  exit_ = e;
  // The worker is gone; children it left in its group go with it.
  ::kill(-pid_, SIGKILL);
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
    if (!poll(std::min(left, std::chrono::milliseconds(20)), reports))
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(5)));
  }
}

void worker_process::signal_group(int sig) {
  if (pid_ > 0 && !exit_) ::kill(-pid_, sig);
}

void worker_process::terminate() { signal_group(SIGTERM); }
void worker_process::kill() { signal_group(SIGKILL); }  // a paused group dies too
void worker_process::pause() { signal_group(SIGSTOP); }
void worker_process::resume() { signal_group(SIGCONT); }

}  // namespace tune
