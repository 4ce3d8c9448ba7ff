#include "board_feed.hpp"

#include "tune/trial/sha256.hpp"

#include <utility>

namespace tune {

board_feed::board_feed(std::string experiment_id, nlohmann::json info, size_t max_points)
    : id_(std::move(experiment_id)), info_(std::move(info)), max_points_(max_points) {}

std::string board_feed::experiment_id(const std::string& host, const std::string& dir) {
  return "exp-" + sha256_hex(host + ":" + dir).substr(0, 12);
}

board_feed::trial& board_feed::of(const std::string& id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) it = trials_.emplace(id, trial{bounded_series{max_points_}}).first;
  return it->second;
}

void board_feed::point(const std::string& id, int64_t iteration, double value) {
  auto& t = of(id);
  t.curve.add(iteration, value);
  t.unsent.emplace_back(iteration, value);
  // Between two reports a trial rarely sends more than its curve keeps; if it does,
  // the report carries the curve's newest points only.
  if (t.unsent.size() > 2 * max_points_) t.unsent.erase(t.unsent.begin(), t.unsent.end() - static_cast<long>(max_points_));
}

void board_feed::last_result(const std::string& id, std::string metrics_json) {
  auto& t = of(id);
  t.last = std::move(metrics_json);
  t.last_dirty = true;
}

void board_feed::set_info(const std::string& key, nlohmann::json value) {
  info_[key] = value;
  info_changed_[key] = std::move(value);
}

void board_feed::where(const std::string& id, const nlohmann::json& info) {
  auto& t = of(id);
  for (auto& [k, v] : info.items()) t.where[k] = v;
  ++t.where_version;
}

namespace {

nlohmann::json row_of(const std::string& id, const engine_trial& et, const nlohmann::json& where) {
  nlohmann::json row = where;
  row["id"] = id;
  row["state"] = et.state;
  row["iteration"] = et.iteration;
  row["value"] = et.value ? nlohmann::json(*et.value) : nlohmann::json(nullptr);
  if (!et.others.empty()) {  // other objectives, then constraints: the dashboard's Pareto front
    auto others = nlohmann::json::array();
    for (const auto& v : et.others) others.push_back(v ? nlohmann::json(*v) : nlohmann::json(nullptr));
    row["others"] = std::move(others);
  }
  row["config"] = et.cfg;
  row["error"] = et.error;
  row["starts"] = et.starts;
  row["failures"] = et.failures;
  row["last_failure"] = et.last_failure;
  row["checkpoint"] = et.checkpoint;
  return row;
}

}  // namespace

nlohmann::json board_feed::report(const std::map<std::string, engine_trial>& trials, const std::string& state,
                                  const std::string& error, double elapsed_s, int64_t results) {
  bool full = full_;
  nlohmann::json rows = nlohmann::json::array(), points = nlohmann::json::object(), last = nlohmann::json::object();
  for (auto& [id, et] : trials) {
    auto& t = of(id);
    trial::key k{et.state, et.error, et.iteration, et.checkpoint, et.value, et.others, et.starts, et.failures, t.where_version};
    if (full || k != t.sent) {
      t.sent = std::move(k);
      rows.push_back(row_of(id, et, t.where));
    }
    if (full && t.curve.size()) points[id] = t.curve.to_json();
    else if (!full && !t.unsent.empty()) {
      auto pts = nlohmann::json::array();
      for (auto& [it, v] : t.unsent) pts.push_back({it, v});
      points[id] = std::move(pts);
    }
    t.unsent.clear();
    if ((full || t.last_dirty) && !t.last.empty()) {
      auto m = nlohmann::json::parse(t.last, nullptr, false);
      if (m.is_object()) last[id] = std::move(m);
    }
    t.last_dirty = false;
  }
  if (!full && rows.empty() && points.empty() && last.empty() && info_changed_.empty() && state == sent_state_ &&
      results == sent_results_)
    return nullptr;
  full_ = false;
  sent_state_ = state;
  sent_results_ = results;
  nlohmann::json r = full ? info_ : std::exchange(info_changed_, nlohmann::json::object());
  if (full) info_changed_ = nlohmann::json::object();
  r["id"] = id_;
  r["full"] = full;
  r["state"] = state;
  r["error"] = error;
  r["elapsed_s"] = elapsed_s;
  r["results"] = results;
  if (!rows.empty()) r["trials"] = std::move(rows);
  if (!points.empty()) r["points"] = std::move(points);
  if (!last.empty()) r["last"] = std::move(last);
  return r;
}

}  // namespace tune
