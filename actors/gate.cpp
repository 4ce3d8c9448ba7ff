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
#include <vector>

#include "log.hpp"

namespace tune {

namespace {

constexpr size_t header_size = 32;       // BASP header in CAF 0.17
constexpr uint8_t client_handshake = 1;  // caf::io::basp::message_type
constexpr uint8_t last_operation = 6;    // heartbeat
constexpr size_t max_pending = 4u << 20; // bytes buffered towards one side before reading pauses

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }
void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One peer's connection and its relay to the head.
struct relay {
  int peer = -1, head = -1;
  std::string to_head, to_peer;  // bytes waiting to be written
  // Framing of what the peer sends: bytes left of the current header or payload.
  std::string header;
  uint64_t payload_left = 0;
  bool first = true, dead = false;
  std::chrono::steady_clock::time_point opened = std::chrono::steady_clock::now();
};

// Reads the peer's bytes into the relay, checking the frames; false: close it.
bool check_frames(relay& r, const char* data, size_t n, uint32_t max_frame, std::string& why) {
  size_t i = 0;
  while (i < n) {
    if (r.payload_left > 0) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(r.payload_left, n - i));
      r.payload_left -= take;
      i += take;
      continue;
    }
    size_t take = std::min(header_size - r.header.size(), n - i);
    r.header.append(data + i, take);
    i += take;
    if (r.header.size() < header_size) break;
    auto op = static_cast<uint8_t>(r.header[0]);
    uint32_t len;
    std::memcpy(&len, r.header.data() + 4, 4);
    len = ntohl(len);
    if (op > last_operation) {
      why = "bytes that are not the libtune protocol (unknown operation " + std::to_string(op) + ")";
      return false;
    }
    if (r.first && op != client_handshake) {
      why = "bytes that are not the libtune protocol (no handshake first)";
      return false;
    }
    if (len > max_frame) {
      why = "a message of " + std::to_string(len) + " bytes, above the limit of " + std::to_string(max_frame);
      return false;
    }
    r.first = false;
    r.payload_left = len;
    r.header.clear();
  }
  return true;
}

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
  std::vector<pollfd> fds;
  std::vector<relay*> owner;
  char buf[64 * 1024];
  auto last_refusal_log = std::chrono::steady_clock::time_point{};
  while (!stop_) {
    fds.clear();
    owner.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(relays.size() < opt_.max_connections ? POLLIN : 0), 0});
    owner.push_back(nullptr);
    owner.push_back(nullptr);
    for (auto& r : relays) {
      short peer_ev = (r.to_head.size() < max_pending ? POLLIN : 0) | (r.to_peer.empty() ? 0 : POLLOUT);
      short head_ev = (r.to_peer.size() < max_pending ? POLLIN : 0) | (r.to_head.empty() ? 0 : POLLOUT);
      fds.push_back({r.peer, peer_ev, 0});
      owner.push_back(&r);
      fds.push_back({r.head, head_ev, 0});
      owner.push_back(&r);
    }
    if (::poll(fds.data(), fds.size(), 500) < 0 && errno != EINTR) break;
    if (fds[1].revents & POLLIN) {
      for (;;) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        int up = upstream_();
        if (up < 0) {
          ::close(c);
          continue;
        }
        set_nonblocking(up);
        set_nodelay(c);
        relay r;
        r.peer = c;
        r.head = up;
        relays.push_back(std::move(r));
      }
    }
    auto now = std::chrono::steady_clock::now();
    for (size_t i = 2; i < fds.size(); ++i) {
      relay& r = *owner[i];
      if (r.dead || fds[i].revents == 0) continue;
      bool is_peer = fds[i].fd == r.peer;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t k = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
          // One side closed: deliver what is pending to the other side, then close.
          if (is_peer) flush(r.head, r.to_head);
          else flush(r.peer, r.to_peer);
          r.dead = true;
          continue;
        }
        if (k > 0) {
          if (is_peer) {
            std::string why;
            if (!check_frames(r, buf, static_cast<size_t>(k), opt_.max_frame, why)) {
              if (now - last_refusal_log > std::chrono::seconds(1)) {
                log_line("closed a connection that sent " + why);
                last_refusal_log = now;
              }
              r.dead = true;
              continue;
            }
            r.to_head.append(buf, static_cast<size_t>(k));
          } else {
            r.to_peer.append(buf, static_cast<size_t>(k));
          }
        }
      }
      if (!flush(r.head, r.to_head) || !flush(r.peer, r.to_peer)) r.dead = true;
    }
    for (auto& r : relays)
      if (!r.dead && r.first && now - r.opened > std::chrono::milliseconds(opt_.first_frame_timeout_ms)) {
        r.dead = true;
      }
    for (auto it = relays.begin(); it != relays.end();) {
      if (it->dead) {
        ::close(it->peer);
        ::close(it->head);
        it = relays.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : relays) {
    ::close(r.peer);
    ::close(r.head);
  }
}

}  // namespace tune
