// A checking gate in front of the head's CAF network layer.
//
// CAF 0.17 trusts the length in every BASP header it reads: a header that claims a
// 4 GiB payload (random bytes do, now and then) makes the head allocate 4 GiB and
// stall. The gate listens on the public port, relays each connection to the head's
// CAF over a connection of its own (`upstream`: one end of a socketpair handed to
// CAF, actors/basp_fd.hpp, so CAF listens on no port at all), and reads the frames a
// peer sends: every 32-byte header must name a BASP operation and a payload of at most
// `max_frame` bytes, and the first must be a client handshake; anything else closes
// that connection, and the head never sees it. Traffic from the head to the peer
// passes unchanged.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tune/core/status.hpp"

namespace tune {

struct gate_options {
  std::string host;               // listen address; "" = all
  uint16_t port = 0;              // 0 = any free port
  uint32_t max_frame = 64u << 20; // the largest payload one BASP message may carry
  int first_frame_timeout_ms = 10000;
  size_t max_connections = 4096;
};

class basp_gate {
 public:
  // Binds and listens (port() is known from here on) but relays nothing until run().
  static expected<std::unique_ptr<basp_gate>> listen(gate_options opt);
  // Starts relaying: `upstream` makes the head's side of each accepted connection (a
  // connected stream socket, or -1 when it cannot: the peer is closed).
  void run(std::function<int()> upstream);
  ~basp_gate();  // closes every connection
  basp_gate(const basp_gate&) = delete;
  basp_gate& operator=(const basp_gate&) = delete;

  uint16_t port() const { return port_; }

 private:
  basp_gate() = default;
  void loop();

  gate_options opt_;
  std::function<int()> upstream_;
  int listen_fd_ = -1, wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tune
