#include "tune/trial/process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

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

// In the child: tells the parent why it could not exec, and ends.
[[noreturn]] void fail_with(int fd, int e) {
  (void)!::write(fd, &e, sizeof e);
  ::_exit(127);
}

// A program's own spawner (spawner::serve): the function that runs a worker of this
// very program in the process a fork made, instead of exec (null: none, always exec).
spawner::in_process_fn in_process = nullptr;

// In the worker, after the keeper's fork: only async-signal-safe calls until exec.
// `warm`: a fork (not vfork) of a program's own single-threaded spawner, which runs the
// worker's code in this process instead of exec once its descriptors, signals,
// credentials, folder and environment are the trial's.
[[noreturn]] void exec_worker(const process_spec& spec, char* const* argv, char* const* envp, int out_w, int err_w,
                              int rep_w, int fail_w, pid_t keeper, bool warm = false) {
  // Its account first (a change of credentials clears the death signal set below). Raw
  // system calls: this process only (glibc's wrappers would signal the keeper's threads).
  if (auto& c = spec.run_as; c.uid >= 0) {
    if (::syscall(SYS_setgroups, c.groups.size(), c.groups.data()) != 0 ||
        ::syscall(SYS_setresgid, c.gid, c.gid, c.gid) != 0 || ::syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0)
      fail_with(fail_w, errno);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);       // it dies with its keeper
  if (::getppid() != keeper) ::_exit(127);  // the keeper died before the line above
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // a node blocks its stop signals: not the trial
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  // The channel that tells the node why exec failed: out of the way of 0..3 first.
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
  if (warm) {
    ::close(fail);  // started: what exec's close-on-exec would have said
    environ = const_cast<char**>(envp);
    const char* base = std::strrchr(argv[0], '/');
    ::prctl(PR_SET_NAME, base ? base + 1 : argv[0]);  // not the spawner's name
    int argc = 0;
    while (argv[argc]) ++argc;
    ::_exit(in_process(argc, const_cast<char**>(argv)));
  }
  ::execve(argv[0], argv, envp);
  fail_with(fail, errno);
}

// Whether a program's own spawner runs this worker in a fork of itself: it is this
// very program file with --tune-worker, and nothing in its environment would make a
// fresh start differ (the dynamic loader's variables; LIBTUNE_FRESH_PROCESS asks for
// exec). Before the keeper's fork (it allocates).
bool runs_in_process(const process_spec& spec) {
  if (!in_process || spec.argv.size() < 3 || spec.argv[1] != "--tune-worker") return false;
  struct stat self {}, file {};
  if (::stat("/proc/self/exe", &self) != 0 || ::stat(spec.argv[0].c_str(), &file) != 0 || self.st_dev != file.st_dev ||
      self.st_ino != file.st_ino)
    return false;
  if (spec.env.count("LIBTUNE_FRESH_PROCESS")) return false;
  for (const char* name : {"LD_LIBRARY_PATH", "LD_PRELOAD", "LD_AUDIT", "LD_BIND_NOW", "GLIBC_TUNABLES", "MALLOC_ARENA_MAX"}) {
    const char* mine = std::getenv(name);
    auto theirs = spec.env.find(name);
    if ((mine == nullptr) != (theirs == spec.env.end()) || (mine && theirs->second != mine)) return false;
  }
  return true;
}

// fork(), but the child starts in the cgroup v2 folder `cgroup` (an open descriptor):
// clone3 with CLONE_INTO_CGROUP (Linux 5.7). -1 with errno when the kernel cannot.
pid_t fork_into_cgroup(int cgroup) {
#if defined(SYS_clone3)
  struct {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
  } args{};
  args.flags = 0x200000000ULL;  // CLONE_INTO_CGROUP
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<uint64_t>(cgroup);
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
#else
  (void)cgroup;
  errno = ENOSYS;
  return -1;
#endif
}

// Closes every descriptor but these (async-signal-safe: no allocation).
void close_all_but(int a, int b, int c, int d, int e) {
  int keep[5] = {a, b, c, d, e};
  for (int i = 1; i < 5; ++i)
    for (int j = i; j > 0 && keep[j - 1] > keep[j]; --j) std::swap(keep[j - 1], keep[j]);
  unsigned from = 0;
  for (int k : keep) {
    if (static_cast<unsigned>(k) > from) ::syscall(SYS_close_range, from, static_cast<unsigned>(k - 1), 0u);
    from = static_cast<unsigned>(k) + 1;
  }
  ::syscall(SYS_close_range, from, ~0u, 0u);
}

// The keeper's group, its cgroup.kill file and how it contains the trial, for its
// death-signal handler.
volatile sig_atomic_t keeper_group = 0;
volatile sig_atomic_t keeper_kill_fd = -1;
volatile sig_atomic_t keeper_subreaper = 0;
volatile sig_atomic_t keeper_node_died = 0;

// The node died: in a cgroup, everything in it dies (the keeper too); else the group
// dies, or, for a subreaper, its main loop kills every descendant (it must live for that).
void keeper_on_node_death(int) {
  keeper_node_died = 1;
  if (keeper_kill_fd >= 0 && ::write(keeper_kill_fd, "1", 1) == 1) return;
  if (!keeper_subreaper) ::kill(-static_cast<pid_t>(keeper_group), SIGKILL);
}
void keeper_ignore(int) {}

// Decimal digits of a positive number into `out` (at least 12 bytes); their count.
size_t put_decimal(char* out, long v) {
  char rev[24];
  size_t n = 0;
  do rev[n++] = static_cast<char>('0' + v % 10), v /= 10;
  while (v > 0 && n < sizeof rev);
  for (size_t i = 0; i < n; ++i) out[i] = rev[n - 1 - i];
  return n;
}

// As a child subreaper, after the worker ended: kills every process still below the
// keeper (the worker's children, and orphans reparented to it: setsid, double forks)
// until none is left, reaping them. How many had left the keeper's process group
// (escaped: without a subreaper they would have lived on). Async-signal-safe.
int kill_descendants() {
  char path[64] = "/proc/self/task/";
  size_t at = 16;
  at += put_decimal(path + at, ::getpid());
  const char tail[] = "/children";
  for (size_t i = 0; i < sizeof tail; ++i) path[at + i] = tail[i];
  int escaped = 0;
  int seen[256];
  size_t nseen = 0;
  for (int round = 0; round < 100000; ++round) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    char buf[8192];
    ssize_t n = -1;
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;  // a kernel without /proc/.../children: the group's kill is all there is
    n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) {
      if (::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD) break;  // none left
      timespec ms{0, 1000000};
      ::nanosleep(&ms, nullptr);
      continue;
    }
    long pid = 0;
    for (ssize_t i = 0; i <= n; ++i) {
      char c = i < n ? buf[i] : ' ';
      if (c >= '0' && c <= '9') {
        pid = pid * 10 + (c - '0');
        continue;
      }
      if (pid > 0) {
        bool counted = false;
        for (size_t k = 0; k < nseen; ++k) counted |= seen[k] == pid;
        if (!counted) {
          if (::getpgid(static_cast<pid_t>(pid)) != keeper_group) ++escaped;
          if (nseen < 256) seen[nseen++] = static_cast<int>(pid);
        }
        ::kill(static_cast<pid_t>(pid), SIGKILL);
      }
      pid = 0;
    }
    ::waitpid(-1, nullptr, 0);  // one of them has died (its children are ours now)
  }
  return escaped;
}

// The keeper: the first child, leader of the trial's process group, parent of the
// worker. It exists so that a node killed with SIGKILL still takes everything of its
// trials with it: the worker dies by its own death signal when the keeper goes, and
// the keeper, told of the node's death by a catchable signal, kills the whole group
// (the worker's children included) first. It forwards the worker's pid and, at the
// end, its wait status on `status_w`, then kills what is left of the group, itself
// last. Single-threaded copy of the node: only async-signal-safe calls.
[[noreturn]] void run_keeper(const process_spec& spec, char* const* argv, char* const* envp, int out_w, int err_w,
                             int rep_w, int fail_w, int status_w, pid_t node, int death_signal, const char* join_v2,
                             bool warm) {
  ::setpgid(0, 0);
  // It does not exec, so it would keep every descendant of the node open (other
  // trials' pipes, sockets): it keeps only its own.
  close_all_but(out_w, err_w, rep_w, fail_w, status_w);
  keeper_group = ::getpid();
  pid_t keeper = ::getpid();
  // Into the trial's cgroups before anything else: the worker and all it starts are
  // born there. A failure is the start's error (negative: not exec's).
  char me[24];
  size_t me_len = put_decimal(me, keeper);
  auto join = [&](const char* file) {
    int fd = ::open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, me, me_len) != static_cast<ssize_t>(me_len)) fail_with(fail_w, -(errno ? errno : EIO));
    ::close(fd);
  };
  if (join_v2) join(join_v2);  // not born in its cgroup (no clone3): it moves itself
  for (auto& file : spec.contain.join) join(file.c_str());
  if (!spec.contain.kill.empty()) keeper_kill_fd = ::open(spec.contain.kill.c_str(), O_WRONLY | O_CLOEXEC);
  if (spec.contain.subreaper) {
    keeper_subreaper = 1;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  struct sigaction sa {};
  sa.sa_handler = keeper_on_node_death;
  sigemptyset(&sa.sa_mask);
  ::sigaction(death_signal, &sa, nullptr);  // no SA_RESTART: a subreaper's wait returns
  // Group signals meant for the worker (stop, interrupt) must not end the keeper.
  sa.sa_handler = keeper_ignore;
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) ::sigaction(s, &sa, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_PDEATHSIG, death_signal);
  if (::getppid() != node) keeper_on_node_death(0);  // the node died before the line above
  // vfork: the worker borrows the keeper's memory until exec, so starting it copies no
  // page tables (a fork here cost a copy of the node's whole address space per trial).
  // Until exec it changes only its own descriptors, signal dispositions and mask.
  // A warm start forks: the worker runs on in this image (the spawner's is small).
  pid_t worker = keeper_node_died ? -1 : warm ? ::fork() : ::vfork();
  if (worker < 0 && !keeper_node_died) fail_with(fail_w, errno);
  if (worker == 0) exec_worker(spec, argv, envp, out_w, err_w, rep_w, fail_w, keeper, warm);
  for (int fd : {out_w, err_w, rep_w, fail_w}) ::close(fd);
  int32_t words[3] = {worker, 0, -1};
  write_all(status_w, &words[0], sizeof words[0]);
  int st = 0;
  for (;;) {  // a subreaper reaps the orphans that come to it meanwhile
    if (keeper_node_died && keeper_subreaper) {
      kill_descendants();
      ::kill(-keeper, SIGKILL);  // what is left of the group, then the keeper itself
      ::_exit(0);
    }
    pid_t got = ::waitpid(keeper_subreaper ? -1 : worker, &st, 0);
    if (got == worker || (got < 0 && errno != EINTR)) break;
  }
  words[1] = st;
  write_all(status_w, &words[1], sizeof words[1]);
  if (keeper_subreaper) {  // what the trial left running dies, and the node hears how much escaped
    words[2] = kill_descendants();
    write_all(status_w, &words[2], sizeof words[2]);
  }
  ::close(status_w);
  ::kill(-keeper, SIGKILL);  // the worker's children, then the keeper itself
  ::_exit(0);
}

}  // namespace

namespace {

// Makes the five pipes (standard output, standard error, the report channel, exec's
// failure — closed by exec — and the keeper's news: the worker's pid, then its wait
// status), forks the keeper, which starts the worker, and closes the write ends here.
// The keeper's pid, with the read ends in `read_ends`.
expected<int> fork_keeper(const process_spec& spec, int read_ends[5]) {
  const bool warm = runs_in_process(spec);
  // Everything the child needs is built before fork: it may not allocate after.
  std::vector<std::string> env_strings;
  for (auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  if (warm) env_strings.push_back("TUNE_WARM_START=1");  // what it can tell (docs/trials.md)
  std::vector<char*> argv, envp;
  for (auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int fds[5][2];
  int made = 0;
  for (; made < 5; ++made)
    if (::pipe2(fds[made], O_CLOEXEC) != 0) break;
  auto close_made = [&] {
    for (int i = 0; i < made; ++i) ::close(fds[i][0]), ::close(fds[i][1]);
  };
  if (made < 5) {
    int e = errno;
    close_made();
    return status{errc::insufficient, std::string{"pipe: "} + ::strerror(e)};
  }
  auto& [out, err, rep, fail, news] = fds;
  pid_t parent = ::getpid();
  // The keeper's news of its parent's death: a real-time signal nobody sends by habit
  // (a trial signalling its own process group with SIGUSR1 must not end itself).
  int death_signal = SIGRTMIN + 7;
  // Born in the trial's cgroup when it has one (no move: tune/trial/cgroup.hpp says why).
  std::string procs = spec.contain.into.empty() ? "" : spec.contain.into + "/cgroup.procs";
  int cgroup = -1;
  if (!spec.contain.into.empty() && (cgroup = ::open(spec.contain.into.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    int e = errno;
    close_made();
    return status{errc::insufficient, "its cgroup " + spec.contain.into + ": " + ::strerror(e)};
  }
  pid_t keeper = cgroup >= 0 ? fork_into_cgroup(cgroup) : ::fork();
  bool born_inside = cgroup >= 0 && keeper >= 0;
  if (keeper < 0 && cgroup >= 0 && (errno == ENOSYS || errno == EINVAL || errno == E2BIG || errno == EPERM))
    keeper = ::fork();  // a kernel without clone3 into cgroups: the keeper moves itself
  if (cgroup >= 0) ::close(cgroup);
  if (keeper < 0) {
    int e = errno;
    close_made();
    return status{errc::insufficient, std::string{"fork: "} + ::strerror(e)};
  }
  if (keeper == 0) {
    ::close(news[0]);
    run_keeper(spec, argv.data(), envp.data(), out[1], err[1], rep[1], fail[1], news[1], parent, death_signal,
               born_inside || procs.empty() ? nullptr : procs.c_str(), warm);
  }
  ::setpgid(keeper, keeper);  // also here: no window in which a signal to the group misses it
  for (int i = 0; i < 5; ++i) {
    ::close(fds[i][1]);
    read_ends[i] = fds[i][0];
  }
  return keeper;
}

bool read_full(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool send_full(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    ssize_t w = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    at += static_cast<size_t>(w);
  }
  return true;
}

// A spawn request: the process_spec as length-prefixed strings.
void put(std::string& out, const std::string& s) {
  auto n = static_cast<uint32_t>(s.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += s;
}

bool take(const std::string& in, size_t& at, std::string& s) {
  uint32_t n = 0;
  if (in.size() - at < sizeof n) return false;
  std::memcpy(&n, in.data() + at, sizeof n);
  at += sizeof n;
  if (in.size() - at < n) return false;
  s.assign(in, at, n);
  at += n;
  return true;
}

std::string encode(const process_spec& spec) {
  std::string body;
  put(body, std::to_string(spec.argv.size()));
  for (auto& a : spec.argv) put(body, a);
  put(body, std::to_string(spec.env.size()));
  for (auto& [k, v] : spec.env) put(body, k), put(body, v);
  put(body, spec.cwd);
  put(body, spec.contain.into);
  put(body, std::to_string(spec.contain.join.size()));
  for (auto& j : spec.contain.join) put(body, j);
  put(body, spec.contain.kill);
  put(body, spec.contain.subreaper ? "1" : "0");
  put(body, std::to_string(spec.run_as.uid));
  put(body, std::to_string(spec.run_as.gid));
  put(body, std::to_string(spec.run_as.groups.size()));
  for (auto g : spec.run_as.groups) put(body, std::to_string(g));
  std::string frame;
  put(frame, body);
  return frame;
}

bool decode(const std::string& in, process_spec& spec) {
  size_t at = 0;
  std::string count;
  if (!take(in, at, count)) return false;
  size_t n = std::strtoul(count.c_str(), nullptr, 10);
  if (n > in.size()) return false;  // each takes 4 bytes at least
  spec.argv.resize(n);
  for (auto& a : spec.argv)
    if (!take(in, at, a)) return false;
  if (!take(in, at, count)) return false;
  n = std::strtoul(count.c_str(), nullptr, 10);
  for (size_t i = 0; i < n; ++i) {
    std::string k, v;
    if (!take(in, at, k) || !take(in, at, v)) return false;
    spec.env[k] = v;
  }
  if (!take(in, at, spec.cwd) || !take(in, at, spec.contain.into) || !take(in, at, count)) return false;
  n = std::strtoul(count.c_str(), nullptr, 10);
  if (n > in.size()) return false;
  spec.contain.join.resize(n);
  for (auto& j : spec.contain.join)
    if (!take(in, at, j)) return false;
  std::string subreaper;
  if (!take(in, at, spec.contain.kill) || !take(in, at, subreaper)) return false;
  spec.contain.subreaper = subreaper == "1";
  std::string uid, gid;
  if (!take(in, at, uid) || !take(in, at, gid) || !take(in, at, count)) return false;
  spec.run_as.uid = std::strtoll(uid.c_str(), nullptr, 10);
  spec.run_as.gid = std::strtoll(gid.c_str(), nullptr, 10);
  n = std::strtoul(count.c_str(), nullptr, 10);
  if (n > in.size()) return false;
  spec.run_as.groups.resize(n);
  for (auto& g : spec.run_as.groups) {
    std::string one;
    if (!take(in, at, one)) return false;
    g = static_cast<uint32_t>(std::strtoul(one.c_str(), nullptr, 10));
  }
  return at == in.size() && !spec.argv.empty();
}

// The spawner's life: one request at a time on `sock` (a frame: the encoded spec), one
// answer each ({keeper pid, errno} and, when it worked, the five read ends). It ends
// when the other end closes; its keepers, whose death signal is tied to it, then kill
// their groups. It reaps its keepers as they end.
[[noreturn]] void run_spawner(int sock) {
  ::prctl(PR_SET_NAME, "tune-spawner");
  // Nothing of its parent's but the channel; standard streams on /dev/null.
  close_all_but(0, 1, 2, sock, sock);
  int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    if (null > 2) ::close(null);
  }
  // Signals to its parent's group (a terminal's ^C, a stop) are not for it: it ends
  // with its channel, after its parent has dealt with the trials.
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) ::signal(s, SIG_IGN);
  // A keeper that ends is reaped at once: SIGCHLD (blocked but while it waits in
  // ppoll, so none is missed) interrupts the wait.
  struct sigaction sa {};
  sa.sa_handler = keeper_ignore;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCHLD, &sa, nullptr);
  sigset_t only_chld, none;
  sigemptyset(&only_chld);
  sigaddset(&only_chld, SIGCHLD);
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &only_chld, nullptr);
  for (;;) {
    pollfd p{sock, POLLIN, 0};
    timespec second{1, 0};
    int ready = ::ppoll(&p, 1, &second, &none);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    uint32_t n = 0;
    if (!read_full(sock, &n, sizeof n)) break;  // the parent is gone
    std::string body(n, '\0');
    if (!read_full(sock, body.data(), n)) break;
    process_spec spec;
    int32_t answer[2] = {0, 0};
    int fds[5] = {-1, -1, -1, -1, -1};
    if (!decode(body, spec)) {
      answer[1] = EINVAL;
    } else if (auto keeper = fork_keeper(spec, fds); !keeper) {
      answer[1] = errno ? errno : EAGAIN;
    } else {
      answer[0] = *keeper;
    }
    msghdr msg{};
    iovec iov{answer, sizeof answer};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)];
    if (answer[1] == 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof fds);
      std::memcpy(CMSG_DATA(c), fds, sizeof fds);
    }
    ssize_t sent;
    do sent = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (sent < 0 && errno == EINTR);
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    if (sent != static_cast<ssize_t>(sizeof answer)) break;
  }
  ::_exit(0);
}

}  // namespace

expected<std::shared_ptr<spawner>> spawner::start_with(const std::function<void(int)>& child) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return status{errc::insufficient, std::string{"socketpair: "} + ::strerror(errno)};
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return status{errc::insufficient, std::string{"fork: "} + ::strerror(e)};
  }
  if (pid == 0) {
    ::close(sv[0]);
    child(sv[1]);
    ::_exit(127);
  }
  ::close(sv[1]);
  std::shared_ptr<spawner> s{new spawner};
  s->sock_ = sv[0];
  s->pid_ = pid;
  return s;
}

expected<std::shared_ptr<spawner>> spawner::start() {
  return start_with([](int channel) { run_spawner(channel); });
}

void spawner::serve(int channel, in_process_fn fn) {
  in_process = fn;
  run_spawner(channel);
}

expected<std::shared_ptr<spawner>> spawner::start_program(const std::vector<std::string>& argv,
                                                          const std::map<std::string, std::string>& env) {
  if (argv.empty()) return status{errc::invalid_argument, "no spawner program"};
  // Everything the child needs is built before fork: it may not allocate after.
  std::vector<std::string> env_strings;
  for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  return start_with([&](int end) {  // only async-signal-safe calls until exec
    int channel = ::fcntl(end, F_DUPFD, 100);  // out of the way of 0..3 first
    int null = ::open("/dev/null", O_RDWR);
    if (channel < 0 || null < 0) ::_exit(127);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    if (::dup2(channel, 3) < 0) ::_exit(127);  // a dup: not close-on-exec
    ::syscall(SYS_close_range, 4u, ~0u, 0u);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), envp.data());
  });
}

bool spawner::gone() {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_;
}

spawner::~spawner() {
  if (sock_ >= 0) ::close(sock_);
  int st = 0;
  while (pid_ > 0 && ::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
}

expected<int> spawner::spawn(const process_spec& spec, int fds[5], bool& usable) {
  std::lock_guard<std::mutex> lock(mu_);
  auto gone = [&](const std::string& why) -> expected<int> {
    gone_ = true;
    usable = false;
    return status{errc::not_found, "the spawner (pid " + std::to_string(pid_) + ") is gone: " + why};
  };
  usable = !gone_;
  if (gone_) return status{errc::not_found, "the spawner is gone"};
  if (!send_full(sock_, encode(spec))) return gone(::strerror(errno));
  int32_t answer[2] = {0, 0};
  msghdr msg{};
  iovec iov{answer, sizeof answer};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 5)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got;
  do got = ::recvmsg(sock_, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got <= 0) return gone(got == 0 ? "it closed its channel" : ::strerror(errno));
  int received = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      received = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      std::memcpy(fds, CMSG_DATA(c), sizeof(int) * static_cast<size_t>(std::min(received, 5)));
    }
  // The rest of a short read (the descriptors came with its first byte).
  if (got < static_cast<ssize_t>(sizeof answer) &&
      !read_full(sock_, reinterpret_cast<char*>(answer) + got, sizeof answer - static_cast<size_t>(got)))
    return gone("a short answer");
  if (answer[1] != 0) return status{errc::insufficient, std::string{"the spawner could not start it: "} + ::strerror(answer[1])};
  if (received != 5) return gone("an answer without its pipes");
  return answer[0];
}

expected<std::unique_ptr<worker_process>> worker_process::start(const process_spec& spec, spawner* via) {
  if (spec.argv.empty() || spec.argv[0].empty()) return status{errc::invalid_argument, "no program to run"};
  int fds[5];
  bool own = true;
  expected<int> made = status{errc::not_found, "not started"};
  if (via) {
    bool usable = true;
    made = via->spawn(spec, fds, usable);
    own = false;
    if (!made && !usable) {  // the spawner is gone: a child of this process instead
      made = fork_keeper(spec, fds);
      own = true;
    }
  } else {
    made = fork_keeper(spec, fds);
  }
  if (!made) return made.error();
  pid_t keeper = *made;
  auto& [out, err, rep, fail, news] = fds;
  int32_t child_errno = 0, worker = 0;
  bool exec_failed = read_full(fail, &child_errno, sizeof child_errno);  // EOF once the worker runs the program
  ::close(fail);
  bool have_worker = read_full(news, &worker, sizeof worker);
  if (exec_failed || !have_worker) {  // the keeper or the worker could not start: both end
    for (int fd : {out, err, rep, news}) ::close(fd);
    ::kill(-keeper, SIGKILL);
    int st = 0;
    while (own && ::waitpid(keeper, &st, 0) < 0 && errno == EINTR) {
    }
    if (exec_failed && child_errno < 0)  // the keeper could not join the trial's cgroups
      return status{errc::insufficient, "cannot move " + spec.argv[0] + " into its cgroup (" +
                                            (spec.contain.join.empty() ? std::string{"?"} : spec.contain.join.front()) +
                                            "): " + ::strerror(-child_errno)};
    return status{errc::invalid_argument, "cannot start " + spec.argv[0] + ": " +
                                              (exec_failed ? ::strerror(child_errno) : "its keeper process died")};
  }
  std::unique_ptr<worker_process> p{new worker_process};
  p->pid_ = worker;
  p->keeper_ = keeper;
  p->own_keeper_ = own;
  p->subreaper_ = spec.contain.subreaper;
  p->out_ = out;
  p->err_ = err;
  p->rep_ = rep;
  p->news_ = news;
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
  char buf[65536];
  for (nfds_t i = 0; i < pipes; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    int& fd = *owners[i];
    for (size_t taken = 0; taken < max_read_per_poll;) {
      ssize_t got = ::read(fd, buf, std::min(sizeof buf, max_read_per_poll - taken));
      if (got > 0) {
        auto n = static_cast<size_t>(got);
        taken += n;
        if (&fd == &out_) {
          keep_tail(out_tail_, buf, n);
          if (output_lines) split_lines(buf, n, out_partial_, out_skipping_, max_output_line, *output_lines, overlong_);
        } else if (&fd == &err_) {
          keep_tail(err_tail_, buf, n);
        } else {
          split_lines(buf, n, rep_partial_, rep_skipping_, max_report_line, reports, overlong_);
        }
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_fd(fd);
      break;
    }
  }
  if (rep_ < 0 && !rep_partial_.empty()) {  // a last line without its newline
    reports.push_back(std::move(rep_partial_));
    rep_partial_.clear();
  }
  if (out_ < 0 && output_lines && !out_partial_.empty()) {
    output_lines->push_back(std::move(out_partial_));
    out_partial_.clear();
  }
  return out_ >= 0 || err_ >= 0 || rep_ >= 0;
}

std::optional<exit_info> worker_process::try_wait() {
  if (exit_) return exit_;
  // The keeper passes on the worker's wait status, then ends the group, itself last.
  // Its news channel closing without one: it was killed with the worker (a group
  // SIGKILL); that is then the status (the keeper's own, when it is a child of ours).
  int32_t worker_status = 0;
  ssize_t n;
  do n = ::read(news_, &worker_status, sizeof worker_status);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
  int st = 0;
  bool passed_on = n == static_cast<ssize_t>(sizeof worker_status);
  if (passed_on && subreaper_) {
    // A subreaper kills what the trial left behind, then says how many had escaped
    // its group (a closed channel without it: the keeper was killed).
    pollfd p{news_, POLLIN, 0};
    int32_t left = -1;
    if (::poll(&p, 1, 10000) > 0 && ::read(news_, &left, sizeof left) == static_cast<ssize_t>(sizeof left)) left_behind_ = left;
  }
  if (own_keeper_) {
    while (::waitpid(keeper_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  exit_info e;
  if (passed_on || own_keeper_) {
    if (passed_on) st = worker_status;
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

}  // namespace tune
