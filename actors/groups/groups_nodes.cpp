// The groups actor and the nodes: joins (the view of each node, what it holds: orphans
// kept for their owners, the rest reconciled with the table), deaths (their starts
// failed, their groups placed again), what other programs hold on their cards, and the
// nodes' answers to the two-phase protocol's prepares and commits.
#include <caf/detail/scope_guard.hpp>

#include <set>

#include "groups_state.hpp"
#include "log.hpp"

namespace tune {
namespace groups_impl {

namespace {

// What a node holds: keep the orphans it still holds, adopt new ones when allowed,
// and reconcile the rest with the table.
void take_holdings(groups_actor self, const node_id& node, const std::vector<wire::wire_hold>& holds, uint64_t version,
                   bool adopt) {
  auto& st = self->state;
  auto* res = st.view.find(node);
  if (!res) return;
  auto now = self->clock().now();
  std::vector<bundle_key> ours;
  std::set<bundle_key> held;
  for (auto& h : holds) {
    bundle_key key{h.key, h.bundle};
    held.insert(key);
    if (auto o = st.orphans.find(key); o != st.orphans.end() && o->second.node == node) continue;
    std::string id;
    uint64_t attempt = 0;
    if (adopt && h.committed && parse_node_key(key, id, attempt) && !st.table.find(id)) {
      auto request = wire::request_from_wire(h.request);
      auto alloc = wire::alloc_from_wire(h.alloc, *res);
      if (request && alloc && st.view.apply(node, *alloc)) {
        st.orphans[key] = {node, *request, *alloc, now};
        log_line("node " + node + " holds bundle " + key.to_string() +
                 " of a placement group this head does not know: kept for its owner to claim");
        continue;
      }
    }
    ours.push_back(std::move(key));
  }
  for (auto it = st.orphans.begin(); it != st.orphans.end();) {
    auto next = std::next(it);
    if (it->second.node == node && !held.count(it->first)) release_orphan(self, it, false);
    it = next;
  }
  send_all(self, st.table.reconcile(node, ours, st.view, now, version));
}

void node_down(groups_actor self, const node_id& id) {
  auto& st = self->state;
  if (!st.view.find(id)) return;
  std::erase_if(st.orphans, [&](const auto& o) { return o.second.node == id; });
  (void)st.view.remove_node(id);
  st.nodes.erase(id);
  if (auto it = st.starting.find(id); it != st.starting.end()) {
    for (auto& [n, p] : it->second) {
      if (*p.answered) continue;
      *p.answered = true;
      p.rp.deliver(wire::start_refusal("node " + id + " died before trial " + p.trial + " started"));
    }
    st.starting.erase(it);
  }
  send_all(self, st.table.node_lost(id, st.view, self->clock().now()));
}

bool same_node(const node_resources& a, const node_resources& b) {
  return a.total() == b.total() && a.gpus() == b.gpus();
}

void node_up(groups_actor self, const wire::wire_ad& ad, const caf::actor& node, bool first_join) {
  auto answer_claims = caf::detail::make_scope_guard([self] { answer_claim_waits(self); });
  auto& st = self->state;
  auto res = wire::resources_from_ad(ad);
  if (!res) return;  // the head checked it already
  auto totals = res->emptied();
  if (auto* known = st.view.find(ad.node_id); known && !same_node(*known, totals))
    node_down(self, ad.node_id);  // it came back as another machine
  if (!st.view.find(ad.node_id) && !st.view.add_node(ad.node_id, totals)) return;
  (void)st.view.set_others(ad.node_id, res->others());  // what other programs hold on its cards
  st.nodes[ad.node_id] = caf::actor_cast<node_iface>(node);
  st.hostname[ad.node_id] = ad.hostname;
  take_holdings(self, ad.node_id, ad.holdings, ad.holdings_version, first_join);
  flush(self);
}

// What other programs hold on a node's cards changed: groups that wait for them may fit
// now (or new ones must go elsewhere).
void others_changed(groups_actor self, const node_id& id, const std::vector<wire::wire_others>& others) {
  auto& st = self->state;
  if (!st.view.find(id)) return;
  std::vector<card_others> o;
  for (auto& w : others) o.push_back({w.units, w.memory, w.holds_card, w.who});
  if (auto s = st.view.set_others(id, std::move(o)); !s) log_line("node " + id + ": " + s.message());
  flush(self);
}

// Whether a node's answer about `key` comes from that node's current actor, and names
// an attempt (then its group and attempt are set).
bool from_node(groups_actor self, const node_id& node, const std::string& key, uint32_t bundle, std::string& group,
               uint64_t& attempt) {
  auto& st = self->state;
  auto it = st.nodes.find(node);
  return it != st.nodes.end() && it->second.address() == self->current_sender() &&
         parse_node_key({key, bundle}, group, attempt);
}

void node_prepared(groups_actor self, const node_id& node, const std::string& key, uint32_t bundle, bool ok,
                   const wire::wire_alloc& taken, const std::string& why, uint64_t version) {
  auto& st = self->state;
  std::string group;
  uint64_t attempt = 0;
  if (!from_node(self, node, key, bundle, group, attempt)) return;  // not from that node's current actor: ignore
  auto* n = st.view.find(node);
  expected<allocation> answer = status{errc::insufficient, why};
  if (ok) answer = wire::alloc_from_wire(taken, *n);
  send_all(self, st.table.on_prepared({key, bundle}, attempt, node, answer, st.view, self->clock().now(), version));
  flush(self);
}

// A commit the node could not carry out (one it did is heard of no further).
void node_committed(groups_actor self, const node_id& node, const std::string& key, uint32_t bundle, bool ok,
                    const std::string& why) {
  auto& st = self->state;
  std::string group;
  uint64_t attempt = 0;
  if (ok || !from_node(self, node, key, bundle, group, attempt)) return;
  send_all(self, st.table.on_committed({key, bundle}, attempt, node, status{errc::not_found, why}, st.view,
                                       self->clock().now()));
  flush(self);
}

}  // namespace

void release_orphan(groups_actor self, std::map<bundle_key, orphan>::iterator it, bool tell_node) {
  auto& st = self->state;
  if (st.view.find(it->second.node)) (void)st.view.release(it->second.node, it->second.alloc);
  auto n = st.nodes.find(it->second.node);
  if (tell_node && n != st.nodes.end())
    self->send(n->second, wire::abort_atom::value, it->first.group, it->first.bundle);
  st.orphans.erase(it);
}

void release_unclaimed(groups_actor self, time_point now) {
  auto& st = self->state;
  for (auto it = st.orphans.begin(); it != st.orphans.end();) {
    auto next = std::next(it);
    if (now - it->second.since > st.opt.orphan_grace) {
      log_line("released bundle " + it->first.to_string() + " on node " + it->second.node +
               ": nobody claimed its placement group");
      release_orphan(self, it, true);
    }
    it = next;
  }
}

groups_nodes_iface::behavior_type node_handlers(groups_actor self) {
  return {
      [self](wire::node_up_atom, const wire::wire_ad& ad, const caf::actor& node, bool first_join) {
        node_up(self, ad, node, first_join);
      },
      [self](wire::node_down_atom, const node_id& id) {
        node_down(self, id);
        flush(self);
      },
      [self](wire::holdings_atom, const node_id& id, uint64_t version, const std::vector<wire::wire_hold>& holds) {
        take_holdings(self, id, holds, version, false);
        flush(self);
      },
      [self](wire::others_atom, const node_id& id, const std::vector<wire::wire_others>& others) {
        others_changed(self, id, others);
      },
      [self](wire::prepare_atom, const node_id& node, const std::string& key, uint32_t bundle, bool ok,
             const wire::wire_alloc& taken, const std::string& why, uint64_t version) {
        node_prepared(self, node, key, bundle, ok, taken, why, version);
      },
      [self](wire::commit_atom, const node_id& node, const std::string& key, uint32_t bundle, bool ok,
             const std::string& why) { node_committed(self, node, key, bundle, ok, why); },
  };
}

}  // namespace groups_impl
}  // namespace tune
