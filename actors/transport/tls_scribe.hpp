// A TLS connection to a head, read and written by CAF's own I/O thread.
//
// A process that dials a head with TLS files (a node, `tune run`, a client) hands CAF a
// scribe whose stream does the TLS itself (OpenSSL over memory buffers,
// tune/net/tls.hpp) on the TCP socket, and checks the head's frames
// (actors/transport/basp_frames.hpp) on the plaintext before CAF's BASP parser sees them. No relay
// thread sits between CAF and the socket, so a message costs no extra hand-off (a relay
// on this side took a fifth off the head's placement-group rate on 2 cores).
#pragma once

#include <caf/io/all.hpp>

#include <functional>
#include <memory>
#include <string>

namespace tune {

namespace tls {
class context;
}

// Why a connection ended before its first frame from the head, for people, and whether
// trying again can cure it (not when a certificate was refused or one side does not use
// TLS).
using tls_failure_sink = std::function<void(const std::string& why, bool hopeless)>;

// Makes `fd` (a connected TCP socket; the scribe owns it from here on) a TLS client
// connection to the head at `peer`, and sends its hello. Null (and `why`) when the
// session cannot start.
caf::io::scribe_ptr make_tls_scribe(caf::actor_system& sys, int fd, const std::string& peer, const tls::context& ctx,
                                    tls_failure_sink on_failure, std::string& why);

}  // namespace tune
