// What the head tells: the cluster's status (`tune status`), the dashboard's views, the
// experiments' board its controllers report to, and the subscribers to node events.
#include <algorithm>
#include <chrono>

#include "head_state.hpp"
#include "log.hpp"
#include "tune/cluster/metrics.hpp"
#include "tune/cluster/version.hpp"
#include "tune/core/clock.hpp"
#include "tune/core/json_text.hpp"

namespace tune {
namespace head_impl {

namespace {

// The cluster's status (nodes with their audits and drain marks, the head, placement
// groups) as JSON, given to `then` once the placement-group actor answered; `failed`
// gets the reason otherwise.
template <class Then, class Failed>
void collect_status(head_actor self, Then then, Failed failed) {
  auto& st = self->state;
  auto now = self->clock().now();
  auto j = nlohmann::json::parse(st.registry.status_json(now));
  for (auto& n : j["nodes"]) {
    if (auto r = st.reports.find(n.value("id", "")); r != st.reports.end()) {
      if (r->second.audited) n["gpu_audit"] = wire::cards_json(r->second.cards);
      if (r->second.contained) n["containment"] = wire::containment_json(r->second);
      n["trial_host"] = wire::trial_host_json(r->second.trials);
    }
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

// `tune status`: the cluster's status, a user's view of it for a user.
caf::result<wire::status_atom, std::string> answer_status(head_actor self, const std::string& token,
                                                         const std::string& their_version) {
  auto p = who(self, token);
  if (auto why = refused(p, {role::admin, role::user}, "read the cluster's status"); !why.empty())
    return wire::refusal(errc::invalid_argument, why);
  if (their_version != version()) return wire::refusal(errc::invalid_argument, version_mismatch(their_version));
  auto rp = self->make_response_promise<wire::status_atom, std::string>();
  collect_status(
      self,
      [self, rp, p](nlohmann::json j) mutable {
        if (p.kind == role::user) j = status_for_user(std::move(j), p.name);
        j["experiments"] = self->state.board.list_json(p.kind == role::user ? p.name : "");
        rp.deliver(wire::status_atom::value, json_text(j));
      },
      [rp](const std::string& why) mutable { rp.deliver(wire::refusal(errc::invalid_argument, why)); });
  return rp;
}

// A view for the dashboard's HTTP side (dashboard_view): (HTTP status, body).
caf::result<wire::dashboard_atom, int, std::string> answer_dashboard(head_actor self, const std::string& token,
                                                                    const std::string& view, const std::string& a,
                                                                    const std::string& b) {
  auto p = who(self, token);
  if (auto why = refused(p, {role::admin, role::user}, "read the dashboard"); !why.empty())
    return {wire::dashboard_atom::value, 401, json_text(nlohmann::json{{"error", why}})};
  // The board's own views need no status; the rest are joined with it.
  if (view == "experiments" || view == "experiment" || view == "trial" || view == "whoami") {
    auto [code, body] = dashboard_view(self, nlohmann::json::object(), view, a, b, p);
    return {wire::dashboard_atom::value, code, std::move(body)};
  }
  auto rp = self->make_response_promise<wire::dashboard_atom, int, std::string>();
  collect_status(
      self,
      [self, rp, view, a, b, p](nlohmann::json j) mutable {
        if (p.kind == role::user) j = status_for_user(std::move(j), p.name);
        auto [code, body] = dashboard_view(self, j, view, a, b, p);
        rp.deliver(wire::dashboard_atom::value, code, std::move(body));
      },
      [rp](const std::string& why) mutable {
        rp.deliver(wire::dashboard_atom::value, 503, json_text(nlohmann::json{{"error", why}}));
      });
  return rp;
}

// An experiment's report for the board; the sender is watched (its experiments are
// marked interrupted should it go before saying they ended).
void take_board_report(head_actor self, const std::string& token, const std::string& report) {
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
    std::vector<wire::wire_count> since;
    for (auto& [group, n] : st.board.since_checkpoint()) since.push_back({group, n});
    self->send(st.groups, since_checkpoint_atom::value, std::move(since));
  }
  auto sender = self->current_sender();
  if (!sender) return;
  auto addr = caf::actor_cast<caf::actor_addr>(sender);
  auto [it, fresh] = st.board_owners.try_emplace(addr);
  if (fresh) self->monitor(caf::actor_cast<caf::actor>(sender));
  it->second.insert(j["id"].get<std::string>());
}

caf::result<wire::subscribe_atom, std::string> add_subscriber(head_actor self, const std::string& token) {
  auto& st = self->state;
  if (auto why = refused(who(self, token), {role::admin, role::user}, "follow the cluster's events"); !why.empty())
    return wire::refusal(errc::invalid_argument, why);
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (sender) {
    st.subscribers.push_back(caf::actor_cast<subscriber_iface>(sender));
    self->monitor(sender);
  }
  return {wire::subscribe_atom::value, version()};
}

}  // namespace

void follower_down(head_actor self, const caf::down_msg& dm) {
  auto& st = self->state;
  std::erase_if(st.subscribers, [&](const subscriber_iface& a) { return a.address() == dm.source; });
  if (auto o = st.board_owners.find(dm.source); o != st.board_owners.end()) {
    for (auto& id : o->second)
      st.board.owner_lost(id, "the tuning program's connection ended before the experiment did (tune resume DIR continues it)",
                          wall_seconds());
    st.board_owners.erase(o);
  }
}

head_status_iface::behavior_type status_handlers(head_actor self) {
  return {
      [self](wire::status_atom, const std::string& token, const std::string& their_version) {
        return answer_status(self, token, their_version);
      },
      [self](wire::board_atom, const std::string& token, const std::string& report) {
        take_board_report(self, token, report);
      },
      [self](wire::dashboard_atom, const std::string& token, const std::string& view, const std::string& a,
             const std::string& b) { return answer_dashboard(self, token, view, a, b); },
      [self](wire::subscribe_atom, const std::string& token) { return add_subscriber(self, token); },
  };
}

}  // namespace head_impl
}  // namespace tune
