// The head actor: who a token is, the placement-group requests it passes on, users,
// and the behavior that joins its parts. Its nodes are in head_nodes.cpp, what it tells
// (status, the dashboard, the board) in head_status.cpp (head_state.hpp).
#include "head.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <initializer_list>

#include "groups/groups.hpp"
#include "head_state.hpp"
#include "log.hpp"
#include "typed.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/version.hpp"
#include "tune/core/json_text.hpp"

namespace tune {
namespace head_impl {

namespace {

std::string wrong_token() {
  return "the cluster token does not match the head's: use the head's token file "
         "(--token-file, default ~/.tune/token)";
}

}  // namespace

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

namespace {

// A placement-group request: the token checked here, the rest answered by the
// placement-group actor (delegated, so its answer goes straight to the client).
// The result type of a delegation's answer (caf::delegated<Ts...> -> caf::result<Ts...>).
template <class Delegated>
struct answer_of;
template <class... Ts>
struct answer_of<caf::delegated<Ts...>> {
  using type = caf::result<Ts...>;
};

template <class Atom, class... Ts>
auto to_groups(head_actor self, const std::string& token, Atom atom, const Ts&... xs) {
  using answer = typename answer_of<decltype(self->delegate(self->state.groups, atom, token, xs...))>::type;
  auto p = who(self, token);
  if (auto why = refused(p, {role::admin, role::user}, "use placement groups"); !why.empty())
    return answer{wire::refusal(errc::invalid_argument, why)};
  return answer{self->delegate(self->state.groups, atom, p.name, xs...)};
}

caf::result<wire::pg_create_atom, std::string, std::string, std::string>
pass_group_create(head_actor self, const std::string& token, const std::string& their_version,
                  const wire::wire_group_spec& spec) {
  auto p = who(self, token);
  if (auto why = refused(p, {role::admin, role::user}, "make placement groups"); !why.empty())
    return wire::refusal(errc::invalid_argument, why);
  if (their_version != version()) return wire::refusal(errc::invalid_argument, version_mismatch(their_version));
  return self->delegate(self->state.groups, wire::pg_create_atom::value, p.name, spec);
}

caf::result<wire::pg_wait_atom, bool, std::string, std::string> pass_group_wait(head_actor self,
                                                                                const std::string& token,
                                                                                const std::string& id,
                                                                                int64_t timeout_ms) {
  auto p = who(self, token);
  if (auto why = refused(p, {role::admin, role::user}, "wait for placement groups"); !why.empty())
    return wire::refusal(errc::not_found, why);
  return self->delegate(self->state.groups, wire::pg_wait_atom::value, p.name, id, timeout_ms);
}

// A client greets its trial through here (wire.hpp, route_atom); passed on as it is.
void route_to_trial(head_actor self, const std::string& token, const std::string& group, uint32_t bundle,
                    const std::string& trial, uint64_t received) {
  auto p = who(self, token);
  if (!p.can_act()) return;
  self->delegate(self->state.groups, wire::route_atom::value, p.name, group, bundle, trial, received);
}

caf::result<wire::rebalance_atom, std::string> rebalance_cluster(head_actor self, const std::string& token) {
  if (auto why = refused(who(self, token), {role::admin}, "rebalance the cluster"); !why.empty())
    return wire::refusal(errc::invalid_argument, why);
  return self->delegate(self->state.groups, wire::rebalance_atom::value);
}

caf::result<wire::drain_atom, std::string> drain_node(head_actor self, const std::string& token, const node_id& node,
                                                      bool on) {
  auto& st = self->state;
  if (auto why = refused(who(self, token), {role::admin}, "drain a node"); !why.empty())
    return wire::refusal(errc::invalid_argument, why);
  auto* e = st.registry.find(node);
  if (!e) return wire::refusal(errc::invalid_argument, "no node " + node + " (see tune status)");
  on ? (void)st.draining.insert(node) : (void)st.draining.erase(node);
  return self->delegate(st.groups, wire::drain_atom::value, node, on);
}

}  // namespace

head_groups_iface::behavior_type group_handlers(head_actor self) {
  return {
      [self](wire::pg_create_atom, const std::string& token, const std::string& their_version,
             const wire::wire_group_spec& spec) { return pass_group_create(self, token, their_version, spec); },
      [self](wire::pg_wait_atom, const std::string& token, const std::string& id, int64_t timeout_ms) {
        return pass_group_wait(self, token, id, timeout_ms);
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
      [self](wire::route_atom, const std::string& token, const std::string& group, uint32_t bundle,
             const std::string& trial, uint64_t received) { route_to_trial(self, token, group, bundle, trial, received); },
      [self](wire::rebalance_atom, const std::string& token) { return rebalance_cluster(self, token); },
      [self](wire::drain_atom, const std::string& token, const node_id& node, bool on) {
        return drain_node(self, token, node, on);
      },
      [self](wire::pg_remove_atom, const std::string& token, const std::string& id) {
        return to_groups(self, token, wire::pg_remove_atom::value, id);
      },
      [self](wire::pg_get_atom, const std::string& token, const std::string& id) {
        return to_groups(self, token, wire::pg_get_atom::value, id);
      },
  };
}

namespace {

// The users' settings to the placement-group actor, which schedules by them.
void tell_groups_users(head_actor self) {
  auto& st = self->state;
  if (!st.opt.users) return;
  std::vector<wire::wire_user> list;
  for (const auto& u : st.opt.users->users()) list.push_back(wire::to_wire(u.name, u.limits));
  self->send(st.groups, wire::user_atom::value, std::move(list));
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

}  // namespace

head_users_iface::behavior_type user_handlers(head_actor self) {
  return {
      [self](wire::user_atom, const std::string& token, const std::string& op,
             const std::string& body) -> caf::result<wire::user_atom, std::string> {
        if (auto why = refused(who(self, token), {role::admin}, "manage users"); !why.empty())
          return wire::refusal(errc::invalid_argument, why);
        auto r = manage_users(self, op, body);
        if (!r) return wire::refusal(errc::invalid_argument, r.error().message());
        tell_groups_users(self);
        return {wire::user_atom::value, json_text(*r)};
      },
  };
}

namespace {

head_iface::behavior_type head(head_actor self, head_options opt) {
  self->state.opt = std::move(opt);
  self->state.started = self->clock().now();
  self->state.groups = spawn_groups(self->home_system(), self->state.opt.groups);
  self->link_to(self->state.groups);
  tell_groups_users(self);
  self->set_down_handler([self](caf::down_msg& dm) {
    follower_down(self, dm);
    node_connection_down(self, dm);
  });
  self->delayed_send(self, wire::sweep_period, wire::sweep_atom::value);
  return typed_union<head_iface>(node_handlers(self), status_handlers(self), group_handlers(self), user_handlers(self));
}

}  // namespace
}  // namespace head_impl

caf::actor spawn_head(caf::actor_system& sys, head_options opt) {
  return caf::actor_cast<caf::actor>(sys.spawn(head_impl::head, std::move(opt)));
}

}  // namespace tune
