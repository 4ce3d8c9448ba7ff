// How this process reaches a head: the one place that opens a connection to one.
//
// A process without TLS files connects with CAF's own TCP (the head's gate checks what
// it sends). One with TLS files (set_client_tls) makes the TCP connection itself and
// hands CAF a TLS stream on it that also checks the head's frames
// (actors/transport/tls_scribe.hpp).
// Either way the answer is CAF's connect answer: (caf::node_id, caf::strong_actor_ptr,
// std::set<std::string>), or an error.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "tune/core/status.hpp"

namespace tune {

namespace tls {
class context;
}

// The TLS this process uses towards heads (a client context; null: plain). Set once,
// before the first dial.
void set_client_tls(std::shared_ptr<tls::context> ctx);
const std::shared_ptr<tls::context>& client_tls();

// A connection to make: send `msg` to `to` as a request; its answer is CAF's connect
// answer. `id`: for why_closed() (0 for CAF's own connections).
struct dial_request {
  caf::actor to;
  caf::message msg;
  uint64_t id = 0;
};
expected<dial_request> dial(caf::actor_system& sys, const std::string& host, uint16_t port);

// Why the connection `id` (of dial_request::id) failed, for people: what its TLS
// stream saw (a certificate refused, no connection), else CAF's error, with what to do
// when the head closed it during the handshake (a cluster that uses TLS). `hopeless`:
// trying again cannot cure it (a certificate refused, one side with TLS and the other
// without).
struct dial_failure {
  std::string why;
  bool hopeless = false;
};
dial_failure connect_failure(caf::actor_system& sys, uint64_t id, const caf::error& err);

}  // namespace tune
