#include "metrics.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace tune {

void latency_histogram::observe(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  size_t i = 0;
  while (i < bounds.size() && seconds > bounds[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += seconds;
}

nlohmann::json latency_histogram::to_json() const {
  return {{"bounds", bounds}, {"counts", counts_}, {"sum", sum_}, {"count", count_}};
}

latency_histogram latency_histogram::from_json(const nlohmann::json& j) {
  latency_histogram h;
  if (!j.is_object() || !j.contains("counts") || !j["counts"].is_array() || j["counts"].size() != h.counts_.size())
    return h;
  for (size_t i = 0; i < h.counts_.size(); ++i)
    if (j["counts"][i].is_number_unsigned()) h.counts_[i] = j["counts"][i];
  h.count_ = j.value("count", uint64_t{0});
  h.sum_ = j.value("sum", 0.0);
  return h;
}

namespace {

// A label value, escaped as the exposition format asks (backslash, quote, newline).
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);  // the shortest that reads back the same
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

struct page {
  std::string text;
  void head(const std::string& name, const std::string& type, const std::string& help) {
    text += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, double v) {
    text += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(v) + "\n";
  }
};

}  // namespace

std::string prometheus_text(const nlohmann::json& status, const experiment_board& board) {
  page p;
  auto nodes = status.value("nodes", nlohmann::json::array());

  std::map<std::string, int64_t> node_states{{"alive", 0}, {"draining", 0}, {"dead", 0}, {"left", 0}};
  int64_t alive = 0;
  for (auto& n : nodes) {
    ++node_states[n.value("state", "unknown")];
    if (n.value("alive", false)) ++alive;
  }
  p.head("libtune_nodes_alive", "gauge", "Nodes alive (draining ones included).");
  p.sample("libtune_nodes_alive", "", static_cast<double>(alive));
  p.head("libtune_nodes", "gauge", "Nodes the head knows, by state.");
  for (auto& [s, k] : node_states) p.sample("libtune_nodes", "state=\"" + label(s) + "\"", static_cast<double>(k));

  double gpus = 0, allocated = 0;
  std::string per_card_alloc, per_card_mem;
  for (auto& n : nodes) {
    if (!n.value("alive", false)) continue;
    std::map<std::string, int64_t> used;
    for (auto& a : n.value("gpu_audit", nlohmann::json::array())) used[a.value("uuid", "")] = a.value("memory_used", int64_t{0});
    for (auto& g : n.value("gpus", nlohmann::json::array())) {
      gpus += 1;
      double share = g.value("allocated", 0.0);
      allocated += share;
      std::string labels = "node=\"" + label(n.value("id", "")) + "\",gpu=\"" + std::to_string(g.value("index", 0)) +
                           "\",uuid=\"" + label(g.value("uuid", "")) + "\"";
      per_card_alloc += "libtune_gpu_allocated{" + labels + "} " + number(share) + "\n";
      if (auto u = used.find(g.value("uuid", "")); u != used.end())
        per_card_mem += "libtune_gpu_memory_used_bytes{" + labels + "} " + number(static_cast<double>(u->second)) + "\n";
    }
  }
  p.head("libtune_gpus", "gauge", "GPUs of alive nodes.");
  p.sample("libtune_gpus", "", gpus);
  p.head("libtune_gpus_allocated", "gauge", "GPUs allocated to placement groups (shares summed) on alive nodes.");
  p.sample("libtune_gpus_allocated", "", allocated);
  p.head("libtune_gpu_allocated", "gauge", "Share of each GPU allocated to placement groups (0 to 1).");
  p.text += per_card_alloc;
  p.head("libtune_gpu_memory_used_bytes", "gauge", "GPU memory in use on each card, as the node's GPU audit saw it (real GPUs only).");
  p.text += per_card_mem;

  p.head("libtune_trials", "gauge", "Trials of the experiments on the head's board, by state.");
  auto trials = board.trials_by_state();
  for (auto s : {"pending", "running", "paused", "terminated", "error"}) trials.try_emplace(s, 0);
  for (auto& [s, k] : trials) p.sample("libtune_trials", "state=\"" + label(s) + "\"", static_cast<double>(k));
  p.head("libtune_experiments", "gauge", "Experiments on the head's board, by state.");
  auto exps = board.experiments_by_state();
  for (auto s : {"running", "done", "failed", "interrupted"}) exps.try_emplace(s, 0);
  for (auto& [s, k] : exps) p.sample("libtune_experiments", "state=\"" + label(s) + "\"", static_cast<double>(k));
  p.head("libtune_results_ingested_total", "counter", "Trial results the experiments' controllers ingested since the head started.");
  p.sample("libtune_results_ingested_total", "", static_cast<double>(board.results_total()));

  p.head("libtune_placement_groups", "gauge", "Placement groups the head keeps, by state.");
  std::map<std::string, int64_t> groups{{"pending", 0}, {"created", 0}, {"rescheduling", 0}, {"infeasible", 0}, {"removed", 0}};
  for (auto& g : status.value("placement_groups", nlohmann::json::array())) ++groups[g.value("state", "unknown")];
  for (auto& [s, k] : groups) p.sample("libtune_placement_groups", "state=\"" + label(s) + "\"", static_cast<double>(k));

  auto h = latency_histogram::from_json(status.value("placement_latency", nlohmann::json::object()));
  auto hj = h.to_json();
  p.head("libtune_placement_group_latency_seconds", "histogram",
         "Seconds from a placement group's creation until every bundle of it was reserved.");
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= latency_histogram::bounds.size(); ++i) {
    cumulative += hj["counts"][i].get<uint64_t>();
    std::string le = i < latency_histogram::bounds.size() ? number(latency_histogram::bounds[i]) : "+Inf";
    p.sample("libtune_placement_group_latency_seconds_bucket", "le=\"" + le + "\"", static_cast<double>(cumulative));
  }
  p.sample("libtune_placement_group_latency_seconds_sum", "", h.sum());
  p.sample("libtune_placement_group_latency_seconds_count", "", static_cast<double>(h.count()));

  auto head = status.value("head", nlohmann::json::object());
  p.head("libtune_head_uptime_seconds", "gauge", "Seconds since the head started.");
  p.sample("libtune_head_uptime_seconds", "", head.value("uptime_s", 0.0));
  p.head("libtune_build_info", "gauge", "The head's libtune version.");
  p.sample("libtune_build_info", "version=\"" + label(head.value("version", "")) + "\"", 1);
  return p.text;
}

}  // namespace tune
