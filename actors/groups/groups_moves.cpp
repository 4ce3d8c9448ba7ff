// The groups actor's moves: each asked of a group's owner (its trial paused through its
// checkpoint, its group given back; docs/users.md), none of a detached group. For a
// higher-priority group on a full cluster (preemption), off a draining node, and to even
// the GPU load (rebalance).
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "groups_state.hpp"
#include "log.hpp"
#include "tune/core/json_text.hpp"

namespace tune {
namespace groups_impl {

namespace {

// Asks the owner of `group` to move its trial off `avoid`; false when nobody can (a
// detached group has no owner to ask).
bool ask_move(groups_actor self, const std::string& group, const std::vector<node_id>& avoid, const std::string& why) {
  auto& st = self->state;
  auto o = st.owner_of.find(group);
  if (o == st.owner_of.end()) return false;
  self->send(o->second, wire::pg_move_atom::value, group, avoid, why);
  return true;
}

// GPUs a created group holds on each node.
std::map<node_id, double> gpus_by_node(const group_table::group& g) {
  std::map<node_id, double> out;
  for (auto& s : g.site)
    if (s)
      for (auto& grant : s->alloc.gpus) out[s->node] += grant.share.to_double();
  return out;
}

// A group rebalance may move: created, owned, every bundle on one node, holding GPUs.
struct movable_group {
  std::string group;
  node_id node;
  double gpu;
};

// The GPU load of the nodes with GPUs (draining ones aside): their cards, what groups
// hold there, and the groups that may move.
struct gpu_load {
  std::map<node_id, double> cap, used;
  std::vector<movable_group> list;
};

gpu_load measure_load(groups_actor self) {
  auto& st = self->state;
  gpu_load l;
  for (auto& [id, node] : st.nodes) {
    auto* res = st.view.find(id);
    if (!res || st.table.draining().count(id)) continue;
    if (!res->gpus().empty()) {
      l.cap[id] = static_cast<double>(res->gpus().size());
      l.used[id] = 0;
    }
  }
  for (auto& [id, g] : st.table.groups()) {
    if (g.state != group_state::created) continue;
    auto by = gpus_by_node(g);
    for (auto& [n, x] : by)
      if (l.used.count(n)) l.used[n] += x;
    if (by.size() == 1 && st.owner_of.count(id) && l.cap.count(by.begin()->first) && by.begin()->second > 0)
      l.list.push_back({id, by.begin()->first, by.begin()->second});
  }
  return l;
}

struct load_move {
  std::string group;
  node_id from, to;
  double gpu;
};

// Moves one-node groups from the fullest node to the emptiest while that narrows the
// gap by more than nothing and the gap is over one trial's share; `l.used` as after them.
std::vector<load_move> plan_moves(gpu_load& l) {
  auto& cap = l.cap;
  auto& used = l.used;
  std::vector<load_move> out;
  std::set<std::string> moved;
  for (int round = 0; round < 1000 && cap.size() >= 2; ++round) {
    auto frac = [&](const node_id& n) { return used[n] / cap[n]; };
    node_id hi = cap.begin()->first, lo = hi;
    for (auto& [n, c] : cap) {
      if (frac(n) > frac(hi)) hi = n;
      if (frac(n) < frac(lo)) lo = n;
    }
    // The smallest movable on the fullest node that fits on the emptiest and narrows the gap.
    const movable_group* best = nullptr;
    for (auto& m : l.list)
      if (m.node == hi && !moved.count(m.group) && (!best || m.gpu < best->gpu)) best = &m;
    if (!best) break;
    double gap = frac(hi) - frac(lo);
    double after = std::abs((used[hi] - best->gpu) / cap[hi] - (used[lo] + best->gpu) / cap[lo]);
    if (gap <= best->gpu / cap[lo] + 1e-9 || after >= gap - 1e-9 || used[lo] + best->gpu > cap[lo] + 1e-9) break;
    used[hi] -= best->gpu;
    used[lo] += best->gpu;
    moved.insert(best->group);
    out.push_back({best->group, hi, lo, best->gpu});
  }
  return out;
}

// Evens the GPU load (allocated / total, per node with GPUs, draining ones aside), each
// move asked of its owner.
nlohmann::json rebalance(groups_actor self) {
  auto& st = self->state;
  auto l = measure_load(self);
  nlohmann::json moves = nlohmann::json::array(), load = nlohmann::json::object();
  for (auto& m : plan_moves(l)) {
    std::vector<node_id> avoid;
    for (auto& [n, c] : st.nodes)
      if (n != m.to) avoid.push_back(n);
    ask_move(self, m.group, avoid, "rebalance: from " + m.from + " to " + m.to);
    moves.push_back({{"group", m.group}, {"from", m.from}, {"to", m.to}, {"gpu", m.gpu}});
  }
  for (auto& [n, c] : l.cap) load[n] = l.used[n] / c;
  if (!moves.empty()) log_line("rebalance: " + std::to_string(moves.size()) + " trial(s) asked to move");
  return {{"moves", moves}, {"load", load}};
}

// Drain a node: nothing new placed there, every owned group on it asked to move.
caf::result<wire::drain_atom, std::string> drain_node(groups_actor self, const node_id& node, bool on) {
  auto& st = self->state;
  if (!st.view.find(node) && on) return wire::refusal(errc::invalid_argument, "no alive node " + node);
  st.table.set_draining(node, on);
  nlohmann::json moves = nlohmann::json::array(), stays = nlohmann::json::array();
  if (on) {
    for (auto& [id, g] : st.table.groups()) {
      if (g.state == group_state::removed || g.state == group_state::infeasible) continue;
      bool there = false;
      for (auto& s : g.site) there = there || (s && s->node == node);
      if (!there) continue;
      if (ask_move(self, id, {node}, "node " + node + " is draining")) moves.push_back({{"group", id}, {"from", node}});
      else stays.push_back({{"group", id}, {"why", "detached: nobody owns it to move it; remove it when done"}});
    }
    log_line("node " + node + " is draining: " + std::to_string(moves.size()) + " group(s) asked to move");
  } else {
    log_line("node " + node + " takes new work again");
  }
  flush(self);
  return {wire::drain_atom::value, json_text(nlohmann::json{{"moves", moves}, {"stays", stays}})};
}

}  // namespace

void preempt(groups_actor self) {
  auto& st = self->state;
  auto movable = [&](const std::string& id) { return st.owner_of.count(id) > 0; };
  auto since = [&](const std::string& id) {
    auto it = st.since_checkpoint.find(id);
    return it == st.since_checkpoint.end() ? int64_t{-1} : it->second;
  };
  auto p = st.table.preempt(st.view, self->clock().now(), std::chrono::seconds(30), movable, std::chrono::seconds(5), since);
  if (!p) return;
  std::string names;
  for (auto& v : p->victims) {
    ask_move(self, v, {}, p->reason);
    names += (names.empty() ? "" : ", ") + v;
  }
  log_line("placement group " + p->for_group + " waits on a full cluster: lower-priority group(s) " + names +
           " asked to move (" + p->reason + ")");
}

groups_moves_iface::behavior_type move_handlers(groups_actor self) {
  return {
      [self](wire::rebalance_atom) -> caf::result<wire::rebalance_atom, std::string> {
        return {wire::rebalance_atom::value, json_text(rebalance(self))};
      },
      [self](wire::drain_atom, const node_id& node, bool on) { return drain_node(self, node, on); },
  };
}

}  // namespace groups_impl
}  // namespace tune
