#include "tune/cluster/groups.hpp"

#include <algorithm>
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

bundle_key node_key(const std::string& group, uint32_t bundle, uint64_t attempt) {
  return {group + "/" + std::to_string(attempt), bundle};
}

bool parse_node_key(const bundle_key& key, std::string& group, uint64_t& attempt) {
  auto slash = key.group.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == key.group.size()) return false;
  uint64_t a = 0;
  for (size_t i = slash + 1; i < key.group.size(); ++i) {
    char c = key.group[i];
    if (c < '0' || c > '9' || a > (UINT64_MAX - 9) / 10) return false;
    a = a * 10 + static_cast<uint64_t>(c - '0');
  }
  group = key.group.substr(0, slash);
  attempt = a;
  return true;
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
  return abort_key(site.node, node_key(group, bundle, site.attempt), site.attempt);
}

// Gives back a site's reservation on the head's view, if its node is still there.
void unreserve(cluster_view& view, const bundle_site& site) {
  if (view.find(site.node)) (void)view.release(site.node, site.alloc);
}

}  // namespace

expected<group_state> group_table::create(group_spec spec, cluster_view& view, time_point now) {
  if (spec.id.empty()) return status{errc::invalid_argument, "a placement group needs an id"};
  if (groups_.count(spec.id)) return status{errc::already_exists, "placement group " + spec.id + " exists already"};
  auto p = place(view, spec.bundles, spec.strat, spec.avoid);
  if (!p) return p.error();
  group g;
  g.spec = std::move(spec);
  g.created = g.since = g.next_try = now;
  g.site.resize(g.spec.bundles.size());
  if (p->result == outcome::infeasible) {
    g.state = group_state::infeasible;
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

std::vector<group_message> group_table::schedule(cluster_view& view, time_point now) {
  std::vector<group_message> out;
  for (auto it = queue_.begin(); it != queue_.end();) {
    auto found = groups_.find(*it);
    if (found == groups_.end() || found->second.state == group_state::removed ||
        found->second.state == group_state::created || found->second.state == group_state::infeasible) {
      it = queue_.erase(it);
      continue;
    }
    group& g = found->second;
    if (!g.placing.empty()) {  // an attempt is in flight: it holds its place, others go on
      ++it;
      continue;
    }
    if (g.next_try > now) break;  // backing off: nothing overtakes it
    auto todo = unplaced(g);
    std::vector<resource_set> bundles;
    for (auto b : todo) bundles.push_back(g.spec.bundles[b]);
    std::vector<node_id> avoid = g.spec.avoid;
    avoid.insert(avoid.end(), draining_.begin(), draining_.end());
    if (g.spec.strat == strategy::strict_spread)
      for (auto& s : g.site)
        if (s) avoid.push_back(s->node);
    auto p = place(view, bundles, g.spec.strat, avoid);
    if (!p || p->result != outcome::placed) {
      std::string why = p ? p->reason : p.error().message();
      // Infeasible only on the nodes that are not draining: it waits for them.
      bool never = p && p->result == outcome::infeasible && draining_.empty();
      if (never && g.state == group_state::pending) {  // it can never be placed: fail it, now
        g.state = group_state::infeasible;
        g.reason = why;
        g.since = now;
        it = queue_.erase(it);
        continue;
      }
      g.reason = never ? why + " (on the nodes in the cluster now; waiting for nodes to join)" : why;
      if (never) {  // a rescheduling group waits for nodes without blocking the others
        ++it;
        continue;
      }
      break;  // first come, first served: later groups wait behind this one
    }
    if (!commit(view, *p)) break;  // cannot happen: the view is ours; be safe anyway
    g.attempt = next_attempt_++;
    g.reason.clear();
    g.placing = todo;
    g.yes.assign(todo.size(), 0);
    g.attempt_started = now;
    if (g.state == group_state::pending) {
      g.state = group_state::preparing;
      g.since = now;
    }
    for (size_t i = 0; i < todo.size(); ++i) {
      auto b = todo[i];
      g.site[b] = bundle_site{p->bundles[i].node, p->bundles[i].alloc, g.attempt};
      group_message m;
      m.what = group_message::kind::prepare;
      m.node = p->bundles[i].node;
      m.key = node_key(g.spec.id, b, g.attempt);
      m.attempt = g.attempt;
      m.request = g.spec.bundles[b];
      m.preferred = p->bundles[i].alloc;
      out.push_back(std::move(m));
    }
    ++it;
  }
  return out;
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
  if (g.state == group_state::preparing) g.state = group_state::pending;
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
    m.key = node_key(g->spec.id, b, g->attempt);
    m.attempt = g->attempt;
    out.push_back(std::move(m));
  }
  if (g->state == group_state::rescheduling) moved_.push_back({g->spec.id, g->placing});
  else placement_latency_.observe(std::chrono::duration<double>(now - g->created).count());
  g->placing.clear();
  g->yes.clear();
  g->failures = 0;
  g->state = group_state::created;
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
    g.state = group_state::rescheduling;
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
      g.state = group_state::rescheduling;
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
  g.state = group_state::removed;
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
  g.state = group_state::created;
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
    bool ours = false;
    if (parse_node_key(key, id, attempt)) {
      auto it = groups_.find(id);
      if (it != groups_.end() && key.bundle < it->second.site.size()) {
        auto& s = it->second.site[key.bundle];
        ours = s && s->node == node && s->attempt == attempt;
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
      if (!answered || g.site[b]->answered_at > version || holds.count(node_key(id, b, g.site[b]->attempt)))
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
