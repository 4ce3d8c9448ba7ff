#include "head.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <initializer_list>
#include <set>

#include "groups/groups.hpp"
#include "log.hpp"
#include "tune/core/json_text.hpp"
#include "tune/cluster/board.hpp"
#include "tune/cluster/metrics.hpp"
#include "tune/cluster/registry.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/version.hpp"
#include "tune/core/clock.hpp"

namespace tune {

namespace {

struct head_state {
  head_options opt;
  node_registry registry;
  // The actor of each alive node's current connection, both ways: a down message from
  // an old connection must not kill a node that has already joined again.
  std::map<caf::actor_addr, node_id> node_of;
  std::map<node_id, caf::actor_addr> addr_of;
  std::vector<caf::actor> subscribers;
  caf::actor groups;  // the placement-group actor, linked to this one
  std::map<node_id, nlohmann::json> audits;  // each alive node's latest GPU audit report
  std::map<node_id, nlohmann::json> containment;  // how each alive node contains its trials
  std::map<node_id, nlohmann::json> host_use;     // its trials' host memory and CPU, by trial
  std::set<node_id> draining;                // `tune drain`: no new work there
  experiment_board board;                    // what experiments' controllers report
  std::map<caf::actor_addr, std::set<std::string>> board_owners;  // controller -> its experiments
  caf::actor_clock::time_point started;
  caf::actor_clock::time_point told_checkpoints{};  // when the groups actor last heard since_checkpoint
  static inline const char* name = "tune.head";
};

using head_actor = caf::stateful_actor<head_state>*;

std::string wrong_token() {
  return "the cluster token does not match the head's: use the head's token file "
         "(--token-file, default ~/.tune/token)";
}

// Who a token is (tune/cluster/users.hpp). Every comparison is made, in constant time,
// whichever matches.
principal who(head_actor self, const std::string& token) {
  auto& st = self->state;
  bool admin = token_equal(token, st.opt.token);
  bool node = !st.opt.node_token.empty() && token_equal(token, st.opt.node_token);
  const user_record* user = st.opt.users ? st.opt.users->by_token(token) : nullptr;
  if (admin) return {role::admin, "admin"};
  if (node) return {role::node, "node"};
  if (user) return {role::user, user->name};
  return {};
}

// Why `p` may not do `what` (empty: it may). `need`: the roles that may.
std::string refused(const principal& p, std::initializer_list<role> need, const std::string& what) {
  if (std::find(need.begin(), need.end(), p.kind) != need.end()) return {};
  switch (p.kind) {
    case role::nobody: return wrong_token();
    case role::node:
      return "the node token lets nodes join and nothing else; to " + what +
             ", use a user's token (`tune user add NAME` on the head makes one) or the admin token";
    case role::user:
      // What nodes do (join, heartbeat, report): a user is pointed to the node token.
      if (std::find(need.begin(), need.end(), role::node) != need.end())
        return "a user's token cannot " + what + ": start nodes with the node token (node-token beside the head's token)";
      return "only the cluster's admin (the head's own token) can " + what + "; user " + p.name + " cannot";
    case role::admin: return "the admin token cannot " + what;
  }
  return wrong_token();
}

std::string version_mismatch(const std::string& theirs) {
  return "version mismatch: this process runs libtune " + theirs + ", the head runs libtune " +
         version() + "; run the same version on every machine";
}

void notify(head_actor self, const node_id& id, std::string_view state, const std::string& reason) {
  for (auto& s : self->state.subscribers)
    self->send(s, wire::node_event_atom::value, id, std::string{state}, reason);
}

// Forgets a node's connection; the placement-group actor is told the node is gone
// unless it is joining again over a new connection (then it reconciles what the node
// says it holds instead of moving every bundle away).
void node_gone(head_actor self, const node_id& id, bool tell_groups = true) {
  if (tell_groups) self->send(self->state.groups, wire::node_down_atom::value, id);
  self->state.audits.erase(id);
  self->state.containment.erase(id);
  self->state.host_use.erase(id);
  auto it = self->state.addr_of.find(id);
  if (it == self->state.addr_of.end()) return;
  self->state.node_of.erase(it->second);
  self->state.addr_of.erase(it);
}

// A placement-group request: the token checked here, the rest answered by the
// placement-group actor (delegated, so its answer goes straight to the client).
template <class Atom, class... Ts>
caf::message to_groups(head_actor self, const std::string& token, Atom atom, Ts&&... xs) {
  auto p = who(self, token);
  if (auto why = refused(p, {role::admin, role::user}, "use placement groups"); !why.empty())
    return caf::make_message(atom, false, why);
  self->delegate(self->state.groups, atom, p.name, std::forward<Ts>(xs)...);
  return {};
}

// The cluster's status (nodes with their audits and drain marks, the head, placement
// groups) as JSON, given to `then` once the placement-group actor answered; `failed`
// gets the reason otherwise.
template <class Then, class Failed>
void collect_status(head_actor self, Then then, Failed failed) {
  auto& st = self->state;
  auto now = self->clock().now();
  auto j = nlohmann::json::parse(st.registry.status_json(now));
  for (auto& n : j["nodes"]) {
    if (auto a = st.audits.find(n.value("id", "")); a != st.audits.end()) n["gpu_audit"] = a->second;
    if (auto c = st.containment.find(n.value("id", "")); c != st.containment.end()) n["containment"] = c->second;
    if (auto h = st.host_use.find(n.value("id", "")); h != st.host_use.end()) n["trial_host"] = h->second;
    bool draining = st.draining.count(n.value("id", "")) > 0;
    n["draining"] = draining;
    if (draining && n.value("alive", false)) n["state"] = "draining";
  }
  j["head"] = {{"address", st.opt.address},
               {"version", version()},
               {"uptime_s", std::chrono::duration<double>(now - st.started).count()},
               {"heartbeat_timeout_ms", st.opt.heartbeat_timeout.count()}};
  if (!st.opt.dashboard.empty()) j["head"]["dashboard"] = st.opt.dashboard;
  self->request(st.groups, wire::request_timeout, wire::pg_list_atom::value)
      .then(
          [then, j](wire::pg_list_atom, const std::string& groups) mutable {
            auto g = nlohmann::json::parse(groups);
            j["placement_groups"] = std::move(g["groups"]);
            j["orphaned_bundles"] = std::move(g["orphans"]);
            j["placement_latency"] = std::move(g["placement_latency"]);
            then(std::move(j));
          },
          [failed](caf::error& err) mutable { failed("the placement-group actor did not answer: " + to_string(err)); });
}

// One view of the dashboard's JSON API (docs/dashboard.md): (HTTP status, body).
// A user sees their own experiments and trials whole, other users' holdings without
// their trials (status_for_user, hide_others_holders), and is refused the pages of
// other users' experiments, naming the owner.
std::pair<int, std::string> dashboard_view(head_actor self, const nlohmann::json& status, const std::string& view,
                                           const std::string& a, const std::string& b, const principal& p) {
  auto& board = self->state.board;
  auto not_found = [](const std::string& what) {
    return std::make_pair(404, json_text(nlohmann::json{{"error", what}}));
  };
  const std::string viewer = p.kind == role::user ? p.name : "";
  auto gpus = [&] {
    auto g = gpus_view(status, board);
    if (!viewer.empty()) hide_others_holders(g, viewer);
    return g;
  };
  if (view == "experiment" || view == "trial") {
    auto owner = board.owner(a);
    if (!viewer.empty() && !owner.empty() && owner != viewer)
      return {403, json_text(nlohmann::json{{"error", "experiment " + a + " belongs to " + owner + ": only " + owner +
                                                          " or the cluster's admin can read it"}})};
  }
  if (view == "whoami") return {200, json_text(nlohmann::json{{"name", p.name}, {"admin", p.kind == role::admin}})};
  if (view == "metrics") {
    if (!viewer.empty()) return {403, json_text(nlohmann::json{{"error", "/metrics is the cluster admin's (the head's own token)"}})};
    return {200, prometheus_text(status, board)};
  }
  if (view == "nodes") return {200, json_text(status["nodes"])};
  if (view == "gpus") return {200, json_text(gpus())};
  if (view == "groups") return {200, json_text(status["placement_groups"])};
  if (view == "experiments") return {200, json_text(board.list_json(viewer))};
  if (view == "experiment") {
    auto e = board.experiment_json(a, true);
    return e.is_null() ? not_found("no experiment " + a + " on this head (see /api/experiments)") : std::make_pair(200, json_text(e));
  }
  if (view == "trial") {
    auto t = board.trial_json(a, b);
    return t.is_null() ? not_found("no trial " + b + " in experiment " + a) : std::make_pair(200, json_text(t));
  }
  if (view == "cluster") {
    nlohmann::json j{{"head", status["head"]},
                     {"alive_nodes", status.value("alive_nodes", 0)},
                     {"resources", status.value("resources", nlohmann::json::object())},
                     {"nodes", status["nodes"]},
                     {"gpus", gpus()},
                     {"placement_groups", status["placement_groups"]},
                     {"experiments", board.list_json(viewer)}};
    if (!viewer.empty()) j["viewer"] = viewer;
    return {200, json_text(j)};
  }
  return not_found("no view " + view);
}

// The users' settings to the placement-group actor, which schedules by them.
void tell_groups_users(head_actor self) {
  auto& st = self->state;
  if (!st.opt.users) return;
  auto list = nlohmann::json::array();
  for (const auto& u : st.opt.users->users()) list.push_back(to_json(u, false));
  self->send(st.groups, wire::user_atom::value, json_text(list));
}

// The admin's user management (wire.hpp, user_atom): the answer's JSON, or why not.
expected<nlohmann::json> manage_users(head_actor self, const std::string& op, const std::string& body) {
  auto& users = self->state.opt.users;
  if (!users) return status{errc::invalid_argument, "this head keeps no users (it was started without a users file)"};
  auto j = body.empty() ? nlohmann::json::object() : nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object()) return status{errc::invalid_argument, "a user request must be a JSON object"};
  if (op == "list") {
    auto out = nlohmann::json::array();
    for (const auto& u : users->users()) out.push_back(to_json(u, false));
    return out;
  }
  if (!j.contains("name") || !j["name"].is_string()) return status{errc::invalid_argument, "give the user's name"};
  const std::string name = j["name"];
  if (op == "add" || op == "set") {
    const auto* now = users->find(name);
    auto limits = limits_from_json(j, op == "set" && now ? now->limits : user_limits{});
    if (!limits) return limits.error();
    auto u = op == "add" ? users->add(name, *limits) : users->set(name, *limits);
    if (!u) return u.error();
    log_line(std::string{op == "add" ? "added" : "changed"} + " user " + name + ": " + json_text(to_json(*u, false)));
    return to_json(*u, op == "add");
  }
  if (op == "token") {  // {"name", "new": true}: a new token, the old one ends
    if (!j.value("new", false)) {
      const auto* u = users->find(name);
      if (!u) return status{errc::not_found, "no user " + name + " (tune user list)"};
      return to_json(*u, true);
    }
    auto u = users->new_token(name);
    if (!u) return u.error();
    log_line("user " + name + " has a new token (the old one no longer works)");
    return to_json(*u, true);
  }
  if (op == "remove") {
    if (auto ok = users->remove(name); !ok) return ok;
    log_line("removed user " + name);
    return nlohmann::json{{"name", name}, {"removed", true}};
  }
  return status{errc::invalid_argument, "no user operation \"" + op + "\" (add, set, token, remove, list)"};
}

caf::behavior head(head_actor self, head_options opt) {
  self->state.opt = std::move(opt);
  self->state.started = self->clock().now();
  self->state.groups = spawn_groups(self->home_system(), self->state.opt.groups);
  self->link_to(self->state.groups);
  tell_groups_users(self);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    std::erase_if(st.subscribers, [&](const caf::actor& a) { return a.address() == dm.source; });
    if (auto o = st.board_owners.find(dm.source); o != st.board_owners.end()) {
      for (auto& id : o->second)
        st.board.owner_lost(id, "the tuning program's connection ended before the experiment did (tune resume DIR continues it)",
                            wall_seconds());
      st.board_owners.erase(o);
    }
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
  });
  self->delayed_send(self, wire::sweep_period, wire::sweep_atom::value);
  return {
      [self](wire::join_atom, const std::string& token, const wire::wire_ad& ad) -> caf::message {
        auto& st = self->state;
        auto refuse = [&](const std::string& why) {
          log_line("refused node " + ad.node_id + " (" + ad.hostname + "): " + why);
          return caf::make_message(wire::join_atom::value, false, why);
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
        return caf::make_message(wire::join_atom::value, true, version());
      },
      [self](wire::heartbeat_atom, const std::string& token, const node_id& id, uint64_t version,
             const wire::wire_avail& free, const std::vector<wire::wire_hold>& holds) {
        auto& st = self->state;
        if (!refused(who(self, token), {role::admin, role::node}, "beat").empty()) return;
        auto it = st.addr_of.find(id);
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
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
      },
      // A node's GPU audit: what really runs on its cards (for status).
      [self](wire::gpu_audit_atom, const std::string& token, const node_id& id, const std::string& report) {
        auto& st = self->state;
        auto it = st.addr_of.find(id);
        if (!refused(who(self, token), {role::admin, role::node}, "report an audit").empty() || it == st.addr_of.end() ||
            it->second != self->current_sender())
          return;
        auto j = nlohmann::json::parse(report, nullptr, false);
        if (!j.is_object()) return;
        if (j.contains("cards") && j["cards"].is_array()) st.audits[id] = std::move(j["cards"]);
        if (j.contains("containment") && j["containment"].is_object()) st.containment[id] = std::move(j["containment"]);
        if (j.contains("trials") && j["trials"].is_object()) st.host_use[id] = std::move(j["trials"]);
      },
      [self](wire::leave_atom, const std::string& token, const node_id& id) {
        auto& st = self->state;
        if (!refused(who(self, token), {role::admin, role::node}, "leave").empty())
          return caf::make_message(wire::leave_atom::value, false);
        bool left = st.registry.mark_left(id, self->clock().now());
        node_gone(self, id);
        if (left) {
          log_line("node " + id + " left");
          notify(self, id, "left", "stopped");
        }
        return caf::make_message(wire::leave_atom::value, left);
      },
      [self](wire::status_atom, const std::string& token, const std::string& their_version) -> caf::result<caf::message> {
        auto p = who(self, token);
        if (auto why = refused(p, {role::admin, role::user}, "read the cluster's status"); !why.empty())
          return caf::make_message(wire::status_atom::value, false, why);
        if (their_version != version())
          return caf::make_message(wire::status_atom::value, false, version_mismatch(their_version));
        auto rp = self->make_response_promise<caf::message>();
        collect_status(
            self,
            [self, rp, p](nlohmann::json j) mutable {
              if (p.kind == role::user) j = status_for_user(std::move(j), p.name);
              j["experiments"] = self->state.board.list_json(p.kind == role::user ? p.name : "");
              rp.deliver(caf::make_message(wire::status_atom::value, true, json_text(j)));
            },
            [rp](const std::string& why) mutable { rp.deliver(caf::make_message(wire::status_atom::value, false, why)); });
        return rp;
      },
      [self](wire::pg_create_atom, const std::string& token, const std::string& their_version,
             const wire::wire_group_spec& spec) {
        auto p = who(self, token);
        if (auto why = refused(p, {role::admin, role::user}, "make placement groups"); !why.empty())
          return caf::make_message(wire::pg_create_atom::value, false, std::string{}, std::string{}, why);
        if (their_version != version())
          return caf::make_message(wire::pg_create_atom::value, false, std::string{}, std::string{},
                                   version_mismatch(their_version));
        self->delegate(self->state.groups, wire::pg_create_atom::value, p.name, spec);
        return caf::message{};
      },
      [self](wire::pg_wait_atom, const std::string& token, const std::string& id, int64_t timeout_ms) {
        auto p = who(self, token);
        if (auto why = refused(p, {role::admin, role::user}, "wait for placement groups"); !why.empty())
          return caf::make_message(wire::pg_wait_atom::value, false, std::string{"unknown"}, why);
        self->delegate(self->state.groups, wire::pg_wait_atom::value, p.name, id, timeout_ms);
        return caf::message{};
      },
      [self](wire::trial_start_atom, const std::string& token, const wire::wire_trial_spec& spec,
             const caf::actor& server) {
        return to_groups(self, token, wire::trial_start_atom::value, spec, server);
      },
      [self](wire::stage_atom, const std::string& token, const std::string& group, const std::string& node,
             const std::string& trial, const std::string& manifest, const std::string& program_sha, uint64_t program_size,
             const caf::actor& server) {
        return to_groups(self, token, wire::stage_atom::value, group, node, trial, manifest, program_sha, program_size,
                         server);
      },
      // A client greets its trial through here (wire.hpp, route_atom); passed on as it is.
      [self](wire::route_atom, const std::string& token, const std::string& group, uint32_t bundle,
             const std::string& trial, uint64_t received) {
        auto p = who(self, token);
        if (!p.can_act()) return;
        self->delegate(self->state.groups, wire::route_atom::value, p.name, group, bundle, trial, received);
      },
      // An experiment's report for the board; the sender is watched (its experiments
      // are marked interrupted should it go before saying they ended).
      [self](wire::board_atom, const std::string& token, const std::string& report) {
        auto& st = self->state;
        auto p = who(self, token);
        if (!p.can_act()) return;
        auto j = nlohmann::json::parse(report, nullptr, false);
        if (j.is_object() && j.contains("id") && j["id"].is_string()) {
          // An experiment is its first reporter's: another user's report for it is refused.
          auto owner = st.board.owner(j["id"].get<std::string>());
          if (!owner.empty() && owner != p.name && p.kind != role::admin) {
            log_line("refused a report for experiment " + j["id"].get<std::string>() + " from user " + p.name +
                     ": it belongs to " + owner);
            return;
          }
          if (owner.empty() || p.kind != role::admin) j["owner"] = owner.empty() ? p.name : owner;
        }
        if (auto s = st.board.apply(j, wall_seconds()); !s) {
          log_line(s.message());
          return;
        }
        // Preemption prefers the most recently checkpointed victims: the placement-group
        // actor hears what each running trial would redo, at most once a second.
        if (auto now = self->clock().now(); now - st.told_checkpoints >= std::chrono::seconds(1)) {
          st.told_checkpoints = now;
          nlohmann::json since = st.board.since_checkpoint();
          self->send(st.groups, since_checkpoint_atom::value, json_text(since));
        }
        auto sender = self->current_sender();
        if (!sender) return;
        auto addr = caf::actor_cast<caf::actor_addr>(sender);
        auto [it, fresh] = st.board_owners.try_emplace(addr);
        if (fresh) self->monitor(caf::actor_cast<caf::actor>(sender));
        it->second.insert(j["id"].get<std::string>());
      },
      [self](wire::dashboard_atom, const std::string& token, const std::string& view, const std::string& a,
             const std::string& b) -> caf::result<caf::message> {
        auto p = who(self, token);
        if (auto why = refused(p, {role::admin, role::user}, "read the dashboard"); !why.empty())
          return caf::make_message(wire::dashboard_atom::value, 401, json_text(nlohmann::json{{"error", why}}));
        auto rp = self->make_response_promise<caf::message>();
        // The board's own views need no status; the rest are joined with it.
        if (view == "experiments" || view == "experiment" || view == "trial" || view == "whoami") {
          auto [code, body] = dashboard_view(self, nlohmann::json::object(), view, a, b, p);
          rp.deliver(caf::make_message(wire::dashboard_atom::value, code, std::move(body)));
          return rp;
        }
        collect_status(
            self,
            [self, rp, view, a, b, p](nlohmann::json j) mutable {
              if (p.kind == role::user) j = status_for_user(std::move(j), p.name);
              auto [code, body] = dashboard_view(self, j, view, a, b, p);
              rp.deliver(caf::make_message(wire::dashboard_atom::value, code, std::move(body)));
            },
            [rp](const std::string& why) mutable {
              rp.deliver(caf::make_message(wire::dashboard_atom::value, 503, json_text(nlohmann::json{{"error", why}})));
            });
        return rp;
      },
      [self](wire::rebalance_atom, const std::string& token) {
        if (auto why = refused(who(self, token), {role::admin}, "rebalance the cluster"); !why.empty())
          return caf::make_message(wire::rebalance_atom::value, false, why);
        self->delegate(self->state.groups, wire::rebalance_atom::value);
        return caf::message{};
      },
      [self](wire::drain_atom, const std::string& token, const node_id& node, bool on) {
        auto& st = self->state;
        if (auto why = refused(who(self, token), {role::admin}, "drain a node"); !why.empty())
          return caf::make_message(wire::drain_atom::value, false, why);
        auto* e = st.registry.find(node);
        if (!e) return caf::make_message(wire::drain_atom::value, false, "no node " + node + " (see tune status)");
        on ? (void)st.draining.insert(node) : (void)st.draining.erase(node);
        self->delegate(st.groups, wire::drain_atom::value, node, on);
        return caf::message{};
      },
      [self](wire::pg_remove_atom, const std::string& token, const std::string& id) {
        return to_groups(self, token, wire::pg_remove_atom::value, id);
      },
      [self](wire::pg_get_atom, const std::string& token, const std::string& id) {
        return to_groups(self, token, wire::pg_get_atom::value, id);
      },
      [self](wire::subscribe_atom, const std::string& token) {
        auto& st = self->state;
        if (auto why = refused(who(self, token), {role::admin, role::user}, "follow the cluster's events"); !why.empty())
          return caf::make_message(wire::subscribe_atom::value, false, why);
        auto sender = caf::actor_cast<caf::actor>(self->current_sender());
        if (sender) {
          st.subscribers.push_back(sender);
          self->monitor(sender);
        }
        return caf::make_message(wire::subscribe_atom::value, true, version());
      },
      [self](wire::user_atom, const std::string& token, const std::string& op, const std::string& body) {
        auto answer = [](bool ok, const std::string& text) { return caf::make_message(wire::user_atom::value, ok, text); };
        if (auto why = refused(who(self, token), {role::admin}, "manage users"); !why.empty()) return answer(false, why);
        auto r = manage_users(self, op, body);
        if (!r) return answer(false, r.error().message());
        tell_groups_users(self);
        return answer(true, json_text(*r));
      },
      [self](wire::sweep_atom) {
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
      },
  };
}

}  // namespace

caf::actor spawn_head(caf::actor_system& sys, head_options opt) {
  return sys.spawn(head, std::move(opt));
}

}  // namespace tune
