// The head actor's state and the parts its files share (head.cpp: who a token is, the
// placement-group requests passed on, users, the behavior; head_nodes.cpp: nodes
// joining, beating, reporting, leaving and dying; head_status.cpp: the cluster's
// status, the dashboard's views, the experiments' board, subscribers). Internal to the
// head.
#pragma once

#include <caf/all.hpp>

#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "head.hpp"
#include "tune/cluster/board.hpp"
#include "tune/cluster/registry.hpp"

namespace tune {
namespace head_impl {

struct head_state {
  head_options opt;
  node_registry registry;
  // The actor of each alive node's current connection, both ways: a down message from
  // an old connection must not kill a node that has already joined again.
  std::map<caf::actor_addr, node_id> node_of;
  std::map<node_id, caf::actor_addr> addr_of;
  std::vector<subscriber_iface> subscribers;
  groups_iface groups;  // the placement-group actor, linked to this one
  // Each alive node's latest report: its GPU audit, how it contains its trials, their
  // host memory and CPU.
  std::map<node_id, wire::wire_node_report> reports;
  std::set<node_id> draining;                // `tune drain`: no new work there
  experiment_board board;                    // what experiments' controllers report
  std::map<caf::actor_addr, std::set<std::string>> board_owners;  // controller -> its experiments
  caf::actor_clock::time_point started;
  caf::actor_clock::time_point told_checkpoints{};  // when the groups actor last heard since_checkpoint
  static inline const char* name = "tune.head";
};

using head_actor = head_iface::stateful_pointer<head_state>;

// head.cpp
// Who a token is (tune/cluster/users.hpp). Every comparison is made, in constant time,
// whichever matches.
principal who(head_actor self, const std::string& token);
// Why `p` may not do `what` (empty: it may). `need`: the roles that may.
std::string refused(const principal& p, std::initializer_list<role> need, const std::string& what);
std::string version_mismatch(const std::string& theirs);
head_groups_iface::behavior_type group_handlers(head_actor self);  // placement groups, moves, drains
head_users_iface::behavior_type user_handlers(head_actor self);

// head_nodes.cpp
// A down message from a node's current connection: the node is dead.
void node_connection_down(head_actor self, const caf::down_msg& dm);
head_nodes_iface::behavior_type node_handlers(head_actor self);  // join, heartbeat, audit, leave, sweep

// head_status.cpp
// A down message from a subscriber or an experiment's reporter: it is forgotten, its
// experiments marked interrupted.
void follower_down(head_actor self, const caf::down_msg& dm);
head_status_iface::behavior_type status_handlers(head_actor self);  // status, dashboard, board, subscribe

}  // namespace head_impl
}  // namespace tune
