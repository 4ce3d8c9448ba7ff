#include "tune/cluster/address.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace tune {

std::string host_port::to_string() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

expected<host_port> parse_host_port(const std::string& text, const std::string& option) {
  auto bad = [&](const std::string& why) {
    return status{errc::invalid_argument, option + " '" + text + "': " + why + "; write HOST:PORT, e.g. 10.0.0.1:6380"};
  };
  host_port out;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad("an IPv6 address needs the form [ADDR]:PORT");
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) return bad("put an IPv6 address in brackets");
  }
  if (out.host.empty()) return bad("no host");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return bad("the port is not a number");
  long p = std::stol(port);
  if (p < 1 || p > 65535) return bad("the port must be between 1 and 65535");
  out.port = static_cast<uint16_t>(p);
  return out;
}

std::string local_address_towards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return {};
  std::string out;
  int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET6_ADDRSTRLEN] = {};
      void* addr = local.ss_family == AF_INET ? static_cast<void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                                              : static_cast<void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
      if (::inet_ntop(local.ss_family, addr, buf, sizeof buf)) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

}  // namespace tune
