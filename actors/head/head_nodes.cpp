// The head's nodes: joining, heartbeats, GPU audits, leaving, and dying (a lost
// connection, or silence beyond the heartbeat timeout found by the sweep).
#include <string_view>

#include "head_state.hpp"
#include "log.hpp"
#include "tune/cluster/version.hpp"

namespace tune {
namespace head_impl {

namespace {

void notify(head_actor self, const node_id& id, std::string_view state, const std::string& reason) {
  for (auto& s : self->state.subscribers)
    self->send(s, wire::node_event_atom::value, id, std::string{state}, reason);
}

// Forgets a node's connection; the placement-group actor is told the node is gone
// unless it is joining again over a new connection (then it reconciles what the node
// says it holds instead of moving every bundle away).
void node_gone(head_actor self, const node_id& id, bool tell_groups = true) {
  if (tell_groups) self->send(self->state.groups, wire::node_down_atom::value, id);
  self->state.reports.erase(id);
  auto it = self->state.addr_of.find(id);
  if (it == self->state.addr_of.end()) return;
  self->state.node_of.erase(it->second);
  self->state.addr_of.erase(it);
}

wire::join_answer join_node(head_actor self, const std::string& token, const wire::wire_ad& ad) {
  auto& st = self->state;
  auto refuse = [&](const std::string& why) {
    log_line("refused node " + ad.node_id + " (" + ad.hostname + "): " + why);
    return wire::refusal(errc::invalid_argument, why);
  };
  if (auto why = refused(who(self, token), {role::admin, role::node}, "join a node"); !why.empty()) return refuse(why);
  if (ad.version != version()) return refuse(version_mismatch(ad.version));
  auto resources = wire::resources_from_ad(ad);
  if (!resources) return refuse("its advertisement is malformed: " + resources.error().message());
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (!sender) return refuse("it sent no actor to talk back to");
  bool first_join = st.registry.find(ad.node_id) == nullptr;
  auto joined = st.registry.join({ad.node_id, ad.hostname, ad.address, ad.version},
                                 std::move(resources).value(), self->clock().now());
  if (!joined) return refuse(joined.message());
  node_gone(self, ad.node_id, false);
  st.node_of[sender.address()] = ad.node_id;
  st.addr_of[ad.node_id] = sender.address();
  self->monitor(sender);
  self->send(st.groups, wire::node_up_atom::value, ad, sender, first_join);
  log_line("node " + ad.node_id + " joined from " + ad.hostname + " (" + ad.address + ")");
  notify(self, ad.node_id, "alive", "joined");
  return {wire::join_atom::value, version()};
}

void take_heartbeat(head_actor self, const std::string& token, const node_id& id, uint64_t version,
                    const wire::wire_avail& free, const std::vector<wire::wire_hold>& holds) {
  auto& st = self->state;
  if (!refused(who(self, token), {role::admin, role::node}, "beat").empty()) return;
  auto it = st.addr_of.find(id);
  auto sender = caf::actor_cast<node_iface>(self->current_sender());
  if (it == st.addr_of.end() || !sender || it->second != sender.address()) {
    // Not a node this head knows alive on this connection: it must join (again).
    if (sender) self->send(sender, wire::rejoin_atom::value);
    return;
  }
  auto report = wire::from_wire(free);
  // What other programs hold on its cards, when it changed: placement must know.
  bool others_changed = false;
  auto heard = report ? st.registry.heartbeat(id, *report, self->clock().now(), &others_changed)
                      : node_registry::heard::bad_report;
  if (heard == node_registry::heard::ok && others_changed)
    self->send(st.groups, wire::others_atom::value, id, free.others);
  if (heard == node_registry::heard::unknown || heard == node_registry::heard::not_alive) {
    self->send(sender, wire::rejoin_atom::value);
    return;
  }
  if (heard == node_registry::heard::bad_report)
    log_line("node " + id + " sent an availability report that does not match its resources");
  self->send(st.groups, wire::holdings_atom::value, id, version, holds);
}

// A node's GPU audit: what really runs on its cards (for status).
void take_audit(head_actor self, const std::string& token, const node_id& id, wire::wire_node_report& report) {
  auto& st = self->state;
  auto it = st.addr_of.find(id);
  if (!refused(who(self, token), {role::admin, role::node}, "report an audit").empty() || it == st.addr_of.end() ||
      it->second != self->current_sender())
    return;
  st.reports[id] = std::move(report);
}

wire::leave_answer leave_node(head_actor self, const std::string& token, const node_id& id) {
  auto& st = self->state;
  if (auto why = refused(who(self, token), {role::admin, role::node}, "leave"); !why.empty())
    return wire::refusal(errc::invalid_argument, why);
  bool left = st.registry.mark_left(id, self->clock().now());
  node_gone(self, id);
  if (left) {
    log_line("node " + id + " left");
    notify(self, id, "left", "stopped");
  }
  return {wire::leave_atom::value, left};
}

// Nodes silent beyond the heartbeat timeout are dead; long-gone ones are forgotten.
void sweep_nodes(head_actor self) {
  auto& st = self->state;
  auto now = self->clock().now();
  for (auto& id : st.registry.sweep(now, st.opt.heartbeat_timeout)) {
    node_gone(self, id);
    auto* e = st.registry.find(id);
    log_line("node " + id + " is dead: " + e->reason);
    notify(self, id, "dead", e->reason);
  }
  st.registry.forget_gone(now, std::chrono::hours(1), 1000);
  self->delayed_send(self, wire::sweep_period, wire::sweep_atom::value);
}

}  // namespace

void node_connection_down(head_actor self, const caf::down_msg& dm) {
  auto& st = self->state;
  auto it = st.node_of.find(dm.source);
  if (it == st.node_of.end()) return;
  node_id id = it->second;
  node_gone(self, id);
  std::string why = dm.reason == caf::exit_reason::remote_link_unreachable
                        ? "connection lost (the node's process ended or its network dropped)"
                        : "its actor ended (" + to_string(dm.reason) + ")";
  if (st.registry.mark_dead(id, why, self->clock().now())) {
    log_line("node " + id + " is dead: " + why);
    notify(self, id, "dead", why);
  }
}

head_nodes_iface::behavior_type node_handlers(head_actor self) {
  return {
      [self](wire::join_atom, const std::string& token, const wire::wire_ad& ad) { return join_node(self, token, ad); },
      [self](wire::heartbeat_atom, const std::string& token, const node_id& id, uint64_t version,
             const wire::wire_avail& free, const std::vector<wire::wire_hold>& holds) {
        take_heartbeat(self, token, id, version, free, holds);
      },
      [self](wire::gpu_audit_atom, const std::string& token, const node_id& id, wire::wire_node_report& report) {
        take_audit(self, token, id, report);
      },
      [self](wire::leave_atom, const std::string& token, const node_id& id) { return leave_node(self, token, id); },
      [self](wire::sweep_atom) { sweep_nodes(self); },
  };
}

}  // namespace head_impl
}  // namespace tune
