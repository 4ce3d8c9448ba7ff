// What an experiment produced, from its store: the best trial, and every trial's
// configuration, history and final state as CSV or JSON.
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "tune/tuner/common.hpp"
#include "tune/tuner/store.hpp"

namespace tune {

// How a trial's value is taken from its history: its last result (Ray's default) or
// its best one.
enum class scope { last, best };

struct best_trial {
  std::string id;
  double value = 0;
  int64_t iteration = 0;
  nlohmann::json config;
};

// The best trial by `metric` (trials without that metric are left out; errored trials
// count with the results they reported). Nothing when no trial reported the metric.
// With `constraints` (metrics that must be <= 0), a result counts only when it reports
// every one of them within it: an infeasible trial is never the best.
expected<std::optional<best_trial>> find_best(const experiment_store& store, const std::string& metric, mode m,
                                             scope s = scope::last, const std::vector<std::string>& constraints = {});

// A trial on the Pareto front: its last result's values of the objectives.
struct front_trial {
  std::string id;
  std::vector<double> values;  // in the order of the objectives
  int64_t iteration = 0;
  nlohmann::json config;
};

// The trials no other trial beats in every objective (each by its last result that
// reports every objective and meets every constraint), in the store's trial order.
expected<std::vector<front_trial>> find_pareto_front(const experiment_store& store,
                                                      const std::vector<objective>& objectives,
                                                      const std::vector<std::string>& constraints = {});

// One row per result: trial, iteration, time, state, error, then the configuration
// flattened ("config/optimizer/lr") and every metric, each a column (the union over
// all results, sorted); RFC 4180 quoting.
expected<std::string> results_csv(const experiment_store& store);
// The same written to `out` as it is read (one result at a time in memory).
status write_results_csv(const experiment_store& store, std::ostream& out);

// {"settings": {...}, "trials": [{"id", "config", "state", "error", "info",
//   "history": [{"iteration", "time", "metrics"}]}]}
expected<nlohmann::json> experiment_json(const experiment_store& store);

}  // namespace tune
