// The head's Prometheus metrics (GET /metrics on the dashboard's port), in the text
// exposition format 0.0.4. Every metric is named libtune_*; docs/dashboard.md lists
// them. Built from the head's status JSON (nodes, GPUs, placement groups, the audit),
// the experiment board, and the placement-group latency histogram.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>

#include "tune/cluster/board.hpp"

namespace tune {

// Seconds from a placement group's creation to all its bundles being committed, in
// Prometheus' cumulative buckets.
class latency_histogram {
 public:
  static constexpr std::array<double, 14> bounds{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                 0.25,  0.5,    1,     2.5,  5,     10,  60};
  void observe(double seconds);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // {"bounds": [...], "counts": [...] (per bucket, not cumulative; one more for +Inf),
  //  "sum": s, "count": n}
  nlohmann::json to_json() const;
  static latency_histogram from_json(const nlohmann::json& j);

 private:
  std::array<uint64_t, bounds.size() + 1> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

// The whole /metrics page. `status`: the head's status JSON (with "placement_groups",
// "gpu_audit" per node and "placement_latency" as latency_histogram::to_json()).
std::string prometheus_text(const nlohmann::json& status, const experiment_board& board);

}  // namespace tune
