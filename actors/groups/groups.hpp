// The placement-group actor: one per head, in the head's process. It runs the head side
// of the two-phase protocol (group_table in libtune/tune/cluster/groups.hpp) against
// the node actors, over its own view of the cluster: each node's totals minus what it
// has reserved there. The head tells it when nodes join, die or report what they hold;
// clients reach it through the head, which checks their token first.
//
// What it adds to the pure table:
//  - messages: prepares and commits are requests with a timeout, aborts are plain sends;
//  - owners: a group that is not detached is removed when its owner (the client actor
//    that created it, or that client's connection) goes away;
//  - waiting clients (wait ready), told the moment their group is created or fails;
//  - reconciliation with what nodes hold. A node that joins a head for the first time
//    with committed bundles (the head restarted) keeps them as orphans, booked so that
//    nothing is promised twice, until the group's owner creates the same group again
//    (it is adopted at once) or `orphan_grace` passes (they are released).
#pragma once

#include <caf/all.hpp>

#include <chrono>

#include "wire.hpp"

namespace tune {

struct groups_options {
  // An attempt not fully answered within this time is aborted and retried.
  std::chrono::milliseconds attempt_timeout{2000};
  std::chrono::milliseconds tick{50};
  std::chrono::milliseconds orphan_grace{60000};
  // Removed and infeasible groups stay visible (status) this long, at most this many.
  std::chrono::milliseconds keep_ended{300000};
  size_t max_ended = 1000;
};

// Messages from the head (in-process, no token):
//   (node_up_atom, wire_ad, caf::actor node, bool first_join)
//   (node_down_atom, node_id)
//   (holdings_atom, node_id, version, std::vector<wire_hold>)
//   (pg_list_atom) -> (pg_list_atom, json array of every group and orphan)
//   (user_atom, [wire_user])   the users' quotas, priorities and weights
//   (since_checkpoint_atom, [wire_count {group, iterations its trial ran since
//                       its last checkpoint}]), from the experiments' reports: preemption takes
//                       the most recently checkpointed victims
// and the client requests of wire.hpp with the requesting user's name in place of their
// token ("admin" for the admin): (pg_create_atom, user, spec), (pg_wait_atom, user, id,
// timeout_ms), (pg_remove_atom, user, id), (pg_get_atom, user, id), (trial_start_atom,
// user, spec, server), (route_atom, user, group, bundle, trial, received). A group
// belongs to the user who made it: another user is refused, naming the owner.

groups_iface spawn_groups(caf::actor_system& sys, groups_options opt = {});

}  // namespace tune
