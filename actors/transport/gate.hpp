// A checking gate between the network and this process's CAF network layer.
//
// CAF 0.17 trusts the length in every BASP header it reads: a header that claims a
// 4 GiB payload (random bytes do, now and then) makes a process allocate 4 GiB and
// stall. CAF therefore never reads from a port of its own. Each connection accepted on
// the head's port is relayed by the gate between its socket and a connection into CAF
// (one end of a socketpair handed to CAF, actors/transport/basp_fd.hpp), and the gate checks the
// frames the remote side sends (actors/transport/basp_frames.hpp); anything that breaks the rules
// closes that connection before CAF sees a byte of it. What CAF sends passes unchanged.
//
// With TLS (a tls::context), the gate also ends the TLS session: what travels on the
// network is encrypted, CAF and the frame checks see the plaintext. A TLS gate closes
// a peer that speaks plain bytes, and a plain one a peer that starts TLS, each saying
// why in the log.
//
// The connections a process dials to a head do not pass a gate: with TLS they are
// read by CAF's own I/O thread through a TLS stream that checks the same frames
// (actors/transport/tls_scribe.hpp), without a relay's extra hop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tune/core/status.hpp"

namespace tune {

namespace tls {
class context;
}

struct gate_options {
  std::string host;               // listen address; "" = all
  uint16_t port = 0;              // 0 = any free port
  uint32_t max_frame = 64u << 20; // the largest payload one BASP message may carry
  int first_frame_timeout_ms = 10000;  // a connection that sent no whole first frame by then is closed
  size_t max_connections = 4096;
  // Connections from one address that have not yet sent their first frame (TLS handshake
  // included): beyond this many, the oldest of them is closed for each new one, so idle
  // sockets of one peer neither pile up nor keep a prompt newcomer out.
  size_t max_unproven_per_peer = 64;
  // HTTP instead of BASP (the dashboard): nothing is checked but that a whole request
  // head (up to 64 KiB) arrives within first_frame_timeout_ms; only then is the
  // connection to the server behind made (`upstream`), so an idle or slow client holds
  // no server thread.
  bool http = false;
  std::shared_ptr<tls::context> tls;  // the listening side's TLS (server); null: plain
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
