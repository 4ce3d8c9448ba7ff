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

void basp_gate::loop() {
  std::list<relay> relays;
  std::map<std::string, size_t> unproven;  // by peer address: relays that have not sent a first frame
  std::vector<pollfd> fds;
  std::vector<relay*> owner;
  char buf[64 * 1024];
  auto last_refusal_log = clock::time_point{};
  auto refuse = [&](relay& r, const std::string& why, clock::time_point now) {
    if (r.tls) {  // the TLS alert that says why, to the peer, as far as the socket takes it now
      r.tls->take_output(r.to_remote);
      flush(r.remote, r.to_remote);
    }
    if (now - last_refusal_log > std::chrono::seconds(1)) {
      log_line("closed a connection from " + r.name + ": " + why);
      last_refusal_log = now;
    }
    r.dead = true;
  };
  while (!stop_) {
    fds.clear();
    owner.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(listen_fd_ >= 0 && relays.size() < opt_.max_connections ? POLLIN : 0), 0});
    owner.push_back(nullptr);
    owner.push_back(nullptr);
    for (auto& r : relays) {
      short remote_ev = (r.to_local.size() < max_pending ? POLLIN : 0) | (r.to_remote.empty() ? 0 : POLLOUT);
      short local_ev = (r.to_remote.size() < max_pending ? POLLIN : 0) | (r.to_local.empty() ? 0 : POLLOUT);
      fds.push_back({r.remote, remote_ev, 0});
      owner.push_back(&r);
      fds.push_back({r.local, local_ev, 0});
      owner.push_back(&r);
    }
    if (::poll(fds.data(), fds.size(), 500) < 0 && errno != EINTR) break;
    if (fds[0].revents & POLLIN) {
      char drain[64];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    auto now = clock::now();
    if (fds[1].revents & POLLIN) {
      for (;;) {
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        int c = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        std::string peer = address_of(from);
        if (unproven[peer] >= opt_.max_unproven_per_peer) {
          // The oldest of this peer's connections that have not spoken makes room.
          for (auto& old : relays)
            if (!old.dead && old.first && old.name == peer) {
              old.dead = true;
              break;
            }
          if (now - last_refusal_log > std::chrono::seconds(1)) {
            log_line("closed the oldest of " + std::to_string(unproven[peer]) + " connections from " + peer +
                     " that have not spoken yet");
            last_refusal_log = now;
          }
        }
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
        ++unproven[peer];
        relays.push_back(std::move(r));
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      relay& r = *owner[i];
      if (r.dead || fds[i].revents == 0) continue;
      const bool is_remote = fds[i].fd == r.remote;
      std::string why;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t k = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
          // One side closed: deliver what is pending to the other side, then close.
          if (is_remote) {
            if (r.local >= 0) flush(r.local, r.to_local);
          } else {
            flush(r.remote, r.to_remote);
          }
          r.dead = true;
          continue;
        }
        if (k > 0) {
          if (is_remote) {
            const char* data = buf;
            size_t n = static_cast<size_t>(k);
            if (!r.sniffed) {  // the first byte says whether the peer speaks TLS
              r.sniffed = true;
              bool hello = static_cast<unsigned char>(buf[0]) == tls_handshake_record;
              if (opt_.tls && !hello) {
                refuse(r, "plain bytes, not TLS: this cluster uses TLS (give the process --tls-cert, --tls-key and --tls-ca)", now);
                continue;
              }
              if (!opt_.tls && hello) {
                refuse(r, "a TLS handshake: this cluster does not use TLS (start its head with --tls-cert, --tls-key and "
                          "--tls-ca, or connect without them)",
                       now);
                continue;
              }
            }
            std::string plain;
            if (r.tls) {
              if (!r.tls->receive(buf, n, plain, why)) {
                refuse(r, "TLS: " + why, now);
                continue;
              }
              r.tls->take_output(r.to_remote);
              data = plain.data();
              n = plain.size();
            }
            bool was_first = r.first;
            if (opt_.http) {
              if (r.first) {  // the request head, whole, before the server behind sees it
                r.header.append(data, n);
                if (r.header.find("\r\n\r\n") != std::string::npos) {
                  r.local = upstream_ ? upstream_() : -1;
                  if (r.local < 0) {
                    refuse(r, "the server behind the gate cannot be reached", now);
                    continue;
                  }
                  set_nonblocking(r.local);
                  r.first = false;
                  r.to_local.append(r.header);
                  r.header.clear();
                } else if (r.header.size() > 64 * 1024) {
                  refuse(r, "a request head over 64 KiB", now);
                  continue;
                }  // else: more of the head to come (what TLS has to send goes out below)
              } else {
                r.to_local.append(data, n);
              }
            } else {
              if (!r.frames.check(data, n, opt_.max_frame, why)) {
                refuse(r, why, now);
                continue;
              }
              r.first = r.frames.waiting_first();
              r.to_local.append(data, n);
            }
            if (was_first && !r.first) {
              auto u = unproven.find(r.name);
              if (u != unproven.end() && --u->second == 0) unproven.erase(u);
            }
          } else if (r.tls) {
            if (!r.tls->send(std::string_view{buf, static_cast<size_t>(k)}, why)) {
              refuse(r, "TLS: " + why, now);
              continue;
            }
            r.tls->take_output(r.to_remote);
          } else {
            r.to_remote.append(buf, static_cast<size_t>(k));
          }
        }
      }
      if ((r.local >= 0 && !flush(r.local, r.to_local)) || !flush(r.remote, r.to_remote)) r.dead = true;
    }
    for (auto& r : relays)
      if (!r.dead && r.first && now - r.opened > std::chrono::milliseconds(opt_.first_frame_timeout_ms))
        refuse(r, "no handshake within " + std::to_string(opt_.first_frame_timeout_ms / 1000) + " s", now);
    for (auto it = relays.begin(); it != relays.end();) {
      if (it->dead) {
        if (it->first) {
          auto u = unproven.find(it->name);
          if (u != unproven.end() && --u->second == 0) unproven.erase(u);
        }
        ::close(it->remote);
        if (it->local >= 0) ::close(it->local);
        it = relays.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : relays) {
    ::close(r.remote);
    if (r.local >= 0) ::close(r.local);
  }
}

}  // namespace tune
