#include "tune/trial/keeper.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "tune/trial/worker.hpp"

namespace tune::keeper {

namespace {

// The keeper's group, its cgroup.kill file and how it contains the trial, for its
// death-signal handler.
volatile sig_atomic_t keeper_group = 0;
volatile sig_atomic_t keeper_kill_fd = -1;
volatile sig_atomic_t keeper_subreaper = 0;
volatile sig_atomic_t keeper_node_died = 0;

// The node died: in a cgroup, everything in it dies (the keeper too); else the group
// dies, or, for a subreaper, its main loop kills every descendant (it must live for that).
void on_node_death(int) {
  keeper_node_died = 1;
  if (keeper_kill_fd >= 0 && ::write(keeper_kill_fd, "1", 1) == 1) return;
  if (!keeper_subreaper) ::kill(-static_cast<pid_t>(keeper_group), SIGKILL);
}
void ignore(int) {}

// Decimal digits of a positive number into `out` (at least 12 bytes); their count.
size_t put_decimal(char* out, long v) {
  char rev[24];
  size_t n = 0;
  do rev[n++] = static_cast<char>('0' + v % 10), v /= 10;
  while (v > 0 && n < sizeof rev);
  for (size_t i = 0; i < n; ++i) out[i] = rev[n - 1 - i];
  return n;
}

// Kills every process listed in a /proc/.../children text (`buf`, n bytes), counting
// those seen for the first time that are not in the keeper's group.
int kill_listed(const char* buf, ssize_t n, int* seen, size_t& nseen) {
  int escaped = 0;
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
  return escaped;
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
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;  // a kernel without /proc/.../children: the group's kill is all there is
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) {
      if (::waitpid(-1, nullptr, WNOHANG) < 0 && errno == ECHILD) break;  // none left
      timespec ms{0, 1000000};
      ::nanosleep(&ms, nullptr);
      continue;
    }
    escaped += kill_listed(buf, n, seen, nseen);
    ::waitpid(-1, nullptr, 0);  // one of them has died (its children are ours now)
  }
  return escaped;
}

// What the keeper needs, built before its fork (it may not allocate after).
struct keeper_args {
  worker::start_args worker;  // the worker's, with the write ends
  int news = -1;              // the news pipe's write end
  pid_t node = -1;            // its parent
  const char* join_v2 = nullptr;  // cgroup.procs to move into (not born in its cgroup)
};

// Into the trial's cgroups before anything else: the worker and all it starts are born
// there. A failure is the start's error (negative: not exec's).
void join_cgroups(const keeper_args& a, pid_t me) {
  char text[24];
  size_t len = put_decimal(text, me);
  auto join = [&](const char* file) {
    int fd = ::open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, text, len) != static_cast<ssize_t>(len)) worker::fail_with(a.worker.ends.fail, -(errno ? errno : EIO));
    ::close(fd);
  };
  if (a.join_v2) join(a.join_v2);  // not born in its cgroup (no clone3): it moves itself
  for (auto& file : a.worker.spec->contain.join) join(file.c_str());
}

// The keeper's own settings: its group, its descriptors (it does not exec, so it would
// keep every descendant of the node open: other trials' pipes, sockets), its cgroups,
// how it contains the trial, its signals and its death signal.
void become_keeper(const keeper_args& a) {
  ::setpgid(0, 0);
  const channels& w = a.worker.ends;
  close_all_but(w.out, w.err, w.report, w.fail, a.news);
  keeper_group = ::getpid();
  join_cgroups(a, ::getpid());
  auto& contain = a.worker.spec->contain;
  if (!contain.kill.empty()) keeper_kill_fd = ::open(contain.kill.c_str(), O_WRONLY | O_CLOEXEC);
  if (contain.subreaper) {
    keeper_subreaper = 1;
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  struct sigaction sa {};
  sa.sa_handler = on_node_death;
  sigemptyset(&sa.sa_mask);
  ::sigaction(death_signal(), &sa, nullptr);  // no SA_RESTART: a subreaper's wait returns
  // Group signals meant for the worker (stop, interrupt) must not end the keeper.
  sa.sa_handler = ignore;
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) ::sigaction(s, &sa, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_PDEATHSIG, death_signal());
  if (::getppid() != a.node) on_node_death(0);  // the node died before the line above
}

[[noreturn]] void run_keeper(keeper_args a) {
  become_keeper(a);
  pid_t keeper = ::getpid();
  a.worker.keeper = keeper;
  // vfork: the worker borrows the keeper's memory until exec, so starting it copies no
  // page tables (a fork here cost a copy of the node's whole address space per trial).
  // Until exec it changes only its own descriptors, signal dispositions and mask.
  // A warm start forks: the worker runs on in this image (the spawner's is small).
  pid_t pid = keeper_node_died ? -1 : a.worker.warm ? ::fork() : ::vfork();
  if (pid < 0 && !keeper_node_died) worker::fail_with(a.worker.ends.fail, errno);
  if (pid == 0) worker::become(a.worker);
  const channels& w = a.worker.ends;
  for (int fd : {w.out, w.err, w.report, w.fail}) ::close(fd);
  spawn_protocol::write_word(a.news, pid);
  int st = 0;
  for (;;) {  // a subreaper reaps the orphans that come to it meanwhile
    if (keeper_node_died && keeper_subreaper) {
      kill_descendants();
      ::kill(-keeper, SIGKILL);  // what is left of the group, then the keeper itself
      ::_exit(0);
    }
    pid_t got = ::waitpid(keeper_subreaper ? -1 : pid, &st, 0);
    if (got == pid || (got < 0 && errno != EINTR)) break;
  }
  spawn_protocol::write_word(a.news, st);
  // What the trial left running dies, and the node hears how much escaped.
  if (keeper_subreaper) spawn_protocol::write_word(a.news, kill_descendants());
  ::close(a.news);
  ::kill(-keeper, SIGKILL);  // the worker's children, then the keeper itself
  ::_exit(0);
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

// The five pipes, close-on-exec (the worker dups what it keeps): read ends in `r`, write
// ends in `w`; false (none left open) when one cannot be made.
bool make_pipes(channels& r, channels& w) {
  int* reads[] = {&r.out, &r.err, &r.report, &r.fail, &r.news};
  int* writes[] = {&w.out, &w.err, &w.report, &w.fail, &w.news};
  for (size_t i = 0; i < std::size(reads); ++i) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      int e = errno;
      for (size_t j = 0; j < i; ++j) ::close(*reads[j]), ::close(*writes[j]);
      errno = e;
      return false;
    }
    *reads[i] = p[0];
    *writes[i] = p[1];
  }
  return true;
}

void close_all(const channels& c) {
  for (int fd : spawn_protocol::in_order(c))
    if (fd >= 0) ::close(fd);
}

// Forks the keeper, born in the cgroup v2 folder `cgroup` (an open descriptor) when
// there is one (no move: cgroup.hpp says why); when the kernel cannot, a plain fork whose
// child moves itself (`moves`). -1 with errno.
pid_t fork_keeper(int cgroup, bool& moves) {
  moves = false;
  if (cgroup < 0) return ::fork();
  pid_t keeper = fork_into_cgroup(cgroup);
  if (keeper < 0 && (errno == ENOSYS || errno == EINVAL || errno == E2BIG || errno == EPERM)) {
    moves = true;
    keeper = ::fork();  // a kernel without clone3 into cgroups
  }
  return keeper;
}

}  // namespace

int death_signal() { return SIGRTMIN + 7; }

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

expected<int> start(const process_spec& spec, channels& read_ends) {
  const bool warm = worker::runs_in_process(spec);
  // Everything the child needs is built before fork: it may not allocate after.
  std::vector<std::string> env_strings;
  for (auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  if (warm) env_strings.push_back("TUNE_WARM_START=1");  // what it can tell (docs/trials.md)
  std::vector<char*> argv, envp;
  for (auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::string procs = spec.contain.into.empty() ? "" : spec.contain.into + "/cgroup.procs";
  keeper_args args{{&spec, argv.data(), envp.data(), {}, -1, warm}, -1, ::getpid(), nullptr};
  channels r;
  if (!make_pipes(r, args.worker.ends)) return status{errc::insufficient, std::string{"pipe: "} + ::strerror(errno)};
  const channels& w = args.worker.ends;
  args.news = w.news;
  int cgroup = -1;
  if (!spec.contain.into.empty() && (cgroup = ::open(spec.contain.into.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    int e = errno;
    close_all(r), close_all(w);
    return status{errc::insufficient, "its cgroup " + spec.contain.into + ": " + ::strerror(e)};
  }
  bool moves = false;
  pid_t keeper = fork_keeper(cgroup, moves);
  int e = errno;
  if (cgroup >= 0) ::close(cgroup);
  if (keeper == 0) {
    ::close(r.news);
    if (moves) args.join_v2 = procs.c_str();
    run_keeper(args);
  }
  close_all(w);
  if (keeper < 0) {
    close_all(r);
    return status{errc::insufficient, std::string{"fork: "} + ::strerror(e)};
  }
  ::setpgid(keeper, keeper);  // also here: no window in which a signal to the group misses it
  read_ends = r;
  return keeper;
}

}  // namespace tune::keeper
