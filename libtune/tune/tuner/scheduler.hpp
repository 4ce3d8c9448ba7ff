// Trial schedulers: decide, from the results trials report, which trials go on, which
// stop early and which pause (and later resume). Pure C++: no CAF, no CUDA.
//
// The controller talks to every scheduler through `trial_scheduler` alone (a virtual
// interface; `make_scheduler` builds one from a `scheduler_spec`, a variant of the
// option structs below). The protocol, for one experiment:
//
//   on_trial_add(id, config)          a trial is created (before it reports anything)
//   on_result(id, iteration, value)   each reported result; iteration = training
//                                     iterations (epochs) done so far, value = the metric
//     -> verdict{action, exploit}     go_on, stop (end it now) or pause (end its worker,
//                                     keep its checkpoint; it will be resumed or stopped
//                                     later). PBT: `exploit` set, action == pause: copy
//                                     the donor's latest checkpoint into the trial, set its
//                                     config to new_config; it is then first in line to
//                                     resume.
//   on_trial_complete(id)             the trial ended by itself (its own last epoch)
//   on_trial_error(id)                the trial failed
//   on_no_more_trials()               the search algorithm will add no more trials
//                                     (synchronous HyperBand then stops waiting for a
//                                     bracket to fill)
//   choose_trial_to_resume()          a paused trial to resume now, if any: the controller
//                                     asks whenever it has room for a trial, before
//                                     starting a new one; the trial is running again
//   take_paused_to_stop()             paused trials the scheduler has ended: the controller
//                                     asks after every call above and marks them stopped
//
// Ids are checked: adding a known id is `already_exists`, an unknown one `not_found`, a
// non-finite value `invalid_argument` (the controller should then report the trial as
// errored), a result from a trial that was stopped or ended `invalid_argument`. A result
// from a trial the scheduler holds paused (one in flight while pausing) is answered
// `pause` and not recorded. on_trial_complete / on_trial_error on a trial the scheduler
// already stopped are accepted and change nothing.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tune/core/status.hpp"
#include "tune/tuner/common.hpp"

namespace tune {

// PBT's exploit/explore instruction for the controller.
struct exploit_instruction {
  std::string trial;            // A: the trial that exploits
  std::string donor;            // B: copy B's latest checkpoint into A
  int64_t donor_iteration = 0;  // the iteration of B's result that triggered it (its
                                // checkpoint should be at least that recent)
  config new_config;            // A continues from that checkpoint with this config
  // The mutations (their keys) to draw anew with the user's functions, where hooks run
  // (tune/tuner/hooks.hpp): new_config keeps the donor's value there until they answer.
  std::vector<std::string> resample{};
};

// A scheduler's answer to one result.
struct verdict {
  decision action = decision::go_on;
  std::optional<exploit_instruction> exploit;  // PBT only; then action == pause
};

class trial_scheduler {
 public:
  trial_scheduler(std::string metric, mode m) : metric_(std::move(metric)), mode_(m) {}
  virtual ~trial_scheduler() = default;
  trial_scheduler(const trial_scheduler&) = delete;
  trial_scheduler& operator=(const trial_scheduler&) = delete;

  virtual const char* name() const = 0;
  const std::string& metric() const { return metric_; }
  mode metric_mode() const { return mode_; }

  status on_trial_add(const std::string& id, const config& cfg);
  expected<verdict> on_result(const std::string& id, int64_t iteration, double value);
  // Several objectives: `others` the values of the objectives after the metric in this
  // result (their directions set_other_objectives'; ASHA and HyperBand rank by
  // non-dominated fronts, the others use the metric alone). Empty or the wrong size: the metric alone.
  expected<verdict> on_result(const std::string& id, int64_t iteration, double value,
                              const std::vector<double>& others);
  void set_other_objectives(std::vector<mode> directions) { other_directions_ = std::move(directions); }
  status on_trial_complete(const std::string& id);
  status on_trial_error(const std::string& id);
  void on_no_more_trials();
  std::optional<std::string> choose_trial_to_resume();
  std::vector<std::string> take_paused_to_stop();
  // The trial's configuration changed outside the scheduler (PBT's explore finished by
  // the hooks): a scheduler that keeps configurations takes the new one.
  virtual void update_config(const std::string& id, const config& cfg) { (void)id, (void)cfg; }

  enum class trial_state { running, paused, ended };
  // The scheduler's view of a trial (not_found when unknown).
  expected<trial_state> state_of(const std::string& id) const;

 protected:
  // Hooks. Ids are checked before a hook runs; `value` is finite.
  virtual status do_add(const std::string& id, const config& cfg) = 0;
  virtual verdict do_result(const std::string& id, int64_t iteration, double value) = 0;
  virtual void do_end(const std::string& id, bool errored) = 0;  // complete or error
  virtual void do_no_more_trials() {}

  // For schedulers that pause: put a paused trial in line to resume, or end it.
  void queue_resume(const std::string& id);
  void queue_stop(const std::string& id);
  // Value as a score to maximise (negated for mode::min).
  double score(double value) const { return mode_ == mode::max ? value : -value; }
  // During do_result: the other objectives' values as losses (lower is better), or
  // empty when there are none.
  const std::vector<double>& other_losses() const { return other_losses_; }

 private:
  // Completion or error: ends a known trial once; ending it again changes nothing.
  status end(const std::string& id, bool errored);

  std::string metric_;
  mode mode_;
  std::vector<mode> other_directions_;
  std::vector<double> other_losses_;
  std::unordered_map<std::string, trial_state> states_;
  std::deque<std::string> resume_;
  std::vector<std::string> stop_;
};

// ---- Options (validated by the factories) ----

// Never stops anything.
struct fifo {};

// Asynchronous successive halving (Li et al. 2018; Ray's AsyncHyperBandScheduler).
// Bracket s (0 <= s < brackets) has rungs at grace_period * eta^(k+s) < max_t, k >= 0.
// Trials join brackets round-robin in the order they are added. When a trial's iteration
// first reaches a rung (the highest rung <= iteration it has not been recorded at), its
// value is recorded there and, with m values recorded at that rung so far (its own
// included) and k = max(1, floor(m / eta)), it goes on iff fewer than k of the other
// values are strictly better (it is among the top k; ties go on). A trial whose
// iteration reaches max_t stops. Values of trials that stop or fail stay recorded.
// With several objectives (MO-ASHA, Schmucker et al. 2021) the values are points: the
// k kept are whole non-dominated fronts, the front that does not fit by greedy
// hypervolume contribution, and the trial goes on iff it is among them.
struct asha {
  int64_t max_t = 100;
  int64_t grace_period = 1;
  int64_t reduction_factor = 4;
  int64_t brackets = 1;
};

// Synchronous HyperBand (Li et al. 2017) with pause and resume. R = max_t, eta =
// reduction_factor, s_max = the largest s with eta^s <= R, B = (s_max + 1) R. Bracket s
// (s = s_max down to s_max - brackets + 1; brackets = 0: all s_max + 1 of them) takes
// n = ceil(B / R * eta^s / (s + 1)) trials; rung i (0 <= i <= s) runs them to
// r_i = round(R * eta^(i - s)) iterations (at least 1; the last one is R). Trials fill
// brackets in order, then a new round of brackets starts. A trial that reaches its
// rung pauses; when every live trial of the rung has reached it (and the bracket is
// full, or on_no_more_trials was called), the best max(1, floor(m / eta)) of the m that
// reached it go on (the last to report continues directly, paused ones are queued to
// resume) and the rest stop. A trial reaching the last rung (R) stops. A trial that
// fails or completes leaves its rung (it is neither waited for nor promoted).
struct hyperband {
  int64_t max_t = 81;
  int64_t reduction_factor = 3;
  int64_t brackets = 0;
};

// Median stopping rule (Golovin et al. 2017), Ray's MedianStoppingRule definition. At a
// result at iteration t >= grace_period: let O be the other trials whose latest result is
// at iteration >= t and that have a result in [grace_period, t]; if |O| <
// min_samples_required, go on. Otherwise the median (middle value, mean of the two
// middle ones) of their running means (mean of their results at iterations in
// [grace_period, t]) is compared with this trial's best result so far (all its
// results); the trial stops iff t > grace_period and its best is strictly worse than the
// median. Results of stopped and completed trials count; failed trials' are dropped.
struct median_stopping {
  int64_t grace_period = 1;
  int64_t min_samples_required = 3;
};

// One hyperparameter PBT may change. `key`: a top-level key, or a JSON pointer
// ("/opt/lr") for a nested one. Either `options` (a list: resample uniformly, or move to
// an adjacent entry) or a numeric range [low, high] (resample uniform or log-uniform,
// or multiply the current value by one of the perturbation factors; an integer value
// stays an integer, truncated, as in Ray; the result is not clamped).
struct mutation {
  std::string key;
  std::vector<nlohmann::json> options{};
  double low = 0, high = 0;
  bool log = false;
  bool integer = false;
  // Or drawn by a function of the user's (Ray's lambda in hyperparam_mutations), which
  // runs where hooks run (tune/tuner/hooks.hpp): a resample is left to it, a perturbation
  // multiplies the value by a factor (rounded for an integer, as Ray's). `sample` is a
  // C++ tuning script's; `by_hooks` says the hooks' host has the function (the Python
  // driver's lambda).
  std::function<nlohmann::json()> sample{};
  bool by_hooks = false;
  bool drawn_by_function() const { return by_hooks || static_cast<bool>(sample); }
};

// Population based training (Jaderberg et al. 2017; Ray's PopulationBasedTraining,
// asynchronous). See docs/tuner.md for the exact rule and the order of random draws.
struct pbt {
  int64_t perturbation_interval = 10;
  int64_t burn_in_period = 0;
  double quantile_fraction = 0.25;
  double resample_probability = 0.25;
  std::vector<double> perturbation_factors{1.2, 0.8};
  std::vector<mutation> hyperparameter_mutations;
  uint64_t seed = 0;
  // Ray's custom_explore_fn: applied to every new configuration after the mutations,
  // where hooks run; `explore_by_hooks`: the hooks' host has it (the Python driver's).
  std::function<config(const config&)> custom_explore{};
  bool explore_by_hooks = false;
  // Whether the hooks finish each explore (a function among the mutations, or a custom
  // explore).
  bool explores_by_hooks() const {
    if (explore_by_hooks || custom_explore) return true;
    for (auto& m : hyperparameter_mutations)
      if (m.drawn_by_function()) return true;
    return false;
  }
};

// Or a scheduler of the user's own (tune/tuner/hooks.hpp), which decides where hooks run:
// the engine's own is then FIFO.
class user_scheduler;
using scheduler_spec = std::variant<fifo, asha, hyperband, median_stopping, pbt, std::shared_ptr<user_scheduler>>;

expected<std::unique_ptr<trial_scheduler>> make_scheduler(const scheduler_spec& spec,
                                                          std::string metric, mode m);

// The milestones of ASHA's bracket `s` (validated options).
std::vector<int64_t> asha_rungs(const asha& o, int64_t s);

// HyperBand's plan: per bracket s (s_max first), per rung (n_i trials, r_i iterations).
struct hyperband_rung {
  int64_t n = 0;
  int64_t r = 0;
};
struct hyperband_bracket {
  int64_t s = 0;
  std::vector<hyperband_rung> rungs;
};
expected<std::vector<hyperband_bracket>> hyperband_plan(const hyperband& o);

}  // namespace tune
