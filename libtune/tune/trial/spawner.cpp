// The spawner (PROTOCOL.md, "The spawner"): the process that starts keepers on the
// node's request, and the node's side of its channel.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tune/trial/keeper.hpp"
#include "tune/trial/process.hpp"
#include "tune/trial/spawn_protocol.hpp"
#include "tune/trial/worker.hpp"

namespace tune {

namespace {

void ignore(int) {}

// Nothing of its parent's but the channel; standard streams on /dev/null. Signals to its
// parent's group (a terminal's ^C, a stop) are not for it: it ends with its channel,
// after its parent has dealt with the trials. A keeper that ends is reaped at once:
// SIGCHLD, blocked but while it waits in ppoll (so none is missed), interrupts the wait.
void become_spawner(int sock) {
  ::prctl(PR_SET_NAME, "tune-spawner");
  keeper::close_all_but(0, 1, 2, sock, sock);
  int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    if (null > 2) ::close(null);
  }
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) ::signal(s, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = ignore;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGCHLD, &sa, nullptr);
  sigset_t only_chld;
  sigemptyset(&only_chld);
  sigaddset(&only_chld, SIGCHLD);
  ::sigprocmask(SIG_SETMASK, &only_chld, nullptr);
}

// Answers one request: a keeper started (its pid and the five read ends, which are then
// closed here) or why not. False when the channel is gone.
bool answer(int sock, const std::string& body) {
  spawn_protocol::spawn_answer a;
  channels ends;
  if (auto spec = spawn_protocol::decode_request(body); !spec) {
    a.error = EINVAL;
  } else if (auto keeper = keeper::start(*spec, ends); !keeper) {
    a.error = errno ? errno : EAGAIN;
  } else {
    a.keeper = *keeper;
  }
  bool sent = spawn_protocol::send_answer(sock, a, a.error == 0 ? &ends : nullptr);
  for (int fd : spawn_protocol::in_order(ends))
    if (fd >= 0) ::close(fd);
  return sent;
}

// The spawner's life: one request at a time on `sock`, one answer each. It ends when the
// other end closes; its keepers, whose death signal is tied to it, then kill their
// groups. It reaps its keepers as they end.
[[noreturn]] void run_spawner(int sock) {
  become_spawner(sock);
  sigset_t none;
  sigemptyset(&none);
  for (;;) {
    pollfd p{sock, POLLIN, 0};
    timespec second{1, 0};
    int ready = ::ppoll(&p, 1, &second, &none);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (ready <= 0) continue;
    auto body = spawn_protocol::read_request(sock);
    if (!body || !answer(sock, *body)) break;  // the parent is gone
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
  worker::set_in_process(fn);
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

expected<int> spawner::spawn(const process_spec& spec, channels& read_ends, bool& usable) {
  std::lock_guard<std::mutex> lock(mu_);
  auto gone = [&](const std::string& why) -> expected<int> {
    gone_ = true;
    usable = false;
    return status{errc::not_found, "the spawner (pid " + std::to_string(pid_) + ") is gone: " + why};
  };
  usable = !gone_;
  if (gone_) return status{errc::not_found, "the spawner is gone"};
  if (!spawn_protocol::send_request(sock_, spec)) return gone(::strerror(errno));
  auto got = spawn_protocol::receive_answer(sock_);
  if (!got) return gone(got.error().message());
  if (got->answer.error != 0)
    return status{errc::insufficient, std::string{"the spawner could not start it: "} + ::strerror(got->answer.error)};
  if (got->passed != static_cast<int>(spawn_protocol::channel_count)) return gone("an answer without its pipes");
  read_ends = got->ends;
  return got->answer.keeper;
}

}  // namespace tune
