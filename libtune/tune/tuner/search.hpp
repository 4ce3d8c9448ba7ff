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
// points_to_evaluate: configs (whole or in part: the missing parameters are drawn)
// that the first trials run, before anything is drawn; they count toward the trials
// (for random search they take the first slots of the grid × num_samples, and there
// are at least as many trials as points). Checked when the algorithm is made.
struct random_search_options {
  int num_samples = 1;  // >= 1
  std::uint64_t seed = 0;
  std::vector<config> points_to_evaluate = {};
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

// TPE, the Tree-structured Parzen Estimator (Bergstra et al. 2011), multivariate by
// default as Optuna's since 5.0 (tpe.cpp has the details):
//  - the first n_startup_trials configs are random (grid_search domains act as
//    choices; TPE does not expand grids);
//  - then the completed trials are sorted by their value and the best
//    min(ceil(gamma · n), max_below) form the "good" set, the rest the "bad" set;
//  - a Parzen estimator l is fitted to the good trials and g to the bad ones: a
//    mixture with a component per trial (recent trials weighted more once there are
//    over 25) plus a prior component. A component's kernel for a numeric parameter is
//    a Gaussian truncated to the range (in log space for log domains; integers and
//    quantized domains widened by half a step and snapped) at the trial's value, its
//    width from the distances between neighbouring values; for a choice it favours
//    the trial's option; where its trial did not have the parameter (another option
//    of a choice, a conditional's other branch) it is the prior's (wide, or uniform);
//  - multivariate: n_ei_candidates whole configs are drawn from l (each from one
//    component, so the parameters move together) and the one with the largest joint
//    l(x)/g(x) is taken; multivariate = false: each parameter on its own, from l's
//    marginal at that parameter, by the marginals' ratio (Hyperopt's and Optuna's
//    independent TPE).
//  Trials still running count, with constant_liar, as the worst value so far (they join
//  the "bad" set, as Optuna's constant_liar): configs suggested while others run
//  spread out instead of crowding where the good ones are. Never waits. num_samples 0 =
//  no limit.
struct tpe_options {
  mode metric_mode = mode::min;
  int num_samples = 0;
  int n_startup_trials = 10;
  int n_ei_candidates = 24;
  double gamma = 0.1;
  int max_below = 25;
  double prior_weight = 1.0;
  bool constant_liar = true;
  bool multivariate = true;
  std::uint64_t seed = 0;
  // Run first, as random search's; they count toward num_samples and, once complete,
  // toward n_startup_trials.
  std::vector<config> points_to_evaluate = {};
};

// Each point is one the space could produce (unknown names, values outside their
// domain: an error naming "<who>: points_to_evaluate[i]" and the parameter).
status check_points(const search_space& space, const std::vector<config>& points, const std::string& who);
expected<std::unique_ptr<search_algorithm>> make_tpe(search_space space, tpe_options opts = {});

// GP-based Bayesian optimisation, for small budgets (tens to a few hundred trials) on
// spaces of numeric parameters and choices of values (gp.cpp has the details):
//  - the first n_startup_trials configs are random (as random search's for the seed);
//  - then a Gaussian process (Matérn 5/2, a length scale per parameter, fitted by
//    maximizing the marginal likelihood under weak priors) models the losses over the
//    space's unit cube (numeric parameters in their internal coordinates — log for log
//    domains —, choices and grids one-hot), and the next config maximizes the log
//    expected improvement (n_candidates random points and perturbations of the best,
//    the best n_local refined by a local optimizer);
//  - trials still running count, with fantasize_pending, as observed at the GP's own
//    mean (the "kriging believer"), so configs suggested side by side spread out.
//  A choice of sub-spaces, a choice of domains or a conditional is an error naming the
//  parameter (the GP needs the same parameters in every config: use tpe there).
//  Same seed, same configs (on one platform: the model's floating point is not pinned
//  across compilers and CPUs as the samplers' random numbers are). num_samples 0 = no
//  limit. Never waits.
struct gp_options {
  mode metric_mode = mode::min;
  int num_samples = 0;
  int n_startup_trials = 10;
  int n_candidates = 2000;
  int n_local = 5;
  bool fantasize_pending = true;
  std::uint64_t seed = 0;
  std::vector<config> points_to_evaluate = {};
};
expected<std::unique_ptr<search_algorithm>> make_gp(search_space space, gp_options opts = {});

}  // namespace tune
