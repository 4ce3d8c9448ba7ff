#include "board.hpp"

#include <algorithm>
#include <cmath>

#include "tune/core/json_text.hpp"
#include "tune/core/pareto.hpp"

namespace tune {

void bounded_series::add(int64_t iteration, double value) {
  // An iteration again (a trial restarted from an earlier checkpoint reports it anew, a
  // PBT trial continues from its donor's): the curve follows the run that goes on.
  while (!points_.empty() && points_.back().first >= iteration) points_.pop_back();
  points_.emplace_back(iteration, value);
  if (points_.size() <= max_) return;
  // Every other point of the older part goes; the newest stays.
  std::vector<std::pair<int64_t, double>> kept;
  kept.reserve(max_ / 2 + 2);
  for (size_t i = 0; i + 1 < points_.size(); i += 2) kept.push_back(points_[i]);
  kept.push_back(points_.back());
  points_ = std::move(kept);
}

nlohmann::json bounded_series::to_json() const {
  auto out = nlohmann::json::array();
  for (auto& [it, v] : points_) out.push_back({it, v});
  return out;
}

namespace {

status bad_report(const std::string& what) {
  return {errc::invalid_argument, "experiment report: " + what};
}

bool is_better(double a, double b, bool maximize) { return maximize ? a > b : a < b; }

// The keys of a trial a report may set, and what each must be.
bool valid_trial_field(const std::string& key, const nlohmann::json& v) {
  if (key == "id" || key == "state" || key == "error" || key == "node" || key == "group" || key == "trial_dir" ||
      key == "restored_from" || key == "last_failure")
    return v.is_string();
  if (key == "iteration" || key == "pid" || key == "starts" || key == "failures" || key == "checkpoint")
    return v.is_number_integer();
  if (key == "value") return v.is_number() || v.is_null();
  if (key == "others")  // the other objectives' and the constraints' latest values
    return v.is_array() && v.size() <= 64 &&
           std::all_of(v.begin(), v.end(), [](const nlohmann::json& x) { return x.is_number() || x.is_null(); });
  if (key == "config") return v.is_object();
  if (key == "gpus") return v.is_array();
  if (key == "run_s" || key == "host_memory_peak" || key == "cpu_seconds" || key == "gpu_memory_peak" ||
      key == "left_behind_count")
    return v.is_number();
  if (key == "containment" || key == "tensorboard_dir") return v.is_string();
  if (key == "mlflow_run" || key == "wandb_run")  // a tracker's run: {"id", "url"}, texts
    return v.is_object() && v.size() == 2 && v.contains("id") && v["id"].is_string() && v.contains("url") &&
           v["url"].is_string() && v["id"].get_ref<const std::string&>().size() <= 256 &&
           v["url"].get_ref<const std::string&>().size() <= 4096;
  return false;  // unknown keys are left out
}

// The objectives ([{name, mode}], the metric first) and constraints ([name]) of an
// experiment with several objectives or constraints.
status check_objectives(const nlohmann::json& r) {
  if (r.contains("objectives")) {
    const auto& o = r["objectives"];
    if (!o.is_array() || o.empty() || o.size() > 16)
      return bad_report("\"objectives\" must be a list of 1 to 16 {name, mode} objects");
    for (const auto& x : o) {
      const bool named = x.is_object() && x.contains("name") && x["name"].is_string() && !x["name"].get<std::string>().empty();
      const auto m = x.is_object() && x.contains("mode") && x["mode"].is_string() ? x["mode"].get<std::string>() : "";
      if (!named || (m != "max" && m != "min"))
        return bad_report("an objective is not {\"name\": NAME, \"mode\": \"max\" or \"min\"}: " + json_text(x));
    }
  }
  if (r.contains("constraints")) {
    const auto& c = r["constraints"];
    if (!c.is_array() || c.size() > 16 ||
        !std::all_of(c.begin(), c.end(), [](const nlohmann::json& x) { return x.is_string() && !x.get<std::string>().empty(); }))
      return bad_report("\"constraints\" must be a list of at most 16 metric names");
  }
  return status::ok();
}

bool finite(const nlohmann::json& v) { return v.is_number() && std::isfinite(v.get<double>()); }

// How many objectives an experiment has (the metric is one when none are listed).
std::size_t objective_count(const nlohmann::json& info) {
  auto it = info.find("objectives");
  return it == info.end() || it->empty() ? 1 : it->size();
}

// A trial's latest constraint values ("others" holds the other objectives, then the
// constraints; null: not reported yet) and whether it meets them all (one not reported
// yet is not met).
struct constraint_state {
  nlohmann::json values = nlohmann::json::array();
  bool met = true;
};
constraint_state constraints_of(const nlohmann::json& trial_info, std::size_t objectives, std::size_t constraints) {
  constraint_state out;
  const auto others = trial_info.value("others", nlohmann::json::array());
  for (std::size_t c = 0; c < constraints; ++c) {
    const std::size_t at = objectives - 1 + c;
    const bool known = at < others.size() && finite(others[at]);
    out.values.push_back(known ? others[at] : nlohmann::json());
    out.met = out.met && known && others[at].get<double>() <= 0;
  }
  return out;
}

}  // namespace

status experiment_board::apply(const nlohmann::json& r, double now) {
  if (!r.is_object()) return bad_report("not a JSON object");
  if (!r.contains("id") || !r["id"].is_string() || r["id"].get<std::string>().empty())
    return bad_report("no experiment id");
  std::string id = r["id"];
  if (id.size() > 200) return bad_report("the experiment id is longer than 200 characters");
  bool full = r.value("full", false);
  for (auto key : {"trials", "points", "last"})
    if (r.contains(key) && !(key == std::string{"trials"} ? r[key].is_array() : r[key].is_object()))
      return bad_report(std::string{"\""} + key + "\" has the wrong type");
  auto found = experiments_.find(id);
  if (found == experiments_.end() && !full)
    return bad_report("experiment " + id + " is not on the board; its first report must be full");
  // Checked before anything changes: every trial entry.
  if (r.contains("trials"))
    for (auto& t : r["trials"])
      if (!t.is_object() || !t.contains("id") || !t["id"].is_string()) return bad_report("a trial without an id");
  if (auto ok = check_objectives(r); !ok) return ok;

  experiment fresh;
  if (full) {
    fresh.first_seen = found == experiments_.end() ? now : found->second.first_seen;
    fresh.order = found == experiments_.end() ? next_order_++ : found->second.order;
    fresh.results = found == experiments_.end() ? 0 : found->second.results;
  }
  experiment& e = full ? fresh : found->second;
  for (auto key : {"name", "metric", "mode", "dir", "host", "scheduler", "search", "started", "owner"})
    if (r.contains(key) && (r[key].is_string() || r[key].is_number())) e.info[key] = r[key];
  if (r.contains("pid") && r["pid"].is_number_integer()) e.info["pid"] = r["pid"];
  for (auto key : {"objectives", "constraints"})
    if (r.contains(key)) e.info[key] = r[key];
  // Auto-packing's state (a small object of numbers and words): kept as it came.
  if (r.contains("auto_packing") && r["auto_packing"].is_object() && r["auto_packing"].size() <= 16)
    e.info["auto_packing"] = r["auto_packing"];
  if (r.contains("elapsed_s") && r["elapsed_s"].is_number()) e.info["elapsed_s"] = r["elapsed_s"];
  if (r.contains("state") && r["state"].is_string()) e.state = r["state"];
  if (r.contains("error") && r["error"].is_string()) e.error = r["error"];
  e.last_seen = now;
  if ((e.state == "done" || e.state == "failed") && e.ended_at == 0) e.ended_at = now;
  if (r.contains("results") && r["results"].is_number_integer()) {
    int64_t n = r["results"];
    if (n > e.results) results_total_ += n - e.results;
    e.results = std::max(e.results, n);
  }
  if (r.contains("trials"))
    for (auto& t : r["trials"]) {
      std::string tid = t["id"];
      auto it = e.trials.find(tid);
      if (it == e.trials.end()) {
        if (e.trials.size() >= limits_.max_trials) continue;
        it = e.trials.emplace(tid, trial{nlohmann::json::object(), nullptr, bounded_series{limits_.max_points}}).first;
      }
      for (auto& [key, v] : t.items())
        if (valid_trial_field(key, v)) it->second.info[key] = v;
    }
  if (r.contains("points"))
    for (auto& [tid, pts] : r["points"].items()) {
      auto it = e.trials.find(tid);
      if (it == e.trials.end() || !pts.is_array()) continue;
      for (auto& p : pts)
        if (p.is_array() && p.size() == 2 && p[0].is_number_integer() && p[1].is_number() &&
            std::isfinite(p[1].get<double>()))
          it->second.curve.add(p[0].get<int64_t>(), p[1].get<double>());
    }
  if (r.contains("last"))
    for (auto& [tid, m] : r["last"].items())
      if (auto it = e.trials.find(tid); it != e.trials.end() && m.is_object()) it->second.last = m;
  if (full) experiments_[id] = std::move(fresh);
  evict();
  return status::ok();
}

void experiment_board::owner_lost(const std::string& id, const std::string& why, double now) {
  auto it = experiments_.find(id);
  if (it == experiments_.end() || it->second.state != "running") return;
  it->second.state = "interrupted";
  it->second.error = why;
  it->second.ended_at = now;
  evict();
}

void experiment_board::evict() {
  std::vector<std::pair<double, std::string>> ended;
  for (auto& [id, e] : experiments_)
    if (e.state != "running") ended.emplace_back(e.ended_at, id);
  if (ended.size() <= limits_.max_ended) return;
  std::sort(ended.begin(), ended.end());
  for (size_t i = 0; i + limits_.max_ended < ended.size(); ++i) experiments_.erase(ended[i].second);
}

nlohmann::json experiment_board::summary(const std::string& id, const experiment& e) {
  nlohmann::json j = e.info;
  j["id"] = id;
  j["state"] = e.state;
  j["error"] = e.error;
  j["results"] = e.results;
  j["trials"] = e.trials.size();
  std::map<std::string, int64_t> by_state;
  bool maximize = e.info.value("mode", "max") == "max";
  const std::size_t constraints = e.info.value("constraints", nlohmann::json::array()).size();
  const std::size_t objectives = objective_count(e.info);
  nlohmann::json best = nullptr;
  for (auto& [tid, t] : e.trials) {
    ++by_state[t.info.value("state", "pending")];
    if (constraints) {
      // With constraints, a trial's latest value counts only while it meets them (the
      // board has their latest values only): an infeasible trial is never the best.
      const auto v = t.info.value("value", nlohmann::json());
      if (finite(v) && constraints_of(t.info, objectives, constraints).met &&
          (best.is_null() || is_better(v.get<double>(), best["value"].get<double>(), maximize)))
        best = {{"trial", tid}, {"value", v}, {"iteration", t.info.value("iteration", int64_t{0})}};
      continue;
    }
    // The best value any of its results reached (what the progress table shows is the
    // latest; the best over a curve is what people look for first).
    for (auto& [it, v] : t.curve.points())
      if (best.is_null() || is_better(v, best["value"].get<double>(), maximize))
        best = {{"trial", tid}, {"value", v}, {"iteration", it}};
  }
  j["trials_by_state"] = by_state;
  j["best"] = best;
  return j;
}

nlohmann::json experiment_board::list_json(const std::string& viewer) const {
  std::vector<std::pair<uint64_t, std::string>> order;
  for (auto& [id, e] : experiments_) order.emplace_back(e.order, id);
  std::sort(order.rbegin(), order.rend());
  auto out = nlohmann::json::array();
  for (auto& [o, id] : order) {
    const auto& e = experiments_.at(id);
    auto owner = e.info.value("owner", "");
    if (viewer.empty() || owner.empty() || owner == viewer) {
      out.push_back(summary(id, e));
      continue;
    }
    // Another user's: who holds what, no names, configs or metrics.
    auto full = summary(id, e);
    out.push_back({{"id", id},
                   {"owner", owner},
                   {"state", full["state"]},
                   {"trials", full["trials"]},
                   {"trials_by_state", full["trials_by_state"]},
                   {"held_by", owner + " (" + std::to_string(full["trials_by_state"].value("running", int64_t{0})) +
                                   " trials running)"}});
  }
  return out;
}

std::string experiment_board::owner(const std::string& id) const {
  auto it = experiments_.find(id);
  return it == experiments_.end() ? std::string{} : it->second.info.value("owner", "");
}

nlohmann::json experiment_board::experiment_json(const std::string& id, bool curves) const {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) return nullptr;
  auto j = summary(id, it->second);
  auto rows = nlohmann::json::array();
  for (auto& [tid, t] : it->second.trials) {
    nlohmann::json row = t.info;
    row["id"] = tid;
    row["points"] = t.curve.size();
    if (curves) row["curve"] = t.curve.to_json();
    rows.push_back(std::move(row));
  }
  j["trial_table"] = std::move(rows);
  if (auto front = pareto_view(it->second); !front.is_null()) j["pareto"] = std::move(front);
  return j;
}

nlohmann::json experiment_board::pareto_view(const experiment& e) {
  const auto objectives = e.info.value("objectives", nlohmann::json::array());
  const auto constraints = e.info.value("constraints", nlohmann::json::array());
  if (objectives.size() < 2 && constraints.empty()) return nullptr;
  const std::size_t n = objective_count(e.info);
  auto trials = nlohmann::json::array();
  std::vector<point> losses;           // of the feasible trials
  std::vector<std::size_t> feasible;   // their rows in `trials`
  for (const auto& [tid, t] : e.trials) {
    const auto value = t.info.value("value", nlohmann::json());
    const auto others = t.info.value("others", nlohmann::json::array());
    if (!finite(value) || others.size() < n - 1) continue;
    nlohmann::json values = nlohmann::json::array({value});
    for (std::size_t i = 0; i + 1 < n; ++i) values.push_back(others[i]);
    if (!std::all_of(values.begin(), values.end(), finite)) continue;  // not every objective yet
    auto met = constraints_of(t.info, n, constraints.size());
    if (met.met) {
      point loss;
      for (std::size_t i = 0; i < n; ++i) {
        const bool max = i < objectives.size() ? objectives[i].value("mode", "max") == "max" : e.info.value("mode", "max") == "max";
        loss.push_back(max ? -values[i].get<double>() : values[i].get<double>());
      }
      losses.push_back(std::move(loss));
      feasible.push_back(trials.size());
    }
    trials.push_back({{"trial", tid}, {"values", std::move(values)}, {"constraint_values", std::move(met.values)}, {"feasible", met.met}, {"front", false}});
  }
  const auto front = pareto_front(losses);
  for (std::size_t i : front) trials[feasible[i]]["front"] = true;
  return {{"objectives", objectives}, {"constraints", constraints}, {"trials", std::move(trials)}, {"front_size", front.size()}};
}

nlohmann::json experiment_board::trial_json(const std::string& experiment, const std::string& trial) const {
  auto e = experiments_.find(experiment);
  if (e == experiments_.end()) return nullptr;
  auto t = e->second.trials.find(trial);
  if (t == e->second.trials.end()) return nullptr;
  nlohmann::json j = t->second.info;
  j["id"] = trial;
  j["experiment"] = experiment;
  j["experiment_name"] = e->second.info.value("name", "");
  j["metric"] = e->second.info.value("metric", "");
  j["mode"] = e->second.info.value("mode", "max");
  j["last_result"] = t->second.last;
  j["curve"] = t->second.curve.to_json();
  return j;
}

std::map<std::string, std::pair<std::string, std::string>> experiment_board::holders() const {
  std::map<std::string, std::pair<std::string, std::string>> out;
  for (auto& [eid, e] : experiments_) {
    if (e.state != "running") continue;
    for (auto& [tid, t] : e.trials)
      if (t.info.value("state", "") == "running" && t.info.contains("group") && t.info["group"].is_string())
        out[t.info["group"].get<std::string>()] = {eid, tid};
  }
  return out;
}

std::map<std::string, int64_t> experiment_board::since_checkpoint() const {
  std::map<std::string, int64_t> out;
  for (auto& [eid, e] : experiments_) {
    if (e.state != "running") continue;
    for (auto& [tid, t] : e.trials) {
      const auto& i = t.info;
      if (i.value("state", "") != "running" || !i.contains("group") || !i["group"].is_string()) continue;
      auto it = i.find("iteration");
      if (it == i.end() || !it->is_number_integer()) continue;
      auto c = i.find("checkpoint");
      int64_t last = c != i.end() && c->is_number_integer() ? c->get<int64_t>() : -1;
      out[i["group"].get<std::string>()] = std::max<int64_t>(0, it->get<int64_t>() - std::max<int64_t>(last, 0));
    }
  }
  return out;
}

std::map<std::string, int64_t> experiment_board::trials_by_state() const {
  std::map<std::string, int64_t> out;
  for (auto& [eid, e] : experiments_)
    for (auto& [tid, t] : e.trials) ++out[t.info.value("state", "pending")];
  return out;
}

std::map<std::string, int64_t> experiment_board::experiments_by_state() const {
  std::map<std::string, int64_t> out;
  for (auto& [eid, e] : experiments_) ++out[e.state];
  return out;
}

nlohmann::json gpus_view(const nlohmann::json& status, const experiment_board& board) {
  auto holders = board.holders();
  // uuid -> the bundles that hold a share of it
  std::map<std::string, nlohmann::json> held;
  if (status.contains("placement_groups"))
    for (auto& g : status["placement_groups"]) {
      if (g.value("state", "") != "created" && g.value("state", "") != "rescheduling") continue;
      std::string gid = g.value("id", "");
      for (auto& b : g.value("bundles", nlohmann::json::array())) {
        if (!b.contains("gpus")) continue;
        for (auto& c : b["gpus"]) {
          nlohmann::json h{{"group", gid},
                           {"owner", g.value("owner", "")},
                           {"bundle", b.value("index", 0)},
                           {"share", c.value("share", 0.0)},
                           {"memory_quota", c.value("memory", int64_t{0})},
                           {"experiment", nullptr},
                           {"trial", nullptr},
                           {"memory_used", nullptr}};
          if (auto w = holders.find(gid); w != holders.end()) {
            h["experiment"] = w->second.first;
            h["trial"] = w->second.second;
          }
          held[c.value("uuid", "")].push_back(std::move(h));
        }
      }
    }
  auto out = nlohmann::json::array();
  if (!status.contains("nodes")) return out;
  for (auto& n : status["nodes"]) {
    if (!n.value("alive", false)) continue;
    // The audit's view of each card (real GPUs only): memory in use, per trial, foreign.
    std::map<std::string, nlohmann::json> audit;
    if (n.contains("gpu_audit"))
      for (auto& a : n["gpu_audit"]) audit[a.value("uuid", "")] = a;
    for (auto& g : n.value("gpus", nlohmann::json::array())) {
      std::string uuid = g.value("uuid", "");
      nlohmann::json card{{"node", n.value("id", "")},
                          {"host", n.value("host", "")},
                          {"index", g.value("index", 0)},
                          {"uuid", uuid},
                          {"name", g.value("name", "")},
                          {"logical", g.value("logical", false)},
                          {"memory_total", g.value("memory_total", int64_t{0})},
                          {"allocated", g.value("allocated", 0.0)},
                          {"memory_used", nullptr},
                          {"holders", held.count(uuid) ? held[uuid] : nlohmann::json::array()},
                          {"foreign", nlohmann::json::array()}};
      if (g.contains("others")) card["others"] = g["others"];  // kept clear of (docs/gpu-sharing.md)
      if (auto a = audit.find(uuid); a != audit.end()) {
        card["memory_used"] = a->second.value("memory_used", int64_t{0});
        card["foreign"] = a->second.value("foreign", nlohmann::json::array());
        for (auto& h : card["holders"]) {
          if (!h["trial"].is_string()) continue;
          for (auto& t : a->second.value("trials", nlohmann::json::array()))
            if (t.value("trial", "") == h["trial"].get<std::string>()) h["memory_used"] = t.value("memory", int64_t{0});
        }
      }
      // Its host memory and CPU, from its cgroup (the node's report).
      for (auto& h : card["holders"]) {
        if (!h["trial"].is_string() || !n.contains("trial_host")) continue;
        auto& use = n["trial_host"];
        auto id = h["trial"].get<std::string>();
        if (!use.is_object() || !use.contains(id) || !use[id].is_object()) continue;
        if (use[id].contains("memory")) h["host_memory"] = use[id]["memory"];
        if (use[id].contains("cpu_seconds")) h["cpu_seconds"] = use[id]["cpu_seconds"];
      }
      out.push_back(std::move(card));
    }
  }
  return out;
}

}  // namespace tune

namespace tune {

nlohmann::json status_for_user(nlohmann::json status, const std::string& user) {
  if (status.contains("placement_groups") && status["placement_groups"].is_array())
    for (auto& g : status["placement_groups"]) {
      const auto owner = g.value("owner", "");
      if (owner.empty() || owner == user) continue;
      g.erase("reason");
      g.erase("experiment");
      g["held_by"] = owner;
    }
  // Nodes: other users' trials (their nodes' reports name each trial's owner) are
  // counted by owner, not listed; on the audit's cards they keep their memory, not
  // their trial.
  if (status.contains("nodes") && status["nodes"].is_array())
    for (auto& n : status["nodes"]) {
      if (!n.is_object()) continue;
      auto others = [&](const nlohmann::json& entry) -> std::string {
        if (!entry.is_object()) return {};
        auto o = entry.find("owner");
        if (o == entry.end() || !o->is_string() || o->get<std::string>() == user) return {};
        return o->get<std::string>();
      };
      if (n.contains("trial_host") && n["trial_host"].is_object()) {
        nlohmann::json mine = nlohmann::json::object(), held = nlohmann::json::object();
        for (auto& [id, use] : n["trial_host"].items()) {
          if (auto owner = others(use); !owner.empty())
            held[owner] = held.value(owner, 0) + 1;
          else
            mine[id] = use;
        }
        n["trial_host"] = std::move(mine);
        if (!held.empty()) n["trials_held_by"] = std::move(held);
      }
      if (n.contains("gpu_audit") && n["gpu_audit"].is_array())
        for (auto& card : n["gpu_audit"]) {
          if (!card.is_object() || !card.contains("trials") || !card["trials"].is_array()) continue;
          for (auto& t : card["trials"])
            if (auto owner = others(t); !owner.empty())
              t = nlohmann::json{{"held_by", owner},
                                 {"memory", t["memory"].is_number_integer() ? t["memory"].get<int64_t>() : int64_t{0}}};
        }
    }
  return status;
}

void hide_others_holders(nlohmann::json& gpus, const std::string& user) {
  for (auto& card : gpus)
    for (auto& h : card["holders"]) {
      const auto owner = h.value("owner", "");
      if (owner.empty() || owner == user) continue;
      h["experiment"] = nullptr;
      h["trial"] = nullptr;
      h["held_by"] = owner;
    }
}

}  // namespace tune
