// Every message between libtune processes: the atoms, the structs with their
// `inspect`, and the CAF configuration every process uses. One place, so that head,
// node and client always agree.
//
// The protocol (all requests carry the cluster token; every reply says ok or why not):
//
//   node -> head   (join_atom, token, wire_ad)              -> (join_atom, bool, text)
//                  text: the head's version when accepted, else the reason
//   node -> head   (heartbeat_atom, token, node_id, seq, wire_avail)     no reply;
//                  the head answers (rejoin_atom) when it does not know the node alive
//   node -> head   (leave_atom, token, node_id)             -> (leave_atom, bool)
//   any  -> head   (status_atom, token, version)            -> (status_atom, bool, text)
//                  text: the status JSON when ok, else the reason
//   any  -> head   (subscribe_atom, token)                  -> (subscribe_atom, bool, text)
//   head -> subscribers  (node_event_atom, node_id, state, reason)
//
// The head is a dynamically typed actor on purpose: a client of another version still
// reaches it and is told, in words, which versions differ (a typed interface check
// would fail the connection with no such message).
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/node_resources.hpp"

namespace tune::wire {

using join_atom = caf::atom_constant<caf::atom("join")>;
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
using node_event_atom = caf::atom_constant<caf::atom("nodeevent")>;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;

// Timing of the liveness protocol.
constexpr auto heartbeat_period = std::chrono::milliseconds(500);
constexpr auto heartbeat_timeout = std::chrono::milliseconds(3000);  // silent longer: dead
constexpr auto sweep_period = std::chrono::milliseconds(250);
constexpr auto request_timeout = std::chrono::seconds(5);

struct wire_gpu {
  int32_t index = 0;
  std::string uuid, pci_bus_id, name;
  int64_t memory_total = 0;
  bool logical = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_gpu& x) {
  return f(caf::meta::type_name("wire_gpu"), x.index, x.uuid, x.pci_bus_id, x.name, x.memory_total,
           x.logical);
}

// Amounts of host resources: cpu (quantity units), memory (bytes), custom (units).
struct wire_host {
  int64_t cpu_units = 0, memory = 0;
  std::vector<std::string> custom_names;
  std::vector<int64_t> custom_units;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_host& x) {
  return f(caf::meta::type_name("wire_host"), x.cpu_units, x.memory, x.custom_names, x.custom_units);
}

// What a node has free: its heartbeat.
struct wire_avail {
  wire_host host;
  std::vector<int64_t> card_free, card_memory_free;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_avail& x) {
  return f(caf::meta::type_name("wire_avail"), x.host, x.card_free, x.card_memory_free);
}

// A node's advertisement on join: who it is, what it has, what is free.
struct wire_ad {
  std::string node_id, hostname, address, version;
  wire_host total;
  std::vector<wire_gpu> gpus;
  wire_avail free;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_ad& x) {
  return f(caf::meta::type_name("wire_ad"), x.node_id, x.hostname, x.address, x.version, x.total, x.gpus,
           x.free);
}

// Conversions; from_wire checks what it reads and says what is wrong.
wire_host to_wire(const resource_set& host);
expected<resource_set> host_from_wire(const wire_host& w);
wire_avail to_wire(const node_availability& a);
expected<node_availability> from_wire(const wire_avail& w);
// The advertisement of a node with these resources.
wire_ad make_ad(const std::string& node_id, const std::string& hostname, const std::string& address,
                const node_resources& n);
expected<node_resources> resources_from_ad(const wire_ad& ad);

// The CAF configuration of every libtune process: message types registered, the
// application identifier, and connection heartbeats so that a silent peer is dropped.
// `network` false leaves the middleman out (actor tests on the deterministic scheduler).
class config : public caf::actor_system_config {
 public:
  explicit config(bool network = true);
};

}  // namespace tune::wire
