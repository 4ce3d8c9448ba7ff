// CAF's network layer (BASP) over a connection this process made itself.
//
// CAF 0.17 opens its own TCP listeners and connections. libtune hands it instead one
// end of a socketpair(AF_UNIX) per connection, whose other end a relay of ours (the
// gate, tune/actors/transport/gate.hpp) feeds with bytes that passed its checks, decrypted when
// the cluster uses TLS. So no process of a cluster has a port where CAF's own parser
// reads bytes straight from the network, loopback included.
//
// CAF's stock servants ask the kernel for the socket's IP address and abort (a
// CAF_CRITICAL) on any other family; fd_scribe names its peer itself.
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <cstdint>
#include <set>
#include <string>

namespace tune {

// Makes `fd` (a connected stream socket; CAF owns it from here on and closes it) a
// connection on which the BASP broker serves `whom`, published under `key` (every fd
// served under one key must carry the same actor). `peer`: how the connection is named
// in CAF's logs and node queries. No reply: the peer's handshake follows on the fd.
void serve_fd(caf::actor_system& sys, int fd, const caf::actor& whom, uint16_t key, const std::string& peer);

// The message to send to basp_broker(sys) as a request, to connect over `fd` (CAF owns
// it from here on): the answer is (caf::node_id, caf::strong_actor_ptr, std::set<std::string>),
// as CAF's middleman actor answers a connect, or an error.
caf::message connect_fd_message(caf::actor_system& sys, int fd, const std::string& peer);

// The BASP broker of `sys` (its middleman's).
caf::actor basp_broker(caf::actor_system& sys);

}  // namespace tune
