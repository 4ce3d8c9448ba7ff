#include "tune/tuner/export.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/core/pareto.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace tune {

namespace {

void flatten(const nlohmann::json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "/" + k, out);
    return;
  }
  // Numbers as JSON writes them: the shortest text that reads back the same double.
  out[prefix] = j.is_string() ? j.get<std::string>() : json_text(j);
}

// A field as shown: ill-formed UTF-8 as U+FFFD (a config value, an error, a key).
std::string csv_field(const std::string& text) {
  auto s = shown_utf8(text);
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string{"\"\""} : std::string(1, c);
  return q + "\"";
}

// The result's value of `name`, when it reports a finite number.
std::optional<double> number_of(const result_row& r, const std::string& name) {
  if (!r.metrics.is_object()) return std::nullopt;
  auto it = r.metrics.find(name);
  if (it == r.metrics.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>{v} : std::nullopt;
}

bool feasible(const result_row& r, const std::vector<std::string>& constraints) {
  for (const auto& c : constraints)
    if (auto v = number_of(r, c); !v || *v > 0) return false;
  return true;
}

}  // namespace

expected<std::vector<front_trial>> find_pareto_front(const experiment_store& store,
                                                      const std::vector<objective>& objectives,
                                                      const std::vector<std::string>& constraints) {
  auto trials = store.trials();
  if (!trials) return trials.error();
  std::vector<front_trial> candidates;
  std::vector<point> losses;
  for (auto& t : *trials) {
    std::optional<front_trial> last;
    auto read = store.for_each_result(
        [&](const result_row& r) {
          front_trial f{t.id, {}, r.iteration, t.config};
          for (const auto& o : objectives)
            if (auto v = number_of(r, o.name)) f.values.push_back(*v);
          if (f.values.size() == objectives.size() && feasible(r, constraints)) last = std::move(f);
        },
        t.id);
    if (!read) return read;
    if (!last) continue;
    point loss;
    for (std::size_t i = 0; i < objectives.size(); ++i)
      loss.push_back(objectives[i].direction == mode::max ? -last->values[i] : last->values[i]);
    losses.push_back(std::move(loss));
    candidates.push_back(std::move(*last));
  }
  std::vector<front_trial> front;
  for (std::size_t i : pareto_front(losses)) front.push_back(std::move(candidates[i]));
  return front;
}

expected<std::optional<best_trial>> find_best(const experiment_store& store, const std::string& metric, mode m,
                                             scope s, const std::vector<std::string>& constraints) {
  auto trials = store.trials();
  if (!trials) return trials.error();
  std::optional<best_trial> best;
  for (auto& t : *trials) {
    std::optional<std::pair<double, int64_t>> mine;
    auto read = store.for_each_result(
        [&](const result_row& r) {
          auto v = number_of(r, metric);
          if (!v || !feasible(r, constraints)) return;
          if (s == scope::last || !mine || better(m, *v, mine->first)) mine = {*v, r.iteration};
        },
        t.id);
    if (!read) return read;
    if (mine && (!best || better(m, mine->first, best->value))) best = best_trial{t.id, mine->first, mine->second, t.config};
  }
  return best;
}

status write_results_csv(const experiment_store& store, std::ostream& out) {
  auto trials = store.trials();
  if (!trials) return trials.error();
  std::map<std::string, const trial_row*> by_id;
  std::map<std::string, std::map<std::string, std::string>> configs;
  std::set<std::string> config_columns, metric_columns;
  for (auto& t : *trials) {
    by_id[t.id] = &t;
    flatten(t.config, "", configs[t.id]);
    for (auto& [k, v] : configs[t.id]) config_columns.insert(k);
  }
  // Two passes over the results, one row at a time: the columns, then the rows.
  auto columns = store.for_each_result([&](const result_row& r) {
    if (r.metrics.is_object())
      for (auto& [k, v] : r.metrics.items()) metric_columns.insert(k);
  });
  if (!columns) return columns;
  out << "trial,iteration,time,state,error";
  for (auto& c : config_columns) out << "," << csv_field("config/" + c);
  for (auto& c : metric_columns) out << "," << csv_field(c);
  out << "\r\n";
  std::map<std::string, std::string> metrics;
  auto rows = store.for_each_result([&](const result_row& r) {
    auto* t = by_id.count(r.trial) ? by_id[r.trial] : nullptr;
    char time[40];
    std::snprintf(time, sizeof time, "%.6f", r.time);
    out << csv_field(r.trial) << "," << r.iteration << "," << time << "," << (t ? std::string{to_string(t->state)} : std::string{}) << ","
        << csv_field(t ? t->error : "");
    auto& conf = configs[r.trial];
    for (auto& c : config_columns) out << "," << (conf.count(c) ? csv_field(conf[c]) : "");
    metrics.clear();
    flatten(r.metrics, "", metrics);
    for (auto& c : metric_columns) out << "," << (metrics.count(c) ? csv_field(metrics[c]) : "");
    out << "\r\n";
  });
  if (!rows) return rows;
  if (!out) return status{errc::invalid_argument, "cannot write the results"};
  return status::ok();
}

expected<std::string> results_csv(const experiment_store& store) {
  std::ostringstream out;
  if (auto s = write_results_csv(store, out); !s) return s;
  return out.str();
}

expected<nlohmann::json> experiment_json(const experiment_store& store) {
  nlohmann::json out{{"settings", nlohmann::json::object()}, {"trials", nlohmann::json::array()}};
  for (auto key : {"name", "metric", "mode", "search_space", "scheduler", "search", "num_samples"}) {
    auto v = store.meta(key);
    if (!v) return v.error();
    if (!v->is_null()) out["settings"][key] = *v;
  }
  auto trials = store.trials();
  if (!trials) return trials.error();
  for (auto& t : *trials) {
    auto history = store.results(t.id);
    if (!history) return history.error();
    nlohmann::json h = nlohmann::json::array();
    for (auto& r : *history) h.push_back({{"iteration", r.iteration}, {"time", r.time}, {"metrics", r.metrics}});
    out["trials"].push_back({{"id", t.id},
                             {"config", t.config},
                             {"state", t.state},
                             {"error", t.error},
                             {"info", t.info},
                             {"history", h}});
  }
  return out;
}

}  // namespace tune
