#include "tune/trial/worker.hpp"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace tune::worker {

namespace {

spawner::in_process_fn in_process = nullptr;

// Its account first (a change of credentials clears the death signal set after it).
// Raw system calls: this process only (glibc's wrappers would signal the keeper's
// threads). Then it dies with its keeper, and none of the node's signal settings stay.
void take_account_and_signals(const start_args& a) {
  if (auto& c = a.spec->run_as; c.uid >= 0) {
    if (::syscall(SYS_setgroups, c.groups.size(), c.groups.data()) != 0 ||
        ::syscall(SYS_setresgid, c.gid, c.gid, c.gid) != 0 || ::syscall(SYS_setresuid, c.uid, c.uid, c.uid) != 0)
      fail_with(a.ends.fail, errno);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);         // it dies with its keeper
  if (::getppid() != a.keeper) ::_exit(127);  // the keeper died before the line above
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // a node blocks its stop signals: not the trial
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
}

// 0 on /dev/null, 1, 2 and 3 the pipes, nothing else of the node's (sockets, files);
// the fail channel moved out of the way of 0..3 (the descriptor it is now).
int take_descriptors(const start_args& a) {
  int fail = ::fcntl(a.ends.fail, F_DUPFD_CLOEXEC, 64);
  if (fail < 0) ::_exit(127);
  int null = ::open("/dev/null", O_RDONLY);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(a.ends.out, 1) < 0 || ::dup2(a.ends.err, 2) < 0 ||
      ::dup2(a.ends.report, worker_process::report_fd) < 0)
    fail_with(fail, errno);
  if (::syscall(SYS_close_range, 4u, static_cast<unsigned>(fail - 1), 0u) != 0 ||
      ::syscall(SYS_close_range, static_cast<unsigned>(fail + 1), ~0u, 0u) != 0)
    for (int fd = 4; fd < 4096; ++fd)
      if (fd != fail) ::close(fd);
  return fail;
}

// A fork of a program's own single-threaded spawner runs the worker's code here once
// its descriptors, signals, credentials, folder and environment are the trial's.
[[noreturn]] void run_here(const start_args& a, int fail) {
  ::close(fail);  // started: what exec's close-on-exec would have said
  environ = const_cast<char**>(a.envp);
  const char* base = std::strrchr(a.argv[0], '/');
  ::prctl(PR_SET_NAME, base ? base + 1 : a.argv[0]);  // not the spawner's name
  int argc = 0;
  while (a.argv[argc]) ++argc;
  ::_exit(in_process(argc, const_cast<char**>(a.argv)));
}

}  // namespace

void fail_with(int fd, int e) {
  spawn_protocol::write_word(fd, e);
  ::_exit(127);
}

void become(const start_args& a) {
  take_account_and_signals(a);
  int fail = take_descriptors(a);
  if (!a.spec->cwd.empty() && ::chdir(a.spec->cwd.c_str()) != 0) fail_with(fail, errno);
  if (a.warm) run_here(a, fail);
  ::execve(a.argv[0], a.argv, a.envp);
  fail_with(fail, errno);
}

void set_in_process(spawner::in_process_fn fn) { in_process = fn; }

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

}  // namespace tune::worker
