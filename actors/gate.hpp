// A checking gate between the network and this process's CAF network layer.
//
// CAF 0.17 trusts the length in every BASP header it reads: a header that claims a
// 4 GiB payload (random bytes do, now and then) makes a process allocate 4 GiB and
// stall. CAF therefore never reads from the network itself. Each connection is relayed
// by the gate between its socket and a connection into CAF (one end of a socketpair
// handed to CAF, actors/basp_fd.hpp), and the gate reads the frames the remote side
// sends: every 32-byte header must name a BASP operation and a payload of at most
// `max_frame` bytes, and the first must be the handshake that side sends first;
// anything else closes that connection before CAF sees a byte of it. What CAF sends
// passes unchanged.
//
// With TLS (a tls::context), the gate also ends the TLS session: what travels on the
// network is encrypted, CAF and the frame checks see the plaintext. A TLS gate closes
// a peer that speaks plain bytes, and a plain one a peer that starts TLS, each saying
// why in the log.
//
// Two uses:
//  - the head's public port (listen + run): connections accepted, the head's side of
//    each made by `upstream`;
//  - a process that dials a head (outbound(), add_outbound): the head's side is the
//    network, CAF's is the local end, and the TLS session is the client's.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
  // A gate that listens nowhere, for the connections this process dials (add_outbound);
  // it runs from here on.
  static std::unique_ptr<basp_gate> outbound(gate_options opt = {});
  // Starts relaying: `upstream` makes the head's side of each accepted connection (a
  // connected stream socket, or -1 when it cannot: the peer is closed).
  void run(std::function<int()> upstream);
  ~basp_gate();  // closes every connection
  basp_gate(const basp_gate&) = delete;
  basp_gate& operator=(const basp_gate&) = delete;

  uint16_t port() const { return port_; }

  // Relays a connection this process is making: `remote` is a socket whose non-blocking
  // connect() is under way, `local` CAF's side. With `tls` (a client context) the gate
  // makes the TLS session once connected. Returns an id for failure().
  uint64_t add_outbound(int remote, int local, std::shared_ptr<tls::context> tls, std::string name);
  // Why outbound connection `id` ended before or during its handshake (empty: it did not,
  // or is not known).
  std::string failure(uint64_t id) const;

 private:
  basp_gate() = default;
  void loop();
  void fail(uint64_t id, const std::string& why);

  gate_options opt_;
  std::function<int()> upstream_;
  int listen_fd_ = -1, wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Outbound connections waiting to join the loop, and why recent ones failed.
  struct pending_outbound {
    int remote, local;
    std::shared_ptr<tls::context> tls;
    std::string name;
    uint64_t id;
  };
  mutable std::mutex mutex_;
  std::vector<pending_outbound> incoming_;
  std::map<uint64_t, std::string> failures_;
  uint64_t next_id_ = 1;
};

}  // namespace tune
