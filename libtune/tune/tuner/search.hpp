// Search algorithms: which configuration the next trial tries. Pure: no CAF, no CUDA.
//
// The controller drives every algorithm through `search_algorithm` alone:
//
//   suggest(id)                  a config for the new trial `id`, or nullopt: either the
//                                algorithm is finished() (no more trials, ever) or it
//                                must wait for results before it can suggest more
//   on_result(id, iteration, v)  an intermediate result of the trial's metric
//   on_complete(id, v)           the trial ended; v its final metric value, or nullopt:
//                                then its last on_result value counts, and a trial with
//                                neither (it failed before reporting) is forgotten
//
// Ids are checked: suggesting for a known id is `already_exists`; results for an id
// never suggested are `not_found`; a non-finite value is `invalid_argument`; a result
// after on_complete is `invalid_argument`. Every algorithm is reproducible: the same
// seed and the same calls give the same configs on every platform.
//
// Adding an algorithm: derive from search_algorithm, implement next_config (return
// nullopt and make finished() true when done), name(), and, if it learns, observe()
// (called once per trial with its final value) and/or observe_result(). To reuse the
// space's walk (nesting, choices of sub-spaces, conditionals, grid points) and only
// decide how each value is drawn, derive from param_sampler (space.hpp) and pass it to
// search_space::sample, as TPE does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tune/core/status.hpp"
#include "tune/tuner/common.hpp"
#include "tune/tuner/space.hpp"

namespace tune {

class search_algorithm {
 public:
  explicit search_algorithm(mode m) : mode_(m) {}
  virtual ~search_algorithm() = default;
  search_algorithm(const search_algorithm&) = delete;
  search_algorithm& operator=(const search_algorithm&) = delete;

  expected<std::optional<config>> suggest(const std::string& trial_id);
  status on_result(const std::string& trial_id, std::int64_t iteration, double value);
  status on_complete(const std::string& trial_id, std::optional<double> value = std::nullopt);

  // No config will ever come again.
  virtual bool finished() const = 0;
  virtual std::string name() const = 0;
  mode metric_mode() const { return mode_; }

 protected:
  virtual expected<std::optional<config>> next_config(const std::string& trial_id) = 0;
  // The trial ended; `value` its final metric, nullopt when it failed without one.
  virtual void observe(const std::string& trial_id, std::optional<double> value) {
    (void)trial_id, (void)value;
  }
  virtual void observe_result(const std::string& trial_id, std::int64_t iteration, double value) {
    (void)trial_id, (void)iteration, (void)value;
  }

 private:
  struct trial_state {
    bool done = false;
    std::optional<double> last;
  };
  mode mode_;
  std::unordered_map<std::string, trial_state> trials_;
};

// Random search, Ray Tune's BasicVariantGenerator: every combination of the
// grid_search values, num_samples times (the grid varies fastest: with a grid of G
// points, trials 0..G-1 are the first repeat), the random domains drawn anew for each
// trial. Finished after G × num_samples configs. Never waits.
struct random_search_options {
  int num_samples = 1;  // >= 1
  std::uint64_t seed = 0;
};
expected<std::unique_ptr<search_algorithm>> make_random_search(search_space space,
                                                               random_search_options opts = {});

// Grid search: random search over a space of grid_search and constant domains only
// (anything random is an error that names the parameter). num_samples repeats the grid.
struct grid_search_options {
  int num_samples = 1;  // >= 1
};
expected<std::unique_ptr<search_algorithm>> make_grid_search(search_space space,
                                                             grid_search_options opts = {});

// TPE, the Tree-structured Parzen Estimator (Bergstra et al. 2011), univariate as in
// Optuna's and Hyperopt's defaults:
//  - the first n_startup_trials configs are random (grid_search domains act as
//    choices; TPE does not expand grids);
//  - then the completed trials are sorted by their value and the best
//    min(ceil(gamma · n), max_below) form the "good" set, the rest the "bad" set;
//  - for each parameter, independently, a Parzen estimator l(x) is fitted to the good
//    trials' values and g(x) to the bad ones': numeric domains a mixture of Gaussians
//    truncated to the range (in log space for log domains; integers and quantized
//    domains widened by half a step and snapped), one per observation plus a prior
//    (wide Gaussian at the centre), bandwidths from the distances between
//    neighbours, recent trials weighted more once there are over 25; choices a
//    categorical distribution with counts plus prior_weight spread over the options;
//  - n_ei_candidates values are drawn from l and the one with the largest
//    l(x)/g(x) is taken.
//  Parameters that a trial did not have (another option of a choice, a conditional's
//  other branch) are not part of that parameter's observations. Trials still running
//  count, with constant_liar, as the worst value so far (they join the "bad" set, as
//  Optuna's constant_liar): configs suggested while others run spread out instead of
//  crowding where the good ones are. Never waits. num_samples 0 = no limit.
struct tpe_options {
  mode metric_mode = mode::min;
  int num_samples = 0;
  int n_startup_trials = 10;
  int n_ei_candidates = 24;
  double gamma = 0.1;
  int max_below = 25;
  double prior_weight = 1.0;
  bool constant_liar = true;
  std::uint64_t seed = 0;
};
expected<std::unique_ptr<search_algorithm>> make_tpe(search_space space, tpe_options opts = {});

}  // namespace tune
