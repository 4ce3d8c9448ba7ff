#include "tune/tuner/progress.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

std::string clock_text(double s) {
  char buf[32];
  auto t = static_cast<long>(s);
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_number_float()) return number(v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return json_text(v);
}

// The configuration's leaves, "a/b" for nested ones, in key order.
void leaves(const nlohmann::json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (!j.is_object()) {
    out.push_back({prefix, value_text(j)});
    return;
  }
  for (auto& [k, v] : j.items()) leaves(v, prefix.empty() ? k : prefix + "/" + k, out);
}

std::string fit(std::string s, size_t width) {
  if (s.size() > width) s = width > 1 ? s.substr(0, width - 1) + "~" : s.substr(0, width);
  return s + std::string(width - s.size(), ' ');
}

// The best trial so far: by the latest value of the metric, among those that meet the
// constraints.
const progress_trial* best_of(const progress_snapshot& s) {
  const progress_trial* best = nullptr;
  for (auto& t : s.trials)
    if (t.value && t.feasible && (!best || better(s.direction, *t.value, *best->value))) best = &t;
  return best;
}

std::string config_text(const nlohmann::json& c) {
  std::vector<std::pair<std::string, std::string>> kv;
  leaves(c, "", kv);
  std::string out;
  for (auto& [k, v] : kv) out += (out.empty() ? "" : ", ") + k + "=" + v;
  return out;
}

}  // namespace

std::string render_progress(const progress_snapshot& now, int width, int max_rows) {
  width = std::max(width, 40);
  std::string out;
  const auto w = static_cast<size_t>(width);
  out += fit(std::string{"== "} + now.experiment + " == running for " + clock_text(now.elapsed_s) + ", metric " + now.metric + " (" +
                 (now.direction == mode::max ? "max" : "min") + ")",
             w) + "\n";
  std::map<std::string, int> by_state;
  for (auto& t : now.trials) by_state[t.state] += 1;
  std::string counts;
  for (auto state : {"running", "pending", "paused", "terminated", "error"})
    if (by_state.count(state)) counts += (counts.empty() ? "" : ", ") + std::to_string(by_state[state]) + " " + state;
  out += fit(std::string{"Trials: "} + std::to_string(now.trials.size()) + (counts.empty() ? "" : " (" + counts + ")"), w) + "\n";
  if (auto* b = best_of(now))
    out += fit(std::string{"Best so far: "} + b->id + " " + now.metric + "=" + number(*b->value) + " (" + config_text(b->config) + ")",
               static_cast<size_t>(width)) + "\n";
  if (now.trials.empty()) return out;

  // Columns: trial, state, iter, metric, then configuration keys while they fit.
  std::vector<std::string> keys;
  {
    std::map<std::string, bool> seen;
    for (auto& t : now.trials) {
      std::vector<std::pair<std::string, std::string>> kv;
      leaves(t.config, "", kv);
      for (auto& [k, v] : kv)
        if (!seen[k]) {
          seen[k] = true;
          keys.push_back(k);
        }
    }
  }
  size_t id_w = 5;
  for (auto& t : now.trials) id_w = std::max(id_w, std::min<size_t>(t.id.size(), 24));
  const size_t state_w = 10, iter_w = 6, metric_w = std::max<size_t>(10, std::min<size_t>(now.metric.size(), 14)), col_w = 10;
  size_t used = id_w + state_w + iter_w + metric_w + 4;
  size_t shown = 0;
  while (shown < keys.size() && used + col_w + 1 <= static_cast<size_t>(width)) {
    used += col_w + 1;
    ++shown;
  }
  std::string header = fit("trial", id_w) + " " + fit("state", state_w) + " " + fit("iter", iter_w) + " " +
                       fit(now.metric, metric_w);
  for (size_t i = 0; i < shown; ++i) {
    header += ' ';
    header += fit(keys[i], col_w);
  }
  out += header + "\n";

  // Running first, then paused, pending, errored, terminated; in their given order.
  auto rank = [](const std::string& s) {
    return s == "running" ? 0 : s == "paused" ? 1 : s == "pending" ? 2 : s == "error" ? 3 : 4;
  };
  std::vector<const progress_trial*> rows;
  for (auto& t : now.trials) rows.push_back(&t);
  std::stable_sort(rows.begin(), rows.end(), [&](auto* a, auto* b) { return rank(a->state) < rank(b->state); });
  int printed = 0;
  for (auto* t : rows) {
    if (printed == max_rows) break;
    std::vector<std::pair<std::string, std::string>> kv;
    leaves(t->config, "", kv);
    std::map<std::string, std::string> conf(kv.begin(), kv.end());
    std::string line = fit(t->id, id_w) + " " + fit(t->state, state_w) + " " + fit(std::to_string(t->iteration), iter_w) +
                       " " + fit(t->value ? number(*t->value) : "-", metric_w);
    for (size_t i = 0; i < shown; ++i) {
      line += ' ';
      line += fit(conf.count(keys[i]) ? conf[keys[i]] : "", col_w);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
    ++printed;
  }
  if (rows.size() > static_cast<size_t>(printed))
    out += std::string{"... and "} + std::to_string(rows.size() - static_cast<size_t>(printed)) + " more\n";
  for (auto* t : rows)
    if (t->state == "error" && !t->error.empty())
      out += fit(std::string{"error "} + t->id + ": " + t->error, static_cast<size_t>(width)) + "\n";
  // No trailing spaces on any line.
  std::string clean;
  size_t start = 0;
  while (start < out.size()) {
    auto nl = out.find('\n', start);
    auto line = out.substr(start, nl - start);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    clean += line + "\n";
    start = nl + 1;
  }
  return clean;
}

std::vector<std::string> progress_changes(const progress_snapshot& before, const progress_snapshot& now) {
  std::vector<std::string> lines;
  std::map<std::string, const progress_trial*> old;
  for (auto& t : before.trials) old[t.id] = &t;
  std::string at = "[";
  at += clock_text(now.elapsed_s);
  at += "] ";
  for (auto& t : now.trials) {
    auto it = old.find(t.id);
    if (it != old.end() && it->second->state == t.state) continue;
    std::string line = at + "trial " + t.id + " " + t.state;
    if (t.state == "pending" || (it == old.end() && t.state == "running")) line += " (" + config_text(t.config) + ")";
    if (t.state != "pending" && t.value) line += ", iter " + std::to_string(t.iteration) + " " + now.metric + "=" + number(*t.value);
    if (t.state == "error" && !t.error.empty()) line += ": " + t.error;
    lines.push_back(line);
  }
  auto* b0 = best_of(before);
  auto* b1 = best_of(now);
  if (b1 && (!b0 || b0->id != b1->id || *b0->value != *b1->value) &&
      (!b0 || better(now.direction, *b1->value, *b0->value)))
    lines.push_back(at + "best so far: " + b1->id + " " + now.metric + "=" + number(*b1->value));
  return lines;
}

}  // namespace tune
