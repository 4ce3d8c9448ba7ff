// The experiment engine: the controller's decisions, apart from actors and processes
// (so they are tested step by step). It holds one experiment's trials and asks the
// search algorithm for configurations and the trial scheduler for verdicts; it answers
// every event with the actions the controller must take:
//
//   start       run trial `trial` with `cfg` (new, or resumed: then from the latest
//               checkpoint of trial `restore_from`, itself or PBT's donor), with its own
//               resources when it has them (`request`)
//   stop        end the trial (early stopping, a stop criterion, the time budget); its
//               results so far count
//   pause       end the trial's process but keep it: it will be started again
//   checkpoint  ask the running trial for a checkpoint now (a callback's should_checkpoint)
// and, with hooks (tune/tuner/hooks.hpp), what to ask of them (their answers come back
// through on_suggestion, on_prepared, on_explored):
//   suggest     a configuration for the new trial `trial` (the searcher is theirs)
//   prepare     `cfg`'s final form and the trial's resources (resources_fn, sample_from)
//   explore     PBT's new configuration for `trial` (from donor `restore_from`):
//               `cfg` with the mutations at `resample` drawn there, then their explore
//
// The controller reports back: on_result for each result, on_checkpoint for each
// checkpoint, on_ended when the trial's process ended (for whatever reason), and the
// hooks' decisions (on_decision, on_resume, stop_all). Pausing is done by ending the
// process (its GPU memory is freed) and starting again from a checkpoint, never by
// SIGSTOP. A trial being asked for or prepared counts toward max_concurrent.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/placement.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/tuner/common.hpp"
#include "tune/tuner/scheduler.hpp"
#include "tune/tuner/search.hpp"
#include "tune/tuner/stoppers.hpp"
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
  // libtune's own stop rules (tune/tuner/stoppers.hpp; a user stopper among them is left
  // to the hooks): asked at every result, and at every step for the whole experiment.
  std::vector<stopper_spec> stoppers;
  // The hooks' part (tune/tuner/hooks.hpp): the searcher is theirs (suggest actions, then
  // on_suggestion; at most max_suggestions configurations, 0: until it says it is
  // finished); each new configuration goes through them first (prepare, on_prepared);
  // PBT's explore is finished there (explore, on_explored).
  bool hooks_suggest = false;
  int max_suggestions = 0;
  bool hooks_prepare = false;
  bool hooks_explore = false;
  // hooks_suggest: what makes a searcher's configuration the trial's (the space's
  // constants added, its values checked against their domains); an error names why not.
  std::function<expected<config>(const config&)> accept_suggestion;
  // A searcher that answers "not now" this long while nothing runs or is asked for will
  // never suggest again: the experiment ends with that error.
  double suggest_patience_s = 60;
  double suggest_retry_s = 0.5;  // after "not now", asked again this often (or when a trial ends)
};

// A trial's own resources (the hooks' resources_fn): its bundles and their strategy.
struct trial_resources {
  std::vector<resource_set> bundles;
  tune::strategy strat = tune::strategy::pack;
};

struct engine_action {
  enum class kind { start, stop, pause, checkpoint, suggest, prepare, explore };
  kind what = kind::start;
  std::string trial;
  config cfg;                // start: the configuration (prepare, explore: so far)
  std::string restore_from;  // start: whose latest checkpoint to start from; empty: afresh
                             // (explore: the donor)
  int64_t restore_iteration = -1;  // that checkpoint's iteration (-1: none)
  std::string reason;        // stop: why (early stopping, criterion, budget)
  std::optional<trial_resources> request;  // start: its own resources (none: the experiment's)
  std::vector<std::string> resample;     // explore: the mutations the hooks draw
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
  std::optional<trial_resources> request;  // its own resources (the hooks'); none: the experiment's
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
  // A trial that ended well fails after all (none of the checkpoints it was asked for
  // could be stored): false when it had not ended well.
  bool fail_ended(const std::string& id, const std::string& error);

  // The hooks' answers. A configuration for the trial asked for (nullopt: not now; with
  // `finished`: never again): an error when the searcher's configuration is not one
  // the space allows (accept_suggestion says why) or the trial was not asked for.
  expected<std::vector<engine_action>> on_suggestion(const std::string& id, std::optional<config> cfg,
                                                     bool finished = false);
  // A prepared trial: its final configuration and its own resources, or why it cannot
  // run (then it ends in error before it starts: the resources it asked for are not
  // valid).
  expected<std::vector<engine_action>> on_prepared(const std::string& id, config cfg,
                                                   expected<std::optional<trial_resources>> request);
  expected<std::vector<engine_action>> on_explored(const std::string& id, config cfg);
  // A hook's decision for a running trial: stop, pause or checkpoint (a decision about a
  // trial that has moved on meanwhile changes nothing).
  expected<std::vector<engine_action>> on_decision(const std::string& id, engine_action::kind what,
                                                   const std::string& reason);
  // A paused trial to run again (the hooks' scheduler): started when there is room.
  expected<std::vector<engine_action>> on_resume(const std::string& id);
  // Every trial stops, nothing more starts (a stopper's stop_all): as the time budget.
  std::vector<engine_action> stop_all(const std::string& reason);
  // The metrics a result's caller passes after the metric to on_metric, in this order:
  // other_objectives, constraints, then what the stop rules read.
  const std::vector<std::string>& watched() const { return watched_; }
  // Whether a result of the trial at this iteration is one it reported before its
  // restart (recorded, not counted again), or comes too late to count.
  bool counts(const std::string& id, int64_t iteration) const;
  // Why the experiment was stopped as a whole (its time budget, a stopper's stop_all);
  // empty while it was not.
  const std::string& stopped_because() const { return stop_reason_; }

  // Trials running at once from the next step on (at least 1): auto-packing raises it
  // once the share is known. Running trials above it are not stopped.
  void set_max_concurrent(int n) { opt_.max_concurrent = n < 1 ? 1 : n; }
  // Nothing runs and nothing more will start.
  bool finished() const;
  const std::map<std::string, engine_trial>& trials() const { return trials_; }
  // A trial whose configuration the hooks are still preparing (sample_from not drawn yet).
  bool preparing(const std::string& id) const { return preparing_.count(id) > 0; }
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
  std::string id_of(int n) const;
  status learn_result(const std::string& id, int64_t iteration, double v);
  void learn_complete(const std::string& id);
  status learn_complete(const std::string& id, const std::vector<double>& values, const std::vector<double>& constraints);
  engine_action start_action(engine_trial& t);
  // A configuration for trial `id`: the trial made, then prepared by the hooks or started.
  expected<engine_action> new_trial(const std::string& id, config cfg);
  void ask_hooks(std::vector<engine_action>& out, int& now_running);
  status check_idle_searcher();
  std::vector<engine_action> stop_trial(const std::string& id, engine_trial& t, const std::string& reason);
  void end_unstarted(const std::string& id, engine_trial& t, trial_state s, const std::string& error);
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
  std::set<std::string> asking_, preparing_, exploring_;  // asked of the hooks, not answered yet
  std::set<std::string> unanswered_ids_;   // ids whose ask was answered "not now": asked again first
  std::set<std::string> resume_after_explore_;  // to resume once their explore is answered
  std::deque<std::string> hook_resumes_;   // the hooks' resumes waiting for room
  std::vector<std::string> watched_;
  stop_rules rules_;
  int counter_ = 0;
  int running_ = 0;  // trials in state running
  int suggested_ = 0;  // configurations the hooks' searcher gave
  double now_ = 0;  // the latest step's time
  bool search_done_ = false, over_budget_ = false, done_ = false;
  bool search_waits_ = false;       // its last answer was "not now"
  bool waited_ = false;             // it said "not now" since its last configuration
  double last_wait_at_ = 0;
  std::optional<double> idle_since_;  // nothing runs or is asked for while it waits
  std::string stop_reason_;
};

}  // namespace tune
