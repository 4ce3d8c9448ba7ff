// The head's placement groups: the head side of the two-phase protocol, pure. The
// head keeps one cluster_view of what it has promised (each node's totals minus the
// bundles it reserved there); this table decides with the placement policies on that
// view, reserves in it at once (so the next decision sees it), and says which
// messages to send. Replies, timeouts and lost nodes come back in as calls.
//
//   create --> pending --(placed on the view)--> preparing --(every node: yes)--> created
//     |          ^  |                               | any no / timeout / node lost  |
//     |          |  +--(never fits)--> infeasible   v                               |
//     |          +------------- abort all, retry after a backoff                    |
//     |                                                       node lost after commit|
//     |                        rescheduling <-------------------------------------+
//     |                        (only the lost bundles are placed and prepared again)
//   remove (any state) --> removed: every bundle held anywhere is aborted
//
// Fairness: groups are tried in arrival order, and the first one that has to wait
// stops the walk, so a large group is never overtaken forever by small ones. With
// users (docs/users.md) each experiment's groups form a lane in arrival order, and the
// next group tried is the head of the lane of the user with the highest priority, then
// the smallest weighted dominant share of what the user holds (GPUs, CPUs or memory),
// then, between one user's experiments, the smallest dominant share the experiment
// holds, then the earliest; a group over its user's quota waits (saying why) without
// blocking other users' groups, and one that asks more than the quota at all is
// infeasible.
// Every message carries the group, the bundle and the attempt: a reply from an older
// attempt is recognised and ignored. Attempt numbers are unique across the table (and,
// seeded from the clock, across head restarts), so a reused group id or a new head
// never mistakes an old reservation on a node for its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tune/cluster/metrics.hpp"
#include "tune/cluster/reservations.hpp"
#include "tune/cluster/users.hpp"
#include "tune/core/placement.hpp"

namespace tune {

enum class group_state { pending, preparing, created, rescheduling, infeasible, removed };
std::string_view to_string(group_state s);

struct group_spec {
  std::string id;
  strategy strat = strategy::pack;
  std::vector<resource_set> bundles;
  std::vector<node_id> avoid = {};  // never placed on these (a trial moved off them)
  std::string user = {};            // whose it is (docs/users.md); empty: nobody's in particular
  std::string experiment = {};      // the experiment it is for (its user's share is split between them)
  std::vector<node_id> prefer = {};  // placed there when it fits (where a trial's checkpoint is staged)
};

struct bundle_site {
  node_id node;
  allocation alloc;
  uint64_t attempt = 0;  // the attempt that reserved it: part of its key on the node
  uint64_t answered_at = 0;  // the node's table version when it said yes
  // Whose group reserved it (spec.user then): part of its key on the node, so that after
  // a head restart the node's report says whose it is and only they can claim it.
  std::string owner = {};
};

// The key of a group's bundle on a node: the attempt is part of it, so that what an
// older attempt left behind can be aborted without touching the current one.
// "<group>/<attempt>", then "~<owner>" when it has one.
bundle_key node_key(const std::string& group, uint32_t bundle, uint64_t attempt, const std::string& owner = "");
inline bundle_key node_key(const std::string& group, uint32_t bundle, const bundle_site& site) {
  return node_key(group, bundle, site.attempt, site.owner);
}

// A message the head must send to a node.
struct group_message {
  enum class kind { prepare, commit, abort } what = kind::prepare;
  node_id node;
  bundle_key key;
  uint64_t attempt = 0;
  resource_set request;  // prepare
  allocation preferred;  // prepare: the cards the head chose
};

class group_table {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  // `first_attempt`: the first attempt number this table hands out.
  explicit group_table(uint64_t first_attempt = 1) : next_attempt_(first_attempt) {}
  // Not copied: its groups and lanes point at its own interned user names.
  group_table(const group_table&) = delete;
  group_table& operator=(const group_table&) = delete;
  group_table(group_table&&) = default;  // a std::set's nodes stay where they are when it moves
  group_table& operator=(group_table&&) = default;

  struct group {
    group_spec spec;
    group_state state = group_state::pending;
    std::string reason;  // why it waits, or why it is infeasible
    time_point created{}, since{}, next_try{};
    uint64_t attempt = 0;
    int failures = 0;  // attempts in a row that failed (backoff)
    std::vector<std::optional<bundle_site>> site;  // where each bundle is held
    // The attempt in flight.
    std::vector<uint32_t> placing;  // bundles being placed
    std::vector<char> yes;          // per placing entry: its node said yes
    time_point attempt_started{};
    std::vector<uint32_t> moved;    // bundles placed again after their node was lost
    const std::string* lane_user = nullptr;  // its user's name, interned: lanes compare pointers
  };

  // The bundles of a group a node lost (for the owner: which bundles moved).
  struct moved_bundles {
    std::string group;
    std::vector<uint32_t> bundles;
  };

  // Registers a group. Bad bundles are an error (nothing registered); a group that can
  // never fit is registered as infeasible, with the reason, and never retried.
  expected<group_state> create(group_spec spec, cluster_view& view, time_point now);

  // Places waiting groups in arrival order, reserving on `view`; returns the prepares.
  std::vector<group_message> schedule(cluster_view& view, time_point now);

  // A node's answer to a prepare: the allocation it took, or why not; `node_version`:
  // the node's reservation-table version right after it answered.
  std::vector<group_message> on_prepared(const bundle_key& key, uint64_t attempt, const node_id& node,
                                         const expected<allocation>& answer, cluster_view& view, time_point now,
                                         uint64_t node_version = 0);
  // A node's answer to a commit; a failure (the prepare expired there) puts the
  // bundle back to be placed again.
  std::vector<group_message> on_committed(const bundle_key& key, uint64_t attempt, const node_id& node,
                                          const status& answer, cluster_view& view, time_point now);
  // Attempts not fully answered within `timeout` are aborted and retried later.
  std::vector<group_message> expire(cluster_view& view, time_point now, std::chrono::milliseconds timeout);
  // A node is gone (already removed from `view`): attempts using it fail; created
  // groups with bundles there are rescheduled. Returns the aborts to send elsewhere.
  std::vector<group_message> node_lost(const node_id& node, cluster_view& view, time_point now);
  // Removes a group in any state: every bundle it holds or is preparing is aborted.
  std::vector<group_message> remove(const std::string& id, cluster_view& view, time_point now);

  // Registers a group that is already held on nodes (a restarted head adopting what
  // nodes report, claimed by the group's owner): created at once with these sites,
  // which the caller has already booked on the view. One site per bundle.
  status adopt(group_spec spec, std::vector<bundle_site> sites, time_point now);

  // A node reported what it holds (`held`: its bundle keys). A reservation the head
  // made there that was answered but is no longer held (the prepare expired, the node
  // restarted) is lost and placed again; anything held that the head did not make
  // (older attempts, removed groups) is aborted. Prepares still unanswered are left to
  // their answer or timeout. `version`: the node's table version when it listed `held`;
  // a list older than a prepare's answer says nothing about that reservation (the
  // list may travel a longer way than the answer).
  std::vector<group_message> reconcile(const node_id& node, const std::vector<bundle_key>& held,
                                       cluster_view& view, time_point now, uint64_t version = UINT64_MAX);

  // Drops a removed or infeasible group from the table (it holds nothing); false for
  // a group in any other state.
  bool forget(const std::string& id);
  // Forgets removed and infeasible groups that ended longer than `keep` ago, and the
  // oldest of them beyond `max_ended`.
  void forget_ended(time_point now, std::chrono::milliseconds keep, size_t max_ended);

  // Groups whose bundles moved since the last call (created again after a loss).
  std::vector<moved_bundles> take_moved();

  const group* find(const std::string& id) const;
  const std::map<std::string, group>& groups() const { return groups_; }

  static constexpr std::chrono::milliseconds first_backoff{50}, max_backoff{2000};

  // A draining node takes no new bundles (what it holds stays until given back); groups
  // that fit nowhere else wait for it rather than fail.
  void set_draining(const node_id& node, bool on) { on ? (void)draining_.insert(node) : (void)draining_.erase(node); }
  const std::set<node_id>& draining() const { return draining_; }

  // The users' quotas, priorities and weights (a user not listed has none, priority 0,
  // weight 1). Taken into account from the next schedule().
  void set_users(std::map<std::string, user_limits> users) {
    users_ = std::move(users);
    lowest_priority_ = 0;  // a user not listed has priority 0
    for (const auto& [u, l] : users_) lowest_priority_ = std::min(lowest_priority_, l.priority);
  }
  // The Unix account `user`'s trials run as (empty: the node's default).
  std::string account_of(const std::string& user) const {
    auto u = users_.find(user);
    return u == users_.end() ? std::string{} : u->second.account;
  }
  // What each user holds now (groups preparing, created or rescheduling: all of their
  // bundles), by user name.
  struct holding {
    quantity gpus, cpus;
    int64_t memory = 0;  // bytes
    int64_t groups = 0;
  };
  const std::map<std::string, holding>& holdings() const { return held_; }
  // The same by user and experiment (only those that hold something).
  const std::map<std::pair<std::string, std::string>, holding>& experiment_holdings() const { return held_by_exp_; }

  // Preemption (docs/users.md). When the group the last schedule() stopped at waits for
  // resources and users of a lower priority hold created groups: the fewest of those
  // whose release lets it fit (lowest priority first, then the most GPUs, then the
  // least work since their trial's last checkpoint, then the oldest), none asked within
  // `again`, with why; a group still waiting `retry` after
  // its last preemption (a victim that could not move: its trial was still starting,
  // or it moved too recently) preempts again, among the others. The caller asks their
  // owners to move them (pause through their checkpoints, give the group back); the
  // waiting group is then placed first, the victims' new groups wait behind it.
  struct preemption {
    std::string for_group;
    std::vector<std::string> victims;
    std::string reason;
  };
  // `movable`: whether a group can be moved at all (it has an owner to ask).
  // `since_checkpoint`: the iterations its trial ran since its last checkpoint (what a
  // move would redo), or -1 when not known (ranked after every known one).
  std::optional<preemption> preempt(const cluster_view& view, time_point now,
                                    std::chrono::milliseconds again = std::chrono::seconds(30),
                                    const std::function<bool(const std::string&)>& movable = {},
                                    std::chrono::milliseconds retry = std::chrono::seconds(5),
                                    const std::function<int64_t(const std::string&)>& since_checkpoint = {});

  // Seconds from each group's creation until it was first placed (for /metrics).
  const latency_histogram& placement_latency() const { return placement_latency_; }

 private:
  void fail_attempt(group& g, std::vector<group_message>& out, cluster_view& view, time_point now, std::string why);
  std::string over_quota(const group& g, const holding& h, bool& never) const;
  void set_state(group& g, group_state to);
  enum class attempt_result { placed, infeasible, waits_for_nodes, waits };
  struct lane {  // one experiment's waiting groups, in arrival order
    const std::string* user = nullptr;  // interned: lanes compare pointers
    std::string experiment;
    std::vector<std::pair<size_t, group*>> entries;  // index into queue_, and the group
    size_t next = 0;
    bool done = false;  // its head waits for its user's quota
    int64_t priority = 0;  // its user's, looked up once per pass
    double share = 0;      // its user's weighted dominant share, kept up to date in a pass
    double exp_share = 0;  // its experiment's dominant share, the same
  };
  std::vector<lane>& build_lanes();
  std::vector<lane> lanes_;  // kept between passes: no allocation per pass
  int64_t priority_of(const std::string& user) const;
  attempt_result try_place(group& g, cluster_view& view, time_point now, std::vector<group_message>& out);
  std::vector<uint32_t> unplaced(const group& g) const;
  // A reservation of `g` the node no longer holds: fail its attempt, or place it again.
  void lose_site(group& g, uint32_t bundle, std::vector<group_message>& out, cluster_view& view, time_point now,
                 const std::string& why);

  std::map<std::string, group> groups_;
  std::deque<std::string> queue_;  // waiting groups, in arrival order
  std::set<node_id> draining_;     // nothing new is placed there
  std::map<std::string, user_limits> users_;
  int64_t lowest_priority_ = 0;  // the lowest of users_' priorities and 0
  std::set<std::string> names_;  // users' names, interned for the lanes
  std::map<std::string, holding> held_;        // what each user holds now (set_state keeps it)
  std::map<std::pair<std::string, std::string>, holding> held_by_exp_;  // by user and experiment
  std::string blocked_;                        // the group the last schedule() stopped at
  std::map<std::string, time_point> asked_;    // victims asked to move, and when
  std::map<std::string, time_point> asked_for_;  // groups preempted for, and when
  std::vector<moved_bundles> moved_;
  latency_histogram placement_latency_;
  uint64_t next_attempt_;
};

// The group id and attempt a node key names (the inverse of node_key); false for a
// key that is not one of ours.
bool parse_node_key(const bundle_key& key, std::string& group, uint64_t& attempt, std::string* owner = nullptr);

// Whether a client may name a group `id`: at most 128 letters, digits, '-', '_', '.'
// and ':' (none of a node key's '/' and '~'); else invalid_argument, saying why.
status check_group_id(const std::string& id);

}  // namespace tune
