// The placement-group actor's state and the parts its files share (groups.cpp: the
// behavior, its setup and tick, what the table's decisions send, the clients' answers and
// status; groups_create.cpp: creating, claiming, waiting for and removing groups;
// groups_nodes.cpp: the two-phase protocol with the nodes, what they hold, their deaths;
// groups_trials.cpp: trial starts, standby copies and greetings passed on to the node of
// a bundle; groups_moves.cpp: preemption, draining and rebalancing, each move asked of a
// group's owner). Internal to the groups actor.
#pragma once

#include <caf/all.hpp>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "groups.hpp"
#include "tune/cluster/groups.hpp"
#include "wire.hpp"

namespace tune {
namespace groups_impl {

using time_point = caf::actor_clock::time_point;

struct waiter {
  caf::response_promise rp;
  time_point deadline;
  bool create = false;  // a create's answer (ready_wait_ms), not a wait's
};

// A bundle a node holds for a group this head does not know (it was made by an
// earlier head): kept, booked, until its group is claimed or the grace passes.
struct orphan {
  node_id node;
  resource_set request;
  allocation alloc;
  time_point since;
};

struct groups_state {
  groups_options opt;
  group_table table;
  cluster_view view;
  std::map<node_id, node_iface> nodes;
  std::map<node_id, std::string> hostname;
  std::map<std::string, group_owner_iface> owner_of;                 // groups that are not detached
  std::set<std::string> detached;                             // made detached (`tune group create`)
  std::map<caf::actor_addr, std::set<std::string>> groups_of;  // by owner
  std::map<std::string, std::vector<waiter>> waiters;
  std::map<bundle_key, orphan> orphans;
  // Trial starts passed on to a node and not answered yet: a node that dies answers
  // them no more, so they fail when it is declared dead (not when the request times out).
  struct pending_start {
    std::shared_ptr<bool> answered;
    caf::response_promise rp;
    std::string trial;
  };
  std::map<node_id, std::map<uint64_t, pending_start>> starting;
  // Groups made again after a head restart, waiting for the nodes that hold their
  // bundles to join (claim_wait_ms), answered when they are made.
  struct claim_wait {
    wire::wire_group_spec spec;
    caf::actor owner;
    std::string user;
    caf::response_promise rp;
    time_point until;
  };
  std::vector<claim_wait> claim_waits;
  // The user each group belongs to ("admin": the admin token's): only they, or the
  // admin, act on it (docs/users.md).
  std::map<std::string, std::string> user_of;
  // Each running trial's iterations since its last checkpoint, by its group (the head's
  // latest word; preemption's tie-break).
  std::map<std::string, int64_t> since_checkpoint;
  uint64_t next_start = 1;
  std::string id_prefix;
  uint64_t next_id = 1;
  time_point last_forget{};
  static inline const char* name = "tune.groups";
};

using groups_actor = groups_iface::stateful_pointer<groups_state>;

// groups.cpp
// A waiter's answer: a wait's (ready, state, reason), or a create's (true, id, state, reason).
void deliver(waiter& w, const std::string& id, bool ready, const std::string& state, const std::string& reason);
// Sends what the table decided to the nodes it names (none to a lost node).
void send_all(groups_actor self, std::vector<group_message> msgs);
// The table's next decisions sent, preemption asked, moved groups' owners told, waiting
// clients answered: after every change.
void flush(groups_actor self);
// Answers the clients waiting for groups that are created or have failed.
void answer_waiters(groups_actor self);
void remove_group(groups_actor self, const std::string& id);
// Empty when `user` may act on group `id` (its owner, or the admin); else why not,
// naming the owner.
std::string not_theirs(groups_actor self, const std::string& user, const std::string& id, const char* what);
nlohmann::json group_json(groups_actor self, const group_table::group& g, time_point now);

// groups_create.cpp
// Groups waiting for their holders: made once every bundle is held again (adopted) or
// their wait is over (placed anew).
void answer_claim_waits(groups_actor self);
groups_create_iface::behavior_type create_handlers(groups_actor self);  // create, wait, remove, get

// groups_nodes.cpp
void release_orphan(groups_actor self, std::map<bundle_key, orphan>::iterator it, bool tell_node);
// Orphans nobody claimed within the grace: released, their nodes told.
void release_unclaimed(groups_actor self, time_point now);
groups_nodes_iface::behavior_type node_handlers(groups_actor self);  // joins, deaths, holdings, answers

// groups_trials.cpp
groups_trials_iface::behavior_type trial_handlers(groups_actor self);  // starts, standby copies, greetings

// groups_moves.cpp
// A higher-priority group waits on a full cluster: the owners of the fewest
// lower-priority groups that make room are asked to move their trials.
void preempt(groups_actor self);
groups_moves_iface::behavior_type move_handlers(groups_actor self);  // rebalance, drain

}  // namespace groups_impl
}  // namespace tune
