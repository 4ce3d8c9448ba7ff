// The experiment engine: the controller's decisions, apart from actors and processes
// (so they are tested step by step). It holds one experiment's trials and asks the
// search algorithm for configurations and the trial scheduler for verdicts; it answers
// every event with the actions the controller must take:
//
//   start    run trial `trial` with `cfg` (new, or resumed: then from the latest
//            checkpoint of trial `restore_from`, itself or PBT's donor)
//   stop     end the trial (early stopping, a stop criterion, the time budget); its
//            results so far count
//   pause    end the trial's process but keep it: it will be started again
//
// The controller reports back: on_result for each result, on_checkpoint for each
// checkpoint, on_ended when the trial's process ended (for whatever reason). Pausing
// is done by ending the process (its GPU memory is freed) and starting again from a
// checkpoint, never by SIGSTOP.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/tuner/common.hpp"
#include "tune/tuner/scheduler.hpp"
#include "tune/tuner/search.hpp"
#include "tune/tuner/trial_state.hpp"

namespace tune {

struct stop_criteria {
  std::optional<int64_t> max_iterations;   // a trial that reports this iteration is done
  std::optional<double> metric_threshold;  // a trial that reaches it (>= max, <= min) is done
  std::optional<double> max_time_s;        // a trial that has run this long (paused time not
                                           // counted) is done at its next result
};

struct engine_options {
  std::string metric;
  mode direction = mode::max;
  int max_concurrent = 1;                // trials running at once (>= 1)
  stop_criteria stop;
  std::optional<double> time_budget_s;   // the whole experiment; then every trial stops
  int max_failures = 0;                  // a trial that fails (its process, its node) is started
                                         // again this often, from its latest checkpoint
  std::string trial_prefix = "trial";    // ids: trial-00001, ...
  // Several objectives: the ones after `metric` (the schedulers and stop criteria use
  // `metric`); with constraints (metrics that must be <= 0), each trial's latest values
  // of all of them go to the search when it ends, and a trial that ended without
  // reporting one of them ends in error, as for `metric`.
  std::vector<std::string> other_objectives;
  std::vector<std::string> constraints;
  // Their directions: set, the scheduler ranks by all objectives at its rungs (ASHA).
  std::vector<mode> other_directions;
};

struct engine_action {
  enum class kind { start, stop, pause };
  kind what = kind::start;
  std::string trial;
  config cfg;                // start: the configuration
  std::string restore_from;  // start: whose latest checkpoint to start from; empty: afresh
  int64_t restore_iteration = -1;  // that checkpoint's iteration (-1: none)
  std::string reason;        // stop: why (early stopping, criterion, budget)
};

struct engine_trial {
  std::string id;
  config cfg;
  trial_state state = trial_state::pending;
  int64_t iteration = 0;          // the latest reported
  std::optional<double> value;    // the latest value of the metric
  std::vector<std::optional<double>> others;  // of other_objectives, then constraints
  std::string error;
  int64_t checkpoint = -1;        // the latest checkpoint's iteration
  int starts = 0;                 // how often its process was started
  int failures = 0;               // failures it was restarted after
  std::string last_failure;       // the latest one's reason
  int64_t replay_until = 0;       // restarted from an earlier checkpoint: results up to here
                                  // were seen already (recorded, not counted again)
  double run_s = 0;               // time it ran in earlier starts (before pauses)
  double started_at = -1;         // when the current start began (-1: not running)
};

class experiment_engine {
 public:
  // The search algorithm and scheduler outlive the engine.
  static expected<std::unique_ptr<experiment_engine>> make(search_algorithm& search, trial_scheduler& scheduler,
                                                           engine_options options);

  // What to start (or stop, past the time budget) now; `now_s` counts from the start
  // of the experiment (and is the engine's clock until the next step).
  expected<std::vector<engine_action>> step(double now_s);
  expected<std::vector<engine_action>> on_result(const std::string& id, int64_t iteration,
                                                 const nlohmann::json& metrics);
  // The same with the experiment's metric already read: its value, or none when the
  // result does not name it (the result is then recorded only).
  expected<std::vector<engine_action>> on_metric(const std::string& id, int64_t iteration,
                                                 std::optional<double> value);
  // ... and the values of other_objectives then constraints in it (nullopt: absent).
  expected<std::vector<engine_action>> on_metric(const std::string& id, int64_t iteration,
                                                 std::optional<double> value,
                                                 const std::vector<std::optional<double>>& others);
  void on_checkpoint(const std::string& id, int64_t iteration);
  // The trial's process ended: ok (exit 0, or ended on our stop/pause) or not (`error`:
  // its error). A trial that ended well by itself without ever reporting the metric
  // ends in error all the same ("it ended without reporting val_acc"), followed by
  // `error` when ok (what it reported instead); it is not restarted (max_failures): it
  // would do the same again.
  expected<std::vector<engine_action>> on_ended(const std::string& id, bool ok, const std::string& error = {});

  // The trial's process was ended by something that is not its fault (the program that
  // ran the experiment died, and its resources went with it): it starts again from its
  // latest checkpoint, not counted as a failure; one asked to stop or pause is
  // stopped or paused now.
  expected<std::vector<engine_action>> on_interrupted(const std::string& id);

  // Trials running at once from the next step on (at least 1): auto-packing raises it
  // once the share is known. Running trials above it are not stopped.
  void set_max_concurrent(int n) { opt_.max_concurrent = n < 1 ? 1 : n; }
  // Nothing runs and nothing more will start.
  bool finished() const;
  const std::map<std::string, engine_trial>& trials() const { return trials_; }
  // The trial meets every constraint by its latest values (one not reported yet is not
  // met); true without constraints.
  bool meets_constraints(const engine_trial& t) const;
  const engine_options& options() const { return opt_; }
  int running() const;

 private:
  experiment_engine(search_algorithm& s, trial_scheduler& t, engine_options o)
      : search_(s), scheduler_(t), opt_(std::move(o)) {}
  void sweep_paused_to_stop();
  std::vector<engine_action> stop_for_value(const std::string& id, engine_trial& t, const std::string& shown);
  std::string next_id();
  engine_action start_action(engine_trial& t);
  void set_state(engine_trial& t, trial_state s);
  void complete_search(const std::string& id, const engine_trial& t);
  void record_others(const std::string& id, int64_t iteration, const std::vector<std::optional<double>>& others);
  std::string first_unreported(const engine_trial& t) const;

  search_algorithm& search_;
  trial_scheduler& scheduler_;
  engine_options opt_;
  std::map<std::string, engine_trial> trials_;
  std::map<std::string, engine_action::kind> asked_;  // trials we asked to stop or pause
  std::map<std::string, std::pair<config, std::string>> exploits_;  // new config, donor
  std::set<std::string> resume_after_pause_, stop_after_pause_;  // decided while still pausing
  int counter_ = 0;
  int running_ = 0;  // trials in state running
  double now_ = 0;  // the latest step's time
  bool search_done_ = false, over_budget_ = false, done_ = false;
};

}  // namespace tune
