// The head actor: one per cluster. Keeps the registry of nodes (who is alive, what
// each has free), answers `tune status`, and notices lost nodes:
//  - a node whose connection breaks (SIGKILL, crash) is dead at once (CAF's down
//    message for its actor, in milliseconds on loopback);
//  - a node that stops talking (SIGSTOP, network cut) is dead once it has been silent
//    for the heartbeat timeout (3 s; the sweep runs every 250 ms).
// A dead node that joins again (same id) is alive again; after a head restart, nodes
// join the new head on their own and the registry is rebuilt from what they advertise.
// Placement groups are run by its placement-group actor (groups.hpp), which it tells
// about nodes joining, dying and what they hold, and to which it hands clients'
// placement-group requests once their token is checked.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "groups/groups.hpp"
#include "tune/cluster/users.hpp"
#include "wire.hpp"

namespace tune {

struct head_options {
  std::string token{};  // the admin's
  std::string address{};  // how people reach it, for status ("10.0.0.1:6380")
  std::chrono::milliseconds heartbeat_timeout = wire::heartbeat_timeout;
  groups_options groups{};
  std::string dashboard{};  // the dashboard's URL, for status ("http://10.0.0.1:8265/"; empty: none)
  std::string node_token{};  // nodes join with it (or the admin's); empty: none
  // The users (docs/users.md); null: the admin token is the only one that acts.
  std::shared_ptr<user_store> users{};
};

caf::actor spawn_head(caf::actor_system& sys, head_options opt);

}  // namespace tune
