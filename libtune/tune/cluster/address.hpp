// HOST:PORT of a head (the command line, cluster_options), and the local address that
// reaches a host.
#pragma once

#include <cstdint>
#include <string>

#include "tune/core/status.hpp"

namespace tune {

struct host_port {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const;
};

// "10.0.0.1:6380", "head.example:6380", "[::1]:6380". Errors say what is wrong.
expected<host_port> parse_host_port(const std::string& text, const std::string& option);

// The local IP address this machine uses to reach `host` (no packet is sent), or
// "" when there is no route.
std::string local_address_towards(const std::string& host, uint16_t port);

}  // namespace tune
