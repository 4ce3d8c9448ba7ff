#include "daemon.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <thread>

#include "log.hpp"

namespace tune::cli {

expected<std::string> runtime_dir(const std::string& option) {
  std::string dir = option;
  // As root, trials run as another account (nobody) in folders below this one: it must
  // be searchable (0711: others may pass, not list), and not a login session's folder
  // ($XDG_RUNTIME_DIR: 0700, and removed at logout, while the daemons outlive it).
  bool root = ::geteuid() == 0;
  if (dir.empty()) {
    if (const char* e = std::getenv("TUNE_RUNTIME_DIR"); e && *e) dir = e;
    else if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x && !root) dir = std::string{x} + "/libtune";
    else dir = "/tmp/libtune-" + std::to_string(::getuid());
  }
  if (::mkdir(dir.c_str(), root ? 0711 : 0700) != 0 && errno != EEXIST)
    return status{errc::invalid_argument, "cannot create the runtime directory " + dir + ": " + std::strerror(errno)};
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return status{errc::invalid_argument, "the runtime directory " + dir + " is not a directory"};
  if (st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
    return status{errc::invalid_argument, "the runtime directory " + dir +
                                              " belongs to another user or others may write to it; "
                                              "give --runtime-dir or TUNE_RUNTIME_DIR a private one"};
  if (root && (st.st_mode & 0011) != 0011) ::chmod(dir.c_str(), (st.st_mode & 07777) | 0011);
  return dir;
}

int live_pid(const std::string& pid_file) {
  std::ifstream in{pid_file};
  int pid = 0;
  if (!(in >> pid) || pid <= 1) return 0;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return 0;
  // The pid may have been reused by another program: it must be a tune process.
  std::ifstream cmd{"/proc/" + std::to_string(pid) + "/cmdline"};
  std::string argv0;
  std::getline(cmd, argv0, '\0');
  auto base = argv0.substr(argv0.rfind('/') == std::string::npos ? 0 : argv0.rfind('/') + 1);
  return base == "tune" ? pid : 0;
}

status write_pid_file(const std::string& path) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out{tmp};
    out << ::getpid() << "\n";
    if (!out) return {errc::invalid_argument, "cannot write " + tmp + ": " + std::strerror(errno)};
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return {errc::invalid_argument, "cannot write " + path + ": " + std::strerror(errno)};
  return status::ok();
}

void readiness::tell(bool ok, const std::string& message) {
  if (told_) return;
  told_ = true;
  if (fd_ < 0) {
    (ok ? std::cout : std::cerr) << message << std::endl;
    return;
  }
  std::string line = (ok ? "+" : "-") + message;
  (void)!::write(fd_, line.data(), line.size());
  ::close(fd_);
}

sigset_t service_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

void exit_watchdog(std::chrono::seconds limit) {
  std::thread([limit] {
    std::this_thread::sleep_for(limit);
    log_line("shutdown took longer than " + std::to_string(limit.count()) + " s; exiting now");
    std::_Exit(1);
  }).detach();
}

namespace {

// The daemon's side of run_service: a session of its own, output to the log.
[[noreturn]] void run_daemon(int ready_fd, const std::string& log_file, const std::function<int(readiness&)>& service) {
  ::setsid();
  int null = ::open("/dev/null", O_RDONLY);
  int log = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (null >= 0) ::dup2(null, 0);
  if (log >= 0) {
    ::dup2(log, 1);
    ::dup2(log, 2);
  }
  readiness r{ready_fd};
  int rc = service(r);
  if (!r.told()) r.failed("tune: the service ended before it was ready (see " + log_file + ")");
  std::_Exit(rc);
}

// What the daemon said on `fd` within `wait_s` ("+message" or "-message"; "": nothing).
std::string daemon_words(int fd, int wait_s) {
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    char buf[4096];
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k <= 0) break;
    got.append(buf, static_cast<size_t>(k));
  }
  return got;
}

}  // namespace

int run_service(bool block, const std::string& log_file, int wait_s,
                const std::function<int(readiness&)>& service) {
  if (block) {
    readiness r{-1};
    return service(r);
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    std::cerr << "tune: cannot make a pipe: " << std::strerror(errno) << "\n";
    return 1;
  }
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = ::fork();
  if (pid < 0) {
    std::cerr << "tune: cannot fork: " << std::strerror(errno) << "\n";
    return 1;
  }
  if (pid == 0) {  // the daemon
    ::close(fds[0]);
    run_daemon(fds[1], log_file, service);
  }
  ::close(fds[1]);
  std::string got = daemon_words(fds[0], wait_s);
  ::close(fds[0]);
  if (!got.empty() && got[0] == '+') {
    std::cout << got.substr(1) << "\n";
    return 0;
  }
  if (!got.empty() && got[0] == '-') {
    std::cerr << got.substr(1) << "\n";
    ::waitpid(pid, nullptr, WNOHANG);
    return 1;
  }
  std::cerr << "tune: the service did not say it was ready within " << wait_s << " s; it is still starting"
            << " or stuck (pid " << pid << ", log " << log_file << ")\n";
  return 1;
}

std::vector<stopped> stop_all(const std::string& dir, int grace_s) {
  std::vector<std::string> nodes, heads;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() < 5 || name.substr(name.size() - 4) != ".pid") continue;
      (name.rfind("head-", 0) == 0 ? heads : nodes).push_back(name.substr(0, name.size() - 4));
    }
    ::closedir(d);
  }
  std::sort(nodes.begin(), nodes.end());
  std::sort(heads.begin(), heads.end());
  std::vector<stopped> out;
  for (auto* group : {&nodes, &heads}) {
    std::vector<stopped> signalled;
    for (auto& name : *group) {
      std::string file = dir + "/" + name + ".pid";
      int pid = live_pid(file);
      if (pid == 0) {
        ::unlink(file.c_str());  // stale
        continue;
      }
      ::kill(pid, SIGTERM);
      signalled.push_back({name, pid, false});
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(grace_s);
    for (auto& s : signalled) {
      while (::kill(s.pid, 0) == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (::kill(s.pid, 0) == 0) {
        ::kill(s.pid, SIGKILL);
        s.forced = true;
      }
      ::unlink((dir + "/" + s.name + ".pid").c_str());
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace tune::cli
