// The head's registry of nodes: who joined, who is alive, when each was last heard
// from, and what each has free. Pure: time comes in as arguments, so the liveness
// rules are tested without clocks or sockets.
//
//            join                       heartbeat (refreshes last_heard)
//   (none) -------> alive <----------------------------------+
//                   |   |  link down / silent > timeout      |
//                   |   +---------------------------> dead --+ join again (same id)
//                   |  leave                                 |
//                   +-------------------------------> left --+
//
// Only alive nodes are in view(): placement never sees a dead one.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tune/core/cluster_view.hpp"

namespace tune {

enum class node_state { alive, dead, left };
std::string_view to_string(node_state s);

struct node_info {
  node_id id;
  std::string hostname;  // what the node calls itself
  std::string address;   // the address it reaches the head from
  std::string version;   // its libtune version
};

class node_registry {
 public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;

  struct entry {
    node_info info;
    node_state state = node_state::alive;
    std::string reason;         // why it is dead or left
    time_point joined{}, last_heard{}, state_since{};
    uint64_t heartbeats = 0;
    // What it had when it died or left; an alive node's resources live in view().
    node_resources last_known;
  };

  // A new node, or a known one coming back (same id, e.g. after the head restarted or
  // the node was cut off): it is alive again with the resources it advertises now.
  status join(node_info info, node_resources resources, time_point now);

  enum class heard { ok, unknown, not_alive, bad_report };
  // A heartbeat with what the node has free now; `others_changed`, when given, says
  // whether what other programs hold on its cards changed with it (placement must know).
  heard heartbeat(const node_id& id, const node_availability& free, time_point now, bool* others_changed = nullptr);

  // The connection to an alive node broke, or it said goodbye. False if not alive.
  bool mark_dead(const node_id& id, std::string reason, time_point now);
  bool mark_left(const node_id& id, time_point now);

  // Marks dead every alive node silent for longer than `timeout`; returns them.
  std::vector<node_id> sweep(time_point now, std::chrono::milliseconds timeout);
  // Forgets dead and left nodes older than `keep`, and the oldest beyond `max_gone`.
  void forget_gone(time_point now, std::chrono::seconds keep, size_t max_gone);

  const cluster_view& view() const { return view_; }
  const std::map<node_id, entry>& entries() const { return entries_; }
  const entry* find(const node_id& id) const;
  // A node's totals and what it last reported free, alive or not.
  const node_resources& resources(const entry& e) const;
  size_t alive() const { return view_.size(); }

  // The status of every node as one JSON object (see docs/cli.md, `tune status --json`).
  std::string status_json(time_point now) const;

 private:
  bool end(const node_id& id, node_state state, std::string reason, time_point now);

  std::map<node_id, entry> entries_;
  cluster_view view_;
};

}  // namespace tune
