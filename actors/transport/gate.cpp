#include "gate.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <map>
#include <vector>

#include "basp_frames.hpp"
#include "log.hpp"
#include "tune/net/tls.hpp"

namespace tune {

namespace {

using clock = std::chrono::steady_clock;

constexpr size_t max_pending = 4u << 20; // bytes buffered towards one side before reading pauses
constexpr unsigned char tls_handshake_record = 0x16;

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string address_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  if (a.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}

// One connection and its relay: `remote` is the network side, `local` CAF's side.
struct relay {
  int remote = -1, local = -1;
  bool sniffed = false;  // the first byte from the remote side was looked at
  std::unique_ptr<tls::session> tls;
  std::string to_local, to_remote;  // bytes waiting to be written
  frame_checker frames{basp::client_handshake};  // what the remote side sends (plaintext)
  std::string header;  // HTTP: the request head so far
  bool first = true, dead = false;  // first: the remote side has not yet sent a whole first frame
  clock::time_point opened = clock::now();
  std::string name;  // the remote side, for people
};

// Writes what is pending; false when the socket failed.
bool flush(int fd, std::string& pending) {
  while (!pending.empty()) {
    ssize_t k = ::send(fd, pending.data(), pending.size(), MSG_NOSIGNAL);
    if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    pending.erase(0, static_cast<size_t>(k));
  }
  return true;
}

// The gate's thread: one poll over the wake pipe, the listening socket and both sides of
// every relay; each round accepts, relays what is readable each way (checking what the
// remote side sends), then closes the silent and the dead.
class relay_loop {
 public:
  relay_loop(const gate_options& opt, int listen_fd, int wake_fd, const std::function<int()>& upstream,
             const std::atomic<bool>& stop)
      : opt_(opt), listen_fd_(listen_fd), wake_fd_(wake_fd), upstream_(upstream), stop_(stop) {}

  void run() {
    while (!stop_) {
      watch();
      if (::poll(fds_.data(), fds_.size(), 500) < 0 && errno != EINTR) break;
      if (fds_[0].revents & POLLIN) drain_wake();
      auto now = clock::now();
      if (fds_[1].revents & POLLIN) accept_all(now);
      relay_ready(now);
      close_silent(now);
      close_dead();
    }
    close_all();
  }

 private:
  // What poll watches: the wake pipe, the listening socket (while there is room), and
  // each relay's sides, reading only while less than max_pending waits for the other.
  void watch() {
    fds_.clear();
    owner_.clear();
    fds_.push_back({wake_fd_, POLLIN, 0});
    fds_.push_back({listen_fd_, static_cast<short>(listen_fd_ >= 0 && relays_.size() < opt_.max_connections ? POLLIN : 0), 0});
    owner_.push_back(nullptr);
    owner_.push_back(nullptr);
    for (auto& r : relays_) {
      short remote_ev = (r.to_local.size() < max_pending ? POLLIN : 0) | (r.to_remote.empty() ? 0 : POLLOUT);
      short local_ev = (r.to_remote.size() < max_pending ? POLLIN : 0) | (r.to_local.empty() ? 0 : POLLOUT);
      fds_.push_back({r.remote, remote_ev, 0});
      owner_.push_back(&r);
      fds_.push_back({r.local, local_ev, 0});
      owner_.push_back(&r);
    }
  }

  void drain_wake() {
    char drain[64];
    while (::read(wake_fd_, drain, sizeof drain) > 0) {
    }
  }

  // Closes `r` saying why in the log (at most once a second); with TLS, the alert that
  // says why goes to the peer as far as the socket takes it now.
  void refuse(relay& r, const std::string& why, clock::time_point now) {
    if (r.tls) {
      r.tls->take_output(r.to_remote);
      flush(r.remote, r.to_remote);
    }
    if (now - last_refusal_log_ > std::chrono::seconds(1)) {
      log_line("closed a connection from " + r.name + ": " + why);
      last_refusal_log_ = now;
    }
    r.dead = true;
  }

  // One fewer of `peer`'s connections that have not sent a first frame.
  void forget_unproven(const std::string& peer) {
    auto u = unproven_.find(peer);
    if (u != unproven_.end() && --u->second == 0) unproven_.erase(u);
  }

  // Every connection waiting on the listening socket, each given a relay.
  void accept_all(clock::time_point now) {
    for (;;) {
      sockaddr_storage from{};
      socklen_t len = sizeof from;
      int c = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) break;
      std::string peer = address_of(from);
      if (unproven_[peer] >= opt_.max_unproven_per_peer) make_room(peer, now);
      int up = -1;
      if (!opt_.http) {  // BASP: the head's side at once (CAF greets first)
        up = upstream_ ? upstream_() : -1;
        if (up < 0) {
          ::close(c);
          continue;
        }
        set_nonblocking(up);
      }
      set_nodelay(c);
      relay r;
      r.remote = c;
      r.local = up;
      r.name = peer;
      if (opt_.tls) r.tls = std::make_unique<tls::session>(*opt_.tls);
      ++unproven_[peer];
      relays_.push_back(std::move(r));
    }
  }

  // The oldest of this peer's connections that have not spoken makes room.
  void make_room(const std::string& peer, clock::time_point now) {
    for (auto& old : relays_)
      if (!old.dead && old.first && old.name == peer) {
        old.dead = true;
        break;
      }
    if (now - last_refusal_log_ > std::chrono::seconds(1)) {
      log_line("closed the oldest of " + std::to_string(unproven_[peer]) + " connections from " + peer +
               " that have not spoken yet");
      last_refusal_log_ = now;
    }
  }

  // Each side poll found ready: what it sent taken, then what waits for either side written.
  void relay_ready(clock::time_point now) {
    for (size_t i = 2; i < fds_.size(); ++i) {
      relay& r = *owner_[i];
      if (r.dead || fds_[i].revents == 0) continue;
      const bool is_remote = fds_[i].fd == r.remote;
      if ((fds_[i].revents & (POLLIN | POLLHUP | POLLERR)) && !receive(r, fds_[i].fd, is_remote, now)) continue;
      if ((r.local >= 0 && !flush(r.local, r.to_local)) || !flush(r.remote, r.to_remote)) r.dead = true;
    }
  }

  // Reads one side of `r`. False when `r` is closed or refused: nothing more is written.
  bool receive(relay& r, int fd, bool is_remote, clock::time_point now) {
    ssize_t k = ::recv(fd, buf_, sizeof buf_, 0);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
      // One side closed: deliver what is pending to the other side, then close.
      if (is_remote) {
        if (r.local >= 0) flush(r.local, r.to_local);
      } else {
        flush(r.remote, r.to_remote);
      }
      r.dead = true;
      return false;
    }
    if (k <= 0) return true;
    return is_remote ? from_remote(r, static_cast<size_t>(k), now) : from_local(r, static_cast<size_t>(k), now);
  }

  // What CAF (or the server behind) sent passes unchanged, encrypted with TLS.
  bool from_local(relay& r, size_t k, clock::time_point now) {
    std::string why;
    if (r.tls) {
      if (!r.tls->send(std::string_view{buf_, k}, why)) {
        refuse(r, "TLS: " + why, now);
        return false;
      }
      r.tls->take_output(r.to_remote);
    } else {
      r.to_remote.append(buf_, k);
    }
    return true;
  }

  // What the remote side sent: TLS or not as this gate speaks, decrypted, then checked
  // (BASP frames, or an HTTP request head) before it is passed on.
  bool from_remote(relay& r, size_t n, clock::time_point now) {
    const char* data = buf_;
    std::string why;
    if (!r.sniffed && !sniff(r, now)) return false;
    std::string plain;
    if (r.tls) {
      if (!r.tls->receive(buf_, n, plain, why)) {
        refuse(r, "TLS: " + why, now);
        return false;
      }
      r.tls->take_output(r.to_remote);
      data = plain.data();
      n = plain.size();
    }
    bool was_first = r.first;
    if (opt_.http ? !take_http(r, data, n, now) : !take_basp(r, data, n, why, now)) return false;
    if (was_first && !r.first) forget_unproven(r.name);
    return true;
  }

  // The first byte says whether the peer speaks TLS: it must speak as this gate does.
  bool sniff(relay& r, clock::time_point now) {
    r.sniffed = true;
    bool hello = static_cast<unsigned char>(buf_[0]) == tls_handshake_record;
    if (opt_.tls && !hello) {
      refuse(r, "plain bytes, not TLS: this cluster uses TLS (give the process --tls-cert, --tls-key and --tls-ca)", now);
      return false;
    }
    if (!opt_.tls && hello) {
      refuse(r, "a TLS handshake: this cluster does not use TLS (start its head with --tls-cert, --tls-key and "
                "--tls-ca, or connect without them)",
             now);
      return false;
    }
    return true;
  }

  // HTTP: the request head, whole, before the server behind sees it (and only then is
  // it connected); after it, everything passes.
  bool take_http(relay& r, const char* data, size_t n, clock::time_point now) {
    if (!r.first) {
      r.to_local.append(data, n);
      return true;
    }
    r.header.append(data, n);
    if (r.header.find("\r\n\r\n") != std::string::npos) {
      r.local = upstream_ ? upstream_() : -1;
      if (r.local < 0) {
        refuse(r, "the server behind the gate cannot be reached", now);
        return false;
      }
      set_nonblocking(r.local);
      r.first = false;
      r.to_local.append(r.header);
      r.header.clear();
    } else if (r.header.size() > 64 * 1024) {
      refuse(r, "a request head over 64 KiB", now);
      return false;
    }  // else: more of the head to come (what TLS has to send goes out after)
    return true;
  }

  // BASP: every frame checked (basp_frames.hpp) before CAF sees a byte of it.
  bool take_basp(relay& r, const char* data, size_t n, std::string& why, clock::time_point now) {
    if (!r.frames.check(data, n, opt_.max_frame, why)) {
      refuse(r, why, now);
      return false;
    }
    r.first = r.frames.waiting_first();
    r.to_local.append(data, n);
    return true;
  }

  // Connections that sent no whole first frame in time.
  void close_silent(clock::time_point now) {
    for (auto& r : relays_)
      if (!r.dead && r.first && now - r.opened > std::chrono::milliseconds(opt_.first_frame_timeout_ms))
        refuse(r, "no handshake within " + std::to_string(opt_.first_frame_timeout_ms / 1000) + " s", now);
  }

  void close_dead() {
    for (auto it = relays_.begin(); it != relays_.end();) {
      if (it->dead) {
        if (it->first) forget_unproven(it->name);
        ::close(it->remote);
        if (it->local >= 0) ::close(it->local);
        it = relays_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void close_all() {
    for (auto& r : relays_) {
      ::close(r.remote);
      if (r.local >= 0) ::close(r.local);
    }
  }

  const gate_options& opt_;
  const int listen_fd_, wake_fd_;
  const std::function<int()>& upstream_;
  const std::atomic<bool>& stop_;
  std::list<relay> relays_;
  std::map<std::string, size_t> unproven_;  // by peer address: relays that have not sent a first frame
  std::vector<pollfd> fds_;
  std::vector<relay*> owner_;  // the relay of each of fds_ (none for the first two)
  char buf_[64 * 1024];
  clock::time_point last_refusal_log_{};
};

}  // namespace

expected<std::unique_ptr<basp_gate>> basp_gate::listen(gate_options opt) {
  std::unique_ptr<basp_gate> g{new basp_gate};
  g->opt_ = opt;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string port = std::to_string(opt.port);
  if (int e = ::getaddrinfo(opt.host.empty() ? nullptr : opt.host.c_str(), port.c_str(), &hints, &res); e != 0)
    return status{errc::invalid_argument, "cannot listen on " + opt.host + ": " + gai_strerror(e)};
  // Prefer IPv6 with dual stack for "all addresses", else the first result.
  addrinfo* pick = res;
  for (auto* a = res; a; a = a->ai_next)
    if (opt.host.empty() && a->ai_family == AF_INET6) pick = a;
  int fd = ::socket(pick->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (pick->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (::bind(fd, pick->ai_addr, pick->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
    int e = errno;
    ::close(fd);
    ::freeaddrinfo(res);
    return status{errc::invalid_argument, std::string{std::strerror(e)}};
  }
  ::freeaddrinfo(res);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
  g->port_ = ntohs(local.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&local)->sin_port
                                               : reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  set_nonblocking(fd);
  g->listen_fd_ = fd;
  if (::pipe2(g->wake_, O_CLOEXEC | O_NONBLOCK) != 0)
    return status{errc::invalid_argument, std::string{"pipe: "} + std::strerror(errno)};
  return g;
}

void basp_gate::run(std::function<int()> upstream) {
  upstream_ = std::move(upstream);
  thread_ = std::thread([this] { loop(); });
}

basp_gate::~basp_gate() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void basp_gate::loop() { relay_loop{opt_, listen_fd_, wake_[0], upstream_, stop_}.run(); }

}  // namespace tune
