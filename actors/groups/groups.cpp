// The placement-group actor (groups.hpp): its setup and behavior, its tick, what the
// table's decisions send after every change, the clients' answers and the groups'
// status. Its other concerns are in groups_create.cpp, groups_nodes.cpp,
// groups_trials.cpp and groups_moves.cpp (groups_state.hpp).
#include "groups.hpp"

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "groups_state.hpp"
#include "log.hpp"
#include "typed.hpp"
#include "tune/core/json_text.hpp"

namespace tune {
namespace groups_impl {

namespace {

// Attempt numbers start from the wall clock (microseconds), so that a restarted head
// never reuses a key that an earlier head left on a node.
uint64_t first_attempt() {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch());
  return static_cast<uint64_t>(us.count());
}

std::string random_prefix() {
  std::random_device rd;
  static const char* hex = "0123456789abcdef";
  std::string p;
  for (int i = 0; i < 6; ++i) p += hex[rd() % 16];
  return p;
}

void drop_owner(groups_actor self, const std::string& id) {
  auto& st = self->state;
  auto it = st.owner_of.find(id);
  if (it == st.owner_of.end()) return;
  auto g = st.groups_of.find(it->second.address());
  if (g != st.groups_of.end()) {
    g->second.erase(id);
    if (g->second.empty()) st.groups_of.erase(g);
  }
  st.owner_of.erase(it);
}

// Bundle `b` of group `g`, as status shows it: where it is held and on which cards.
nlohmann::json bundle_json(groups_actor self, const group_table::group& g, uint32_t b) {
  auto& st = self->state;
  nlohmann::json j{{"index", b}, {"request", g.spec.bundles[b].to_string()}};
  auto& site = g.site[b];
  bool placing = std::find(g.placing.begin(), g.placing.end(), b) != g.placing.end();
  if (!site) {
    // Not held: waiting for room, or never again (the group is gone or can never fit).
    j["state"] = g.state == group_state::removed      ? "released"
                 : g.state == group_state::infeasible ? "infeasible"
                                                      : "waiting";
    j["node"] = nullptr;
    return j;
  }
  j["state"] = placing ? "preparing" : "held";
  j["node"] = site->node;
  auto h = st.hostname.find(site->node);
  j["hostname"] = h == st.hostname.end() ? "" : h->second;
  j["host"] = site->alloc.host.to_string();
  nlohmann::json gpus = nlohmann::json::array();
  auto* n = st.view.find(site->node);
  for (auto& grant : site->alloc.gpus) {
    nlohmann::json gj{{"card", grant.card}, {"share", grant.share.to_double()}, {"memory", grant.memory}};
    if (n && grant.card < n->gpus().size()) {
      auto& card = n->gpus()[grant.card];
      gj["index"] = card.index;
      gj["uuid"] = card.uuid;
      gj["pci_bus_id"] = card.pci_bus_id;
      gj["logical"] = card.logical;
    }
    gpus.push_back(std::move(gj));
  }
  j["gpus"] = std::move(gpus);
  return j;
}

// Waiters whose time is up: a wait's answered as not ready, a create's with its group's
// state and reason.
void expire_waiters(groups_actor self, time_point now) {
  auto& st = self->state;
  for (auto it = st.waiters.begin(); it != st.waiters.end();) {
    auto* g = st.table.find(it->first);
    std::string state{g ? to_string(g->state) : "unknown"};
    std::string reason = g ? g->reason : "";
    std::erase_if(it->second, [&](waiter& w) {
      if (w.deadline > now) return false;
      deliver(w, it->first, false, state, w.create ? reason : "not ready in time" + (reason.empty() ? "" : ": " + reason));
      return true;
    });
    it = it->second.empty() ? st.waiters.erase(it) : std::next(it);
  }
}

void tick(groups_actor self) {
  auto& st = self->state;
  auto now = self->clock().now();
  send_all(self, st.table.expire(st.view, now, st.opt.attempt_timeout));
  expire_waiters(self, now);
  answer_claim_waits(self);
  release_unclaimed(self, now);
  if (now - st.last_forget > std::chrono::seconds(1)) {
    st.table.forget_ended(now, st.opt.keep_ended, st.opt.max_ended);
    std::erase_if(st.user_of, [&](const auto& u) { return !st.table.find(u.first); });
    st.last_forget = now;
  }
  flush(self);
  self->delayed_send(self, st.opt.tick, wire::pg_tick_atom::value);
}

// The users' quotas, priorities and weights, from the head (at its start and after
// every change).
void set_users(groups_actor self, const std::vector<wire::wire_user>& users) {
  std::map<std::string, user_limits> limits;
  for (auto& u : users) limits[u.name] = wire::limits_from_wire(u);
  self->state.table.set_users(std::move(limits));
  flush(self);
}

void set_since_checkpoint(groups_actor self, const std::vector<wire::wire_count>& since) {
  auto& to = self->state.since_checkpoint;
  to.clear();
  for (auto& [group, n] : since) to[group] = n;
}

caf::result<wire::pg_list_atom, std::string> list_groups(groups_actor self) {
  auto& st = self->state;
  auto now = self->clock().now();
  nlohmann::json groups = nlohmann::json::array(), orphans = nlohmann::json::array();
  for (auto& [id, g] : st.table.groups()) groups.push_back(group_json(self, g, now));
  for (auto& [key, o] : st.orphans)
    orphans.push_back({{"key", key.group},
                       {"bundle", key.bundle},
                       {"node", o.node},
                       {"request", o.request.to_string()},
                       {"age_s", std::chrono::duration<double>(now - o.since).count()}});
  nlohmann::json j{{"groups", std::move(groups)},
                   {"orphans", std::move(orphans)},
                   {"placement_latency", st.table.placement_latency().to_json()}};
  return {wire::pg_list_atom::value, json_text(j)};
}

// What the head tells it of users and trials, its status, its tick.
groups_status_iface::behavior_type status_handlers(groups_actor self) {
  return {
      [self](wire::user_atom, const std::vector<wire::wire_user>& users) { set_users(self, users); },
      [self](since_checkpoint_atom, const std::vector<wire::wire_count>& since) { set_since_checkpoint(self, since); },
      [self](wire::pg_list_atom) { return list_groups(self); },
      [self](wire::pg_tick_atom) { tick(self); },
  };
}

// An owner went away: its groups (not the detached ones) are removed.
void owner_gone(groups_actor self, caf::down_msg& dm) {
  auto& st = self->state;
  auto it = st.groups_of.find(dm.source);
  if (it == st.groups_of.end()) return;
  auto ids = it->second;
  log_line("the owner of " + std::to_string(ids.size()) + " placement group(s) went away (" + to_string(dm.reason) +
           "): removing them");
  for (auto& id : ids) remove_group(self, id);
  st.groups_of.erase(dm.source);
  flush(self);
}

groups_iface::behavior_type groups(groups_actor self, groups_options opt) {
  auto& st = self->state;
  st.opt = opt;
  st.table = group_table{first_attempt()};
  st.id_prefix = random_prefix();
  self->set_down_handler([self](caf::down_msg& dm) { owner_gone(self, dm); });
  self->delayed_send(self, st.opt.tick, wire::pg_tick_atom::value);
  return typed_union<groups_iface>(node_handlers(self), create_handlers(self), trial_handlers(self),
                                   move_handlers(self), status_handlers(self));
}

}  // namespace

void deliver(waiter& w, const std::string& id, bool ready, const std::string& state, const std::string& reason) {
  if (w.create) w.rp.deliver(wire::pg_create_atom::value, id, state, reason);
  else w.rp.deliver(wire::pg_wait_atom::value, ready, state, reason);
}

void send_all(groups_actor self, std::vector<group_message> msgs) {
  auto& st = self->state;
  for (auto& m : msgs) {
    auto it = st.nodes.find(m.node);
    if (it == st.nodes.end()) continue;  // a lost node: nobody to tell
    switch (m.what) {
      // Plain messages both ways: attempts are timed out by the tick (expire), and a
      // lost commit is found by the node's next heartbeat (reconcile).
      case group_message::kind::prepare:
        self->send(it->second, wire::prepare_atom::value, m.key.group, m.key.bundle, wire::to_wire_request(m.request),
                   wire::to_wire(m.preferred));
        break;
      case group_message::kind::commit:
        self->send(it->second, wire::commit_atom::value, m.key.group, m.key.bundle);
        break;
      case group_message::kind::abort:
        self->send(it->second, wire::abort_atom::value, m.key.group, m.key.bundle);
        break;
    }
  }
}

void answer_waiters(groups_actor self) {
  auto& st = self->state;
  for (auto it = st.waiters.begin(); it != st.waiters.end();) {
    auto* g = st.table.find(it->first);
    bool ready = g && g->state == group_state::created;
    bool failed = !g || g->state == group_state::infeasible || g->state == group_state::removed;
    // A create's answer also says when the group has to wait (a prepare refused): why.
    bool waits = g && g->state == group_state::pending && !g->reason.empty();
    if (!ready && !failed && !waits) {
      ++it;
      continue;
    }
    std::string state{g ? to_string(g->state) : "unknown"};
    std::string reason = g ? g->reason : "the placement group was forgotten";
    auto& list = it->second;
    std::erase_if(list, [&](waiter& w) {
      if (!ready && !failed && !w.create) return false;
      deliver(w, it->first, ready, state, reason);
      return true;
    });
    it = list.empty() ? st.waiters.erase(it) : std::next(it);
  }
}

void flush(groups_actor self) {
  auto& st = self->state;
  send_all(self, st.table.schedule(st.view, self->clock().now()));
  preempt(self);
  for (auto& moved : st.table.take_moved()) {
    std::string list;
    for (auto b : moved.bundles) list += (list.empty() ? "" : ", ") + std::to_string(b);
    log_line("placement group " + moved.group + ": bundles " + list + " were placed again after a node loss");
    auto it = st.owner_of.find(moved.group);
    if (it != st.owner_of.end()) self->send(it->second, wire::pg_moved_atom::value, moved.group, moved.bundles);
  }
  answer_waiters(self);
}

void remove_group(groups_actor self, const std::string& id) {
  auto& st = self->state;
  send_all(self, st.table.remove(id, st.view, self->clock().now()));
  drop_owner(self, id);
}

std::string not_theirs(groups_actor self, const std::string& user, const std::string& id, const char* what) {
  auto it = self->state.user_of.find(id);
  if (user == "admin" || it == self->state.user_of.end() || it->second == user) return {};
  return "placement group " + id + " belongs to " + it->second + ": only " + it->second +
         " or the cluster's admin can " + what + " it";
}

nlohmann::json group_json(groups_actor self, const group_table::group& g, time_point now) {
  auto& st = self->state;
  auto secs = [&](time_point t) { return std::chrono::duration<double>(now - t).count(); };
  nlohmann::json bundles = nlohmann::json::array();
  for (uint32_t b = 0; b < g.spec.bundles.size(); ++b) bundles.push_back(bundle_json(self, g, b));
  return {{"id", g.spec.id},
          {"state", to_string(g.state)},
          {"strategy", to_string(g.spec.strat)},
          {"reason", g.reason},
          {"detached", st.detached.count(g.spec.id) > 0},
          {"owner", st.user_of.count(g.spec.id) ? st.user_of.at(g.spec.id) : std::string{}},
          {"experiment", g.spec.experiment},
          {"age_s", secs(g.created)},
          {"in_state_s", secs(g.since)},
          {"bundles", std::move(bundles)}};
}

}  // namespace groups_impl

groups_iface spawn_groups(caf::actor_system& sys, groups_options opt) { return sys.spawn(groups_impl::groups, opt); }

}  // namespace tune
