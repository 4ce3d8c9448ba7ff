// The head's experiment board: what the dashboard shows of every experiment run on the
// cluster. Each experiment's controller (in the tuning program) reports to the head
// twice a second — its trials' states, configs, where they run, and the new values of
// the experiment's metric — and the board keeps them, bounded:
//  - a trial's learning curve keeps at most `max_points` points (when it grows past,
//    every other older point goes: the curve keeps its shape at half the resolution);
//  - at most `max_ended` finished experiments are kept (the oldest go first); running
//    ones always are.
// A report is JSON (docs/dashboard.md, "Reports"): "full" replaces what the board has of
// the experiment (the first report, and again after a head restart), otherwise trials
// are merged by id and points appended. The board also joins its trials to the
// cluster's GPUs (which trial holds which share of which card) for the dashboard.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

// A learning curve: (iteration, value) pairs with rising iterations, bounded. A point
// whose iteration is not past the last one replaces the points from that iteration on.
class bounded_series {
 public:
  explicit bounded_series(size_t max_points = 512) : max_(max_points < 4 ? 4 : max_points) {}
  void add(int64_t iteration, double value);
  const std::vector<std::pair<int64_t, double>>& points() const { return points_; }
  size_t size() const { return points_.size(); }
  nlohmann::json to_json() const;  // [[iteration, value], ...]

 private:
  size_t max_;
  std::vector<std::pair<int64_t, double>> points_;
};

class experiment_board {
 public:
  struct limits {
    size_t max_points = 512;  // per trial's curve
    size_t max_ended = 50;    // finished experiments kept
    size_t max_trials = 100000;
  };
  experiment_board() = default;
  explicit experiment_board(limits l) : limits_(l) {}

  // Applies one report from an experiment's controller; `now` is the wall clock (s).
  // A malformed report changes nothing and says what is wrong.
  status apply(const nlohmann::json& report, double now);

  // The program that ran the experiment is gone (its connection ended) before it said
  // the experiment was over.
  void owner_lost(const std::string& experiment, const std::string& why, double now);

  // The experiments, newest first: id, name, state, metric, mode, trial counts by state,
  // the best trial and its value, results, times, owner. Seen by user `viewer` (empty:
  // the admin), other users' experiments show only their owner, state and counts.
  nlohmann::json list_json(const std::string& viewer = "") const;
  // The user an experiment belongs to (its first reporter); empty when not on the board.
  std::string owner(const std::string& id) const;
  // One experiment with its trial table; `curves`: every trial's points too; with
  // several objectives or constraints its Pareto front ("pareto", docs/dashboard.md).
  // Null when there is no such experiment.
  nlohmann::json experiment_json(const std::string& id, bool curves) const;
  // One trial: config, state, node, PID, GPUs, error, last result, its whole curve.
  nlohmann::json trial_json(const std::string& experiment, const std::string& trial) const;

  // Placement group id -> {"experiment", "trial"} for every trial that runs now.
  std::map<std::string, std::pair<std::string, std::string>> holders() const;
  // For each placement group a running trial holds: the iterations it ran since its
  // last checkpoint (all of them when it has none): what moving it would redo.
  std::map<std::string, int64_t> since_checkpoint() const;

  // For /metrics: trials by state over every experiment on the board, experiments by
  // state, and the results every controller ingested (never decreases).
  std::map<std::string, int64_t> trials_by_state() const;
  std::map<std::string, int64_t> experiments_by_state() const;
  int64_t results_total() const { return results_total_; }
  size_t size() const { return experiments_.size(); }

 private:
  struct trial {
    nlohmann::json info = nlohmann::json::object();  // id, state, iteration, value, config, node, ...
    nlohmann::json last;                             // the latest result's metrics
    bounded_series curve;
  };
  struct experiment {
    nlohmann::json info = nlohmann::json::object();  // name, metric, mode, dir, host, pid, ...
    std::string state = "running";
    std::string error;
    double first_seen = 0, last_seen = 0, ended_at = 0;
    int64_t results = 0;
    std::map<std::string, trial> trials;
    uint64_t order = 0;  // when it was first seen (newest first)
  };

  void evict();
  static nlohmann::json summary(const std::string& id, const experiment& e);
  // With several objectives or constraints: every trial that has reported each
  // objective, with its latest values, whether it meets the constraints and whether it
  // is on the Pareto front of the feasible ones. Null otherwise.
  static nlohmann::json pareto_view(const experiment& e);

  limits limits_;
  std::map<std::string, experiment> experiments_;
  uint64_t next_order_ = 0;
  int64_t results_total_ = 0;
};

// The cluster's GPUs as the dashboard shows them: every card of every alive node with
// its share allocated, and what holds it — each bundle's group, share and memory quota,
// the trial in it (from the board) and the memory the GPU audit saw it use — plus other
// people's processes the audit found. `status` is the head's status JSON.
nlohmann::json gpus_view(const nlohmann::json& status, const experiment_board& board);

// The head's status as user `user` sees it: other users' placement groups keep what
// they hold and are marked "held_by" their owner, without their reasons or experiment;
// on the nodes, other users' trials are counted by owner ("trials_held_by") instead of
// their host use, and the audit's cards show their memory "held_by" the owner, without
// the trial.
nlohmann::json status_for_user(nlohmann::json status, const std::string& user);
// Other users' holders in gpus_view: their owner, share and memory, no experiment or trial.
void hide_others_holders(nlohmann::json& gpus, const std::string& user);

}  // namespace tune
