#include "tune/cluster/groups.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace tune {

std::string_view to_string(group_state s) {
  switch (s) {
    case group_state::pending: return "pending";
    case group_state::preparing: return "preparing";
    case group_state::created: return "created";
    case group_state::rescheduling: return "rescheduling";
    case group_state::infeasible: return "infeasible";
    case group_state::removed: return "removed";
  }
  return "?";
}

bundle_key node_key(const std::string& group, uint32_t bundle, uint64_t attempt, const std::string& owner) {
  return {group + "/" + std::to_string(attempt) + (owner.empty() ? "" : "~" + owner), bundle};
}

bool parse_node_key(const bundle_key& key, std::string& group, uint64_t& attempt, std::string* owner) {
  auto slash = key.group.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.group.size()) return false;
  auto tilde = key.group.find('~', slash);
  auto end = tilde == std::string::npos ? key.group.size() : tilde;
  if (end == slash + 1 || (tilde != std::string::npos && tilde + 1 == key.group.size())) return false;
  uint64_t a = 0;
  for (size_t i = slash + 1; i < end; ++i) {
    char c = key.group[i];
    if (c < '0' || c > '9' || a > (UINT64_MAX - 9) / 10) return false;
    a = a * 10 + static_cast<uint64_t>(c - '0');
  }
  group = key.group.substr(0, slash);
  attempt = a;
  if (owner) *owner = tilde == std::string::npos ? "" : key.group.substr(tilde + 1);
  return true;
}

status check_group_id(const std::string& id) {
  if (id.size() > 128) return {errc::invalid_argument, "a placement group id has at most 128 characters"};
  for (unsigned char c : id)
    if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == ':'))
      return {errc::invalid_argument, "placement group id \"" + id +
                                          "\" has a character other than letters, digits, '-', '_', '.', ':'"};
  return status::ok();
}

namespace {

group_message abort_key(const node_id& node, const bundle_key& key, uint64_t attempt) {
  group_message m;
  m.what = group_message::kind::abort;
  m.node = node;
  m.key = key;
  m.attempt = attempt;
  return m;
}

group_message abort_message(const std::string& group, uint32_t bundle, const bundle_site& site) {
  return abort_key(site.node, node_key(group, bundle, site), site.attempt);
}

// Gives back a site's reservation on the head's view, if its node is still there.
void unreserve(cluster_view& view, const bundle_site& site) {
  if (view.find(site.node)) (void)view.release(site.node, site.alloc);
}

}  // namespace

expected<group_state> group_table::create(group_spec spec, cluster_view& view, time_point now) {
  if (spec.id.empty()) return status{errc::invalid_argument, "a placement group needs an id"};
  if (groups_.count(spec.id)) return status{errc::already_exists, "placement group " + spec.id + " exists already"};
  auto p = place_preferring(view, spec.bundles, spec.strat, spec.avoid, spec.prefer);
  if (!p) return p.error();
  group g;
  g.spec = std::move(spec);
  g.created = g.since = g.next_try = now;
  g.site.resize(g.spec.bundles.size());
  if (p->result == outcome::infeasible) {
    set_state(g, group_state::infeasible);
    g.reason = p->reason;
  } else {
    queue_.push_back(g.spec.id);
  }
  auto state = g.state;
  groups_.emplace(g.spec.id, std::move(g));
  return state;
}

std::vector<uint32_t> group_table::unplaced(const group& g) const {
  std::vector<uint32_t> out;
  for (uint32_t b = 0; b < g.site.size(); ++b)
    if (!g.site[b]) out.push_back(b);
  return out;
}

namespace {

bool holds(group_state s) {
  return s == group_state::preparing || s == group_state::created || s == group_state::rescheduling;
}

}  // namespace

// Every change of a group's state goes through here, so that what each user holds is
// kept as it changes (not summed over every group on every schedule).
void group_table::set_state(group& g, group_state to) {
  const bool before = holds(g.state), after = holds(to);
  g.state = to;
  if (before == after) return;
  auto& h = held_[g.spec.user];
  auto e = held_by_exp_.try_emplace({g.spec.user, g.spec.experiment}).first;
  for (auto* x : {&h, &e->second}) {
    for (const auto& b : g.spec.bundles) {
      if (after) x->gpus += b.gpu(), x->cpus += b.cpu(), x->memory += b.memory();
      else x->gpus -= b.gpu(), x->cpus -= b.cpu(), x->memory -= b.memory();
    }
    x->groups += after ? 1 : -1;
  }
  if (e->second.groups == 0) held_by_exp_.erase(e);  // experiments come and go: keep only those that hold
}

namespace {

quantity gpus_of(const group_spec& s) {
  quantity q;
  for (const auto& b : s.bundles) q += b.gpu();
  return q;
}
quantity cpus_of(const group_spec& s) {
  quantity q;
  for (const auto& b : s.bundles) q += b.cpu();
  return q;
}

}  // namespace

// Why a pending group of a user with limits may not be placed now (empty: it may);
// `never`: it asks more than the quota allows at all.
std::string group_table::over_quota(const group& g, const holding& h, bool& never) const {
  never = false;
  auto it = users_.find(g.spec.user);
  if (it == users_.end()) return {};
  const auto& l = it->second;
  const std::string& u = g.spec.user;
  auto check = [&](const std::optional<quantity>& quota, quantity held, quantity asks, const char* what) -> std::string {
    if (!quota || held + asks <= *quota) return {};
    never = asks > *quota;
    if (never)
      return "it asks " + asks.to_string() + " " + what + ", more than " + u + "'s quota of " + quota->to_string() +
             " (the admin can raise it: tune user set " + u + " --" + what + " N)";
    return "over " + u + "'s quota of " + quota->to_string() + " " + what + ": " + held.to_string() + " in use, it asks " +
           asks.to_string() + " (it waits until " + u + "'s other groups give some back)";
  };
  if (auto why = check(l.gpus, h.gpus, gpus_of(g.spec), "gpus"); !why.empty()) return why;
  if (auto why = check(l.cpus, h.cpus, cpus_of(g.spec), "cpus"); !why.empty()) return why;
  if (l.max_trials && h.groups + 1 > *l.max_trials)
    return "over " + u + "'s quota of " + std::to_string(*l.max_trials) + " trials at once: " + std::to_string(h.groups) +
           " placement groups held (it waits until one is given back)";
  return {};
}

int64_t group_table::priority_of(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? int64_t{0} : it->second.priority;
}

// One pass over the queue: what no longer waits leaves it, the rest goes to its
// experiment's lane, in order. Few experiments wait at once: lanes are found by a
// linear look.
std::vector<group_table::lane>& group_table::build_lanes() {
  auto& lanes = lanes_;
  for (auto& l : lanes) l.entries.clear(), l.next = 0, l.done = false;
  size_t kept = 0;
  for (size_t i = 0; i < queue_.size(); ++i) {
    auto found = groups_.find(queue_[i]);
    if (found == groups_.end() || found->second.state == group_state::removed ||
        found->second.state == group_state::created || found->second.state == group_state::infeasible)
      continue;
    if (kept != i) queue_[kept] = std::move(queue_[i]);
    group* g = &found->second;
    if (!g->lane_user) g->lane_user = &*names_.insert(g->spec.user).first;
    const std::string* u = g->lane_user;
    auto l = std::find_if(lanes.begin(), lanes.end(),
                          [&](const lane& x) { return x.user == u && x.experiment == g->spec.experiment; });
    if (l == lanes.end()) {
      l = lanes.insert(lanes.end(), lane{});
      l->user = u;
      l->experiment = g->spec.experiment;
    }
    l->entries.emplace_back(kept++, g);
  }
  queue_.resize(kept);
  std::erase_if(lanes, [](const lane& l) { return l.entries.empty(); });  // only experiments that wait
  return lanes;
}

// Places group `g` on the view and adds the prepares to `out`; or says why it waits
// (its reason set), failing it when it can never fit.
group_table::attempt_result group_table::try_place(group& g, cluster_view& view, time_point now,
                                                   std::vector<group_message>& out) {
  auto todo = unplaced(g);
  std::vector<resource_set> bundles;
  for (auto b : todo) bundles.push_back(g.spec.bundles[b]);
  std::vector<node_id> avoid = g.spec.avoid;
  avoid.insert(avoid.end(), draining_.begin(), draining_.end());
  if (g.spec.strat == strategy::strict_spread)
    for (auto& site : g.site)
      if (site) avoid.push_back(site->node);
  auto p = place_preferring(view, bundles, g.spec.strat, avoid, g.spec.prefer);
  if (!p || p->result != outcome::placed) {
    std::string why = p ? p->reason : p.error().message();
    // Infeasible only on the nodes that are not draining: it waits for them.
    bool never = p && p->result == outcome::infeasible && draining_.empty();
    if (never && g.state == group_state::pending) {  // it can never be placed: fail it, now
      set_state(g, group_state::infeasible);
      g.reason = why;
      g.since = now;
      return attempt_result::infeasible;
    }
    g.reason = never ? why + " (on the nodes in the cluster now; waiting for nodes to join)" : why;
    return never ? attempt_result::waits_for_nodes : attempt_result::waits;
  }
  if (!commit(view, *p)) return attempt_result::waits;  // cannot happen: the view is ours; be safe anyway
  g.attempt = next_attempt_++;
  g.reason.clear();
  g.placing = todo;
  g.yes.assign(todo.size(), 0);
  g.attempt_started = now;
  if (g.state == group_state::pending) {
    set_state(g, group_state::preparing);
    g.since = now;
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    auto b = todo[i];
    g.site[b] = bundle_site{p->bundles[i].node, p->bundles[i].alloc, g.attempt};
    g.site[b]->owner = g.spec.user;
    group_message m;
    m.what = group_message::kind::prepare;
    m.node = p->bundles[i].node;
    m.key = node_key(g.spec.id, b, *g.site[b]);
    m.attempt = g.attempt;
    m.request = g.spec.bundles[b];
    m.preferred = p->bundles[i].alloc;
    out.push_back(std::move(m));
  }
  return attempt_result::placed;
}

std::vector<group_message> group_table::schedule(cluster_view& view, time_point now) {
  std::vector<group_message> out;
  blocked_.clear();
  if (queue_.empty()) return out;
  // Each experiment's waiting groups in arrival order (a lane each). The next group
  // placed is the head of the lane of the user with the highest priority, then the
  // smallest weighted dominant share (GPUs, CPUs or memory held over the cluster's, over
  // the weight), then between one user's experiments the smallest dominant share of the
  // experiment, then the earliest: free resources go to whoever is furthest below their
  // share. Without users and experiments there is one lane: first come, first served.
  auto& lanes = build_lanes();
  auto& held = held_;
  quantity gpu_total, cpu_total;  // for the shares: only when lanes compete
  int64_t memory_total = 0;
  if (lanes.size() > 1)
    for (size_t slot = 0; slot < view.size(); ++slot) {
      const auto& t = view.node(slot).total();
      gpu_total += t.gpu(), cpu_total += t.cpu(), memory_total += t.memory();
    }
  auto dominant = [&](const holding& h) {
    return std::max({gpu_total.is_zero() ? 0.0 : h.gpus.to_double() / gpu_total.to_double(),
                     cpu_total.is_zero() ? 0.0 : h.cpus.to_double() / cpu_total.to_double(),
                     memory_total <= 0 ? 0.0 : static_cast<double>(h.memory) / static_cast<double>(memory_total)});
  };
  auto share = [&](const std::string& user) {
    auto it = users_.find(user);
    return dominant(held[user]) / (it == users_.end() ? 1.0 : it->second.weight);
  };
  auto exp_share = [&](const lane& l) {
    auto e = held_by_exp_.find({*l.user, l.experiment});
    return e == held_by_exp_.end() ? 0.0 : dominant(e->second);
  };
  // Each lane's priority and shares, once (a placement changes only its own user's and
  // experiment's shares).
  if (lanes.size() > 1)
    for (auto& l : lanes) l.priority = priority_of(*l.user), l.share = share(*l.user), l.exp_share = exp_share(l);
  // The lane whose head goes next (null: none left).
  auto pick = [&]() -> lane* {
    lane* best = nullptr;
    for (auto& l : lanes) {
      if (l.done || l.next >= l.entries.size()) continue;
      if (best) {
        const lane& b = *best;
        bool better = l.priority != b.priority                      ? l.priority > b.priority
                      : l.share != b.share                          ? l.share < b.share
                      : l.user == b.user && l.exp_share != b.exp_share ? l.exp_share < b.exp_share
                                                                    : l.entries[l.next].first < b.entries[b.next].first;
        if (!better) continue;
      }
      best = &l;
    }
    return best;
  };
  std::vector<size_t> gone;  // queue_ entries that became infeasible
  for (;;) {
    lane* best = pick();
    if (!best) break;
    const std::string* user = best->user;
    const size_t index = best->entries[best->next].first;
    group& g = *best->entries[best->next].second;
    if (!g.placing.empty()) {  // an attempt is in flight: it holds its place, others go on
      ++best->next;
      continue;
    }
    if (g.next_try > now) break;  // backing off: nothing overtakes it
    if (g.state == group_state::pending) {
      bool never = false;
      if (auto why = over_quota(g, held[*user], never); !why.empty()) {
        g.reason = why;
        if (never) {
          set_state(g, group_state::infeasible);
          g.since = now;
          gone.push_back(index);
          ++best->next;
        } else {
          // The rest of this user's groups (in every experiment) wait behind it; others go on.
          for (auto& l : lanes)
            if (l.user == user) l.done = true;
        }
        continue;
      }
    }
    auto tried = try_place(g, view, now, out);
    if (tried == attempt_result::waits) {
      blocked_ = g.spec.id;
      break;  // first come (by share), first served: later groups wait behind this one
    }
    if (tried == attempt_result::infeasible) gone.push_back(index);
    // placed, or a rescheduling group waiting for nodes (it does not block the others)
    if (tried == attempt_result::placed && lanes.size() > 1) {
      const double now_share = share(*user);
      for (auto& l : lanes)
        if (l.user == user) l.share = now_share;
      best->exp_share = exp_share(*best);
    }
    ++best->next;
  }
  std::sort(gone.rbegin(), gone.rend());
  for (size_t i : gone) queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(i));
  return out;
}

std::optional<group_table::preemption> group_table::preempt(const cluster_view& view, time_point now,
                                                             std::chrono::milliseconds again,
                                                             const std::function<bool(const std::string&)>& movable,
                                                             std::chrono::milliseconds retry,
                                                             const std::function<int64_t(const std::string&)>& since_checkpoint) {
  std::erase_if(asked_, [&](const auto& a) { return now - a.second > again || !groups_.count(a.first); });
  std::erase_if(asked_for_, [&](const auto& a) { return now - a.second > retry || !groups_.count(a.first); });
  auto found = groups_.find(blocked_);
  if (found == groups_.end() || asked_for_.count(blocked_)) return std::nullopt;
  const group& waiting = found->second;
  if (waiting.state != group_state::pending && waiting.state != group_state::rescheduling) return std::nullopt;
  const int64_t mine = priority_of(waiting.spec.user);
  if (mine <= lowest_priority_) return std::nullopt;  // nobody below it: nothing to look at (the common case)
  std::vector<const group*> candidates;
  for (const auto& [id, g] : groups_)
    if (g.state == group_state::created && priority_of(g.spec.user) < mine && !asked_.count(id) && (!movable || movable(id)))
      candidates.push_back(&g);
  if (candidates.empty()) return std::nullopt;
  // What a move would redo: the iterations since the trial's last checkpoint (unknown last).
  std::map<const group*, int64_t> redo;
  for (const group* g : candidates) {
    int64_t n = since_checkpoint ? since_checkpoint(g->spec.id) : -1;
    redo[g] = n < 0 ? INT64_MAX : n;
  }
  std::sort(candidates.begin(), candidates.end(), [&](const group* a, const group* b) {
    auto pa = priority_of(a->spec.user), pb = priority_of(b->spec.user);
    if (pa != pb) return pa < pb;
    auto ga = gpus_of(a->spec), gb = gpus_of(b->spec);
    if (ga != gb) return ga > gb;
    if (redo[a] != redo[b]) return redo[a] < redo[b];  // the most recently checkpointed
    return a->created < b->created;  // the oldest: most likely running, and checkpointed
  });
  std::vector<resource_set> bundles;
  for (auto b : unplaced(waiting)) bundles.push_back(waiting.spec.bundles[b]);
  std::vector<node_id> avoid = waiting.spec.avoid;
  avoid.insert(avoid.end(), draining_.begin(), draining_.end());
  // Whether the group fits once these groups are released (on a copy of the view).
  auto fits_without = [&](const std::vector<const group*>& released) {
    cluster_view trial = view;
    for (const group* v : released)
      for (const auto& site : v->site)
        if (site && trial.find(site->node)) (void)trial.release(site->node, site->alloc);
    auto p = place(trial, bundles, waiting.spec.strat, avoid);
    return p && p->result == outcome::placed;
  };
  // Candidates are added in order until it fits; then each that is not needed is left out.
  std::vector<const group*> chosen;
  for (const group* v : candidates) {
    chosen.push_back(v);
    if (fits_without(chosen)) break;
  }
  if (!fits_without(chosen)) return std::nullopt;  // even all of them would not make room
  // The least preferred are left out first.
  for (size_t i = chosen.size(); i-- > 0;) {
    auto fewer = chosen;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
    if (!fewer.empty() && fits_without(fewer)) chosen = std::move(fewer);
  }
  preemption out;
  out.for_group = waiting.spec.id;
  for (const group* v : chosen) out.victims.push_back(v->spec.id);
  {
    for (const auto& id : out.victims) asked_[id] = now;
    asked_for_[out.for_group] = now;
    out.reason = "preempted for placement group " + out.for_group + " of " +
                 (waiting.spec.user.empty() ? std::string{"the admin"} : waiting.spec.user) + " (priority " +
                 std::to_string(mine) + ", above " + std::to_string(priority_of(groups_.at(out.victims.front()).spec.user)) + ")";
    return out;
  }
}

void group_table::fail_attempt(group& g, std::vector<group_message>& out, cluster_view& view, time_point now,
                               std::string why) {
  for (auto b : g.placing) {
    if (!g.site[b]) continue;
    unreserve(view, *g.site[b]);
    out.push_back(abort_message(g.spec.id, b, *g.site[b]));
    g.site[b].reset();
  }
  g.placing.clear();
  g.yes.clear();
  if (g.state == group_state::preparing) set_state(g, group_state::pending);
  ++g.failures;
  auto backoff = first_backoff * (1 << std::min(g.failures - 1, 10));
  g.next_try = now + std::min<std::chrono::milliseconds>(backoff, max_backoff);
  g.reason = "retrying: " + why;
}

std::vector<group_message> group_table::on_prepared(const bundle_key& key, uint64_t attempt, const node_id& node,
                                                    const expected<allocation>& answer, cluster_view& view,
                                                    time_point now, uint64_t node_version) {
  std::vector<group_message> out;
  auto slash = key.group.rfind('/');
  std::string id = key.group.substr(0, slash);
  auto it = groups_.find(id);
  group* g = it == groups_.end() ? nullptr : &it->second;
  // Does the head hold this very reservation (this bundle, node and attempt)?
  bool known = g && key.bundle < g->site.size() && g->site[key.bundle] && g->site[key.bundle]->node == node &&
               g->site[key.bundle]->attempt == attempt;
  if (!known) {
    // A reply from an older attempt or a removed group: free whatever it took there.
    if (answer) out.push_back(abort_key(node, key, attempt));
    return out;
  }
  auto pos = std::find(g->placing.begin(), g->placing.end(), key.bundle);
  if (pos == g->placing.end() || g->yes[static_cast<size_t>(pos - g->placing.begin())])
    return out;  // a repeated answer: already counted
  if (!answer) {
    fail_attempt(*g, out, view, now, "node " + node + " refused bundle " + std::to_string(key.bundle) + ": " +
                                        answer.error().message());
    return out;
  }
  auto& site = *g->site[key.bundle];
  if (!(*answer == site.alloc)) {  // the node put it on other cards: book what it took
    unreserve(view, site);
    site.alloc = *answer;
    if (!view.apply(node, site.alloc)) {
      fail_attempt(*g, out, view, now, "node " + node + " took cards the head had promised elsewhere");
      return out;
    }
  }
  site.answered_at = node_version;
  g->yes[static_cast<size_t>(pos - g->placing.begin())] = 1;
  if (std::find(g->yes.begin(), g->yes.end(), 0) != g->yes.end()) return out;
  // Every node said yes: commit.
  for (auto b : g->placing) {
    group_message m;
    m.what = group_message::kind::commit;
    m.node = g->site[b]->node;
    m.key = node_key(g->spec.id, b, *g->site[b]);
    m.attempt = g->attempt;
    out.push_back(std::move(m));
  }
  if (g->state == group_state::rescheduling) moved_.push_back({g->spec.id, g->placing});
  else placement_latency_.observe(std::chrono::duration<double>(now - g->created).count());
  g->placing.clear();
  g->yes.clear();
  g->failures = 0;
  set_state(*g, group_state::created);
  g->since = now;
  return out;
}

std::vector<group_message> group_table::on_committed(const bundle_key& key, uint64_t attempt, const node_id& node,
                                                     const status& answer, cluster_view& view, time_point now) {
  std::vector<group_message> out;
  if (answer) return out;
  std::string id = key.group.substr(0, key.group.rfind('/'));
  auto it = groups_.find(id);
  if (it == groups_.end()) return out;
  group& g = it->second;
  if (key.bundle >= g.site.size() || !g.site[key.bundle] || g.site[key.bundle]->node != node ||
      g.site[key.bundle]->attempt != attempt)
    return out;
  // The node no longer holds it (its prepare expired before the commit): place it again.
  lose_site(g, key.bundle, out, view, now, "bundle " + std::to_string(key.bundle) + " was lost on node " + node + ": " + answer.message());
  return out;
}

void group_table::lose_site(group& g, uint32_t bundle, std::vector<group_message>& out, cluster_view& view,
                            time_point now, const std::string& why) {
  if (std::find(g.placing.begin(), g.placing.end(), bundle) != g.placing.end()) {
    fail_attempt(g, out, view, now, why);
    return;
  }
  unreserve(view, *g.site[bundle]);
  g.site[bundle].reset();
  if (g.state == group_state::created) {
    set_state(g, group_state::rescheduling);
    g.since = now;
    queue_.push_front(g.spec.id);
  }
  g.reason = why;
}

std::vector<group_message> group_table::expire(cluster_view& view, time_point now, std::chrono::milliseconds timeout) {
  std::vector<group_message> out;
  for (auto& [id, g] : groups_) {
    if (g.placing.empty() || now - g.attempt_started <= timeout) continue;
    std::string silent;
    for (size_t i = 0; i < g.placing.size(); ++i)
      if (!g.yes[i]) silent += (silent.empty() ? "" : ", ") + g.site[g.placing[i]]->node;
    fail_attempt(g, out, view, now, "no answer from " + silent + " in time");
  }
  return out;
}

std::vector<group_message> group_table::node_lost(const node_id& node, cluster_view& view, time_point now) {
  std::vector<group_message> out;
  for (auto& [id, g] : groups_) {
    if (g.state == group_state::removed || g.state == group_state::infeasible) continue;
    bool attempt_hit = false;
    for (auto b : g.placing) attempt_hit |= g.site[b] && g.site[b]->node == node;
    if (attempt_hit) {
      fail_attempt(g, out, view, now, "node " + node + " was lost");
      std::erase_if(out, [&](const group_message& m) { return m.node == node; });  // nobody to tell there
    }
    bool lost_committed = false;
    for (uint32_t b = 0; b < g.site.size(); ++b) {
      if (!g.site[b] || g.site[b]->node != node) continue;
      g.site[b].reset();
      lost_committed = true;
    }
    if (!lost_committed) continue;
    if (g.spec.strat == strategy::strict_pack) {  // all together or not at all: move every bundle
      for (uint32_t b = 0; b < g.site.size(); ++b) {
        if (!g.site[b]) continue;
        unreserve(view, *g.site[b]);
        out.push_back(abort_message(id, b, *g.site[b]));
        g.site[b].reset();
      }
    }
    if (g.state == group_state::created) {
      set_state(g, group_state::rescheduling);
      g.since = now;
      g.reason = "node " + node + " was lost; placing its bundles again";
      queue_.push_front(id);
    }
  }
  return out;
}

std::vector<group_message> group_table::remove(const std::string& id, cluster_view& view, time_point now) {
  std::vector<group_message> out;
  auto it = groups_.find(id);
  if (it == groups_.end() || it->second.state == group_state::removed) return out;
  group& g = it->second;
  for (uint32_t b = 0; b < g.site.size(); ++b) {
    if (!g.site[b]) continue;
    unreserve(view, *g.site[b]);
    out.push_back(abort_message(id, b, *g.site[b]));
    g.site[b].reset();
  }
  g.placing.clear();
  g.yes.clear();
  set_state(g, group_state::removed);
  g.since = now;
  g.reason.clear();
  std::erase(queue_, id);
  return out;
}

status group_table::adopt(group_spec spec, std::vector<bundle_site> sites, time_point now) {
  if (spec.id.empty()) return {errc::invalid_argument, "a placement group needs an id"};
  if (groups_.count(spec.id)) return {errc::already_exists, "placement group " + spec.id + " exists already"};
  if (sites.size() != spec.bundles.size())
    return {errc::invalid_argument, "placement group " + spec.id + ": " + std::to_string(sites.size()) +
                                        " sites for " + std::to_string(spec.bundles.size()) + " bundles"};
  group g;
  g.spec = std::move(spec);
  set_state(g, group_state::created);
  g.created = g.since = g.next_try = now;
  for (auto& s : sites) {
    g.attempt = std::max(g.attempt, s.attempt);
    g.site.emplace_back(std::move(s));
  }
  groups_.emplace(g.spec.id, std::move(g));
  return status::ok();
}

std::vector<group_message> group_table::reconcile(const node_id& node, const std::vector<bundle_key>& held,
                                                  cluster_view& view, time_point now, uint64_t version) {
  std::vector<group_message> out;
  std::set<bundle_key> holds(held.begin(), held.end());
  // What the node holds that is not one of the head's current reservations there.
  for (auto& key : held) {
    std::string id;
    uint64_t attempt = 0;
    std::string owner;
    bool ours = false;
    if (parse_node_key(key, id, attempt, &owner)) {
      auto it = groups_.find(id);
      if (it != groups_.end() && key.bundle < it->second.site.size()) {
        auto& s = it->second.site[key.bundle];
        ours = s && s->node == node && s->attempt == attempt && s->owner == owner;
      }
    }
    if (!ours) out.push_back(abort_key(node, key, attempt));
  }
  // The head's reservations there, answered, that the node no longer holds.
  for (auto& [id, g] : groups_) {
    for (uint32_t b = 0; b < g.site.size(); ++b) {
      if (!g.site[b] || g.site[b]->node != node) continue;
      auto pos = std::find(g.placing.begin(), g.placing.end(), b);
      bool answered = pos == g.placing.end() || g.yes[static_cast<size_t>(pos - g.placing.begin())];
      if (!answered || g.site[b]->answered_at > version || holds.count(node_key(id, b, *g.site[b])))
        continue;
      lose_site(g, b, out, view, now, "bundle " + std::to_string(b) + " is no longer held on node " + node);
    }
  }
  return out;
}

bool group_table::forget(const std::string& id) {
  auto it = groups_.find(id);
  if (it == groups_.end()) return false;
  if (it->second.state != group_state::removed && it->second.state != group_state::infeasible) return false;
  groups_.erase(it);
  std::erase(queue_, id);
  return true;
}

void group_table::forget_ended(time_point now, std::chrono::milliseconds keep, size_t max_ended) {
  std::vector<std::pair<time_point, std::string>> ended;
  for (auto& [id, g] : groups_)
    if (g.state == group_state::removed || g.state == group_state::infeasible) ended.emplace_back(g.since, id);
  std::sort(ended.begin(), ended.end());
  size_t excess = ended.size() > max_ended ? ended.size() - max_ended : 0;
  for (size_t i = 0; i < ended.size(); ++i)
    if (i < excess || now - ended[i].first > keep) forget(ended[i].second);
}

std::vector<group_table::moved_bundles> group_table::take_moved() { return std::exchange(moved_, {}); }

const group_table::group* group_table::find(const std::string& id) const {
  auto it = groups_.find(id);
  return it == groups_.end() ? nullptr : &it->second;
}

}  // namespace tune
