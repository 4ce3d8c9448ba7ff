// Stoppers: when a trial, or the whole experiment, stops on what the trials report
// (Ray Tune's ray.tune.stopper). libtune's own rules are data (the specs below), decided
// in the engine at each result with no user code involved; a stopper of the user's own
// (a C++ tune::stopper, a Python Stopper or function) is user code and runs where hooks
// run (tune/tuner/hooks.hpp). Pure: no CAF, no I/O.
//
//   maximum_iteration_stopper{10}        a trial stops at its 10th result
//   trial_plateau_stopper{"loss"}        a trial stops once its last num_results values of
//                                        loss vary less than `std` (after grace_period)
//   experiment_plateau_stopper{"loss"}   every trial stops once the `top` best values of
//                                        loss over all results vary less than `std`,
//                                        `patience` results in a row
//   timeout_stopper{3600}                every trial stops an hour after the start
//   metric_at_least{"acc", 0.98}         a trial stops once it reports acc >= 0.98 (Ray's
//                                        stop={"acc": 0.98}, whatever the mode)
//
// Each is Ray's rule (its docstring's words), decided the same way: counts are of the
// results a trial reported, standard deviations are the population's (numpy.std).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/status.hpp"
#include "tune/tuner/common.hpp"

namespace tune {

struct maximum_iteration_stopper {
  int64_t max_iter = 1;  // >= 1
};
struct trial_plateau_stopper {
  std::string metric;
  double std = 0.01;                       // > 0
  int64_t num_results = 4;                 // >= 1
  int64_t grace_period = 4;                // >= 0
  std::optional<double> metric_threshold;  // stopped only beyond it (needs a mode)
  std::optional<tune::mode> mode;
};
struct experiment_plateau_stopper {
  std::string metric;
  double std = 0.001;       // > 0
  int64_t top = 10;         // >= 2
  tune::mode mode = tune::mode::min;
  int64_t patience = 0;     // >= 0
};
struct timeout_stopper {
  double timeout_s = 0;  // > 0, from the experiment's start
};
struct metric_at_least {
  std::string metric;
  double value = 0;
};

// A stopper of the user's own: called for each result of each trial (true: that trial
// stops) and, after it, stop_all (true: every trial stops, nothing more starts). It
// runs on libtune's hook thread (tune/tuner/hooks.hpp), one call at a time.
class stopper {
 public:
  virtual ~stopper() = default;
  virtual bool operator()(const std::string& trial_id, const nlohmann::json& result) = 0;
  virtual bool stop_all() { return false; }
  virtual std::string name() const { return "stopper"; }
};

using stopper_spec = std::variant<maximum_iteration_stopper, trial_plateau_stopper, experiment_plateau_stopper,
                                  timeout_stopper, metric_at_least, std::shared_ptr<stopper>>;

// The spec is well formed (each number in its range, a metric named, a user stopper not
// null); the error names the stopper, the option and what to give.
status check_stopper(const stopper_spec& s);
// Its name as the store and messages say it ("trial_plateau(loss)").
std::string describe(const stopper_spec& s);

// The native rules of an experiment (the specs that are not user code), with their
// state. The engine asks them at every result and at every step.
class stop_rules {
 public:
  stop_rules() = default;
  static expected<stop_rules> make(const std::vector<stopper_spec>& specs);
  bool empty() const { return rules_.empty(); }
  // The metrics they read, in the order on_result takes their values.
  const std::vector<std::string>& metrics() const { return metrics_; }
  // A result of `trial` (its values of metrics(): nullopt where absent or not finite):
  // why it stops (empty: it goes on). When an experiment rule fired, stop_all says so
  // from then on.
  std::string on_result(const std::string& trial, const std::vector<std::optional<double>>& values);
  // Why the whole experiment stops now, `now_s` after its start (empty: it goes on).
  std::string stop_all(double now_s) const;

 private:
  struct rule {
    stopper_spec spec;
    std::vector<size_t> columns;  // into metrics()
    std::map<std::string, int64_t> counts;
    std::map<std::string, std::deque<double>> windows;
    std::vector<double> top;
    int64_t plateaued = 0;
    bool fired = false;
  };
  std::vector<rule> rules_;
  std::vector<std::string> metrics_;
  std::string fired_;  // an experiment rule's reason, once it fired
};

// The user's own stoppers among the specs (what the hook host runs).
std::vector<std::shared_ptr<stopper>> user_stoppers(const std::vector<stopper_spec>& specs);

}  // namespace tune
