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
//   on_complete(id, vs, cs)      the same with several objectives (vs, in the order of
//                                directions()) and constraints (cs: feasible when every
//                                one is <= 0; as many for every trial)
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
  explicit search_algorithm(mode m) : mode_(m), directions_{m} {}
  // Several objectives: their directions (the first is metric_mode()).
  explicit search_algorithm(std::vector<mode> directions)
      : mode_(directions.empty() ? mode::min : directions.front()), directions_(std::move(directions)) {}
  virtual ~search_algorithm() = default;
  search_algorithm(const search_algorithm&) = delete;
  search_algorithm& operator=(const search_algorithm&) = delete;

  expected<std::optional<config>> suggest(const std::string& trial_id);
  status on_result(const std::string& trial_id, std::int64_t iteration, double value);
  status on_complete(const std::string& trial_id, std::optional<double> value = std::nullopt);
  status on_complete(const std::string& trial_id, const std::vector<double>& values,
                     const std::vector<double>& constraints);

  // No config will ever come again.
  virtual bool finished() const = 0;
  virtual std::string name() const = 0;
  mode metric_mode() const { return mode_; }
  const std::vector<mode>& directions() const { return directions_; }

 protected:
  virtual expected<std::optional<config>> next_config(const std::string& trial_id) = 0;
  // The trial ended; `value` its final metric, nullopt when it failed without one.
  virtual void observe(const std::string& trial_id, std::optional<double> value) {
    (void)trial_id, (void)value;
  }
  virtual void observe_result(const std::string& trial_id, std::int64_t iteration, double value) {
    (void)trial_id, (void)iteration, (void)value;
  }
  // The trial ended with these values and constraints (checked: one value per
  // objective, finite, as many constraints as the trials before). The default passes
  // the first objective to observe(); an algorithm that cannot use constraints says so
  // in accepts_constraints().
  virtual void observe_outcome(const std::string& trial_id, const std::vector<double>& values,
                               const std::vector<double>& constraints) {
    (void)constraints;
    observe(trial_id, values.front());
  }
  virtual status accepts_constraints() const { return status::ok(); }
  // Whether the values matter (random and grid search take any number of them).
  virtual bool learns() const { return true; }

 private:
  struct trial_state {
    bool done = false;
    std::optional<double> last;
  };
  // The trial's bookkeeping, or why it cannot be completed (unknown, or completed).
  expected<trial_state*> open_trial(const std::string& trial_id);
  mode mode_;
  std::vector<mode> directions_;
  std::unordered_map<std::string, trial_state> trials_;
  std::optional<std::size_t> constraints_;  // how many, once the first trial gave them
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
// default for one objective as Optuna's since 5.0 (tpe.cpp has the details):
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
//  Several objectives (directions, MOTPE, Ozaki et al. 2020): the good set is filled
//  with whole non-dominated fronts, the front that does not fit by the greedy
//  hypervolume subset (ceil(gamma · n) trials, no max_below). Constraints (Optuna's
//  constrained TPE): feasible trials come first; infeasible ones only fill the good set
//  when too few are feasible, least violation (sum of the positive constraint values)
//  first.
struct tpe_options {
  mode metric_mode = mode::min;
  int num_samples = 0;
  int n_startup_trials = 10;
  int n_ei_candidates = 24;
  double gamma = 0.1;
  int max_below = 25;
  double prior_weight = 1.0;
  bool constant_liar = true;
  // Joint (true) or per-parameter (false) model; unset: joint with one objective,
  // per parameter with several (as Optuna 5.0; measured on ZDT1 and DTLZ2, 200
  // evaluations, 10 seeds: hypervolume 9.60 / 7.94 per parameter, 9.52 / 7.60 joint).
  std::optional<bool> multivariate = std::nullopt;
  std::uint64_t seed = 0;
  // Several objectives: their directions (then metric_mode is not used); empty: one.
  std::vector<mode> directions = {};
  // Run first, as random search's; they count toward num_samples and, once complete,
  // toward n_startup_trials.
  std::vector<config> points_to_evaluate = {};
};

// Each point is one the space could produce (unknown names, values outside their
// domain: an error naming "<who>: points_to_evaluate[i]" and the parameter).
status check_points(const search_space& space, const std::vector<config>& points, const std::string& who);
expected<std::unique_ptr<search_algorithm>> make_tpe(search_space space, tpe_options opts = {});

// BOHB (Falkner et al. 2018): TPE models fitted on the values trials reported at each
// budget (iteration), for HyperBand's (or ASHA's) early-stopped trials: with
// probability random_fraction a config is random, otherwise multivariate TPE fitted on
// the largest budget that at least min_points_in_model trials reached (0: the number of
// parameters + 1), the best gamma of them the good set. Random until then. Pair it
// with scheduler = hyperband{} (search = bohb{} in an experiment file); with FIFO it is
// TPE on the last iteration.
struct bohb_options {
  mode metric_mode = mode::min;
  int num_samples = 0;
  double random_fraction = 1.0 / 3;
  int min_points_in_model = 0;
  double gamma = 0.15;
  int n_ei_candidates = 64;
  std::uint64_t seed = 0;
  std::vector<config> points_to_evaluate = {};
};
expected<std::unique_ptr<search_algorithm>> make_bohb(search_space space, bohb_options opts = {});

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
//  parameter (the GP needs the same parameters in every config: use tpe there). Past
//  max_fit_trials completed trials it is fitted on a subset (the best and the latest).
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
  // Past this many completed trials the GP is fitted on the best half and the most
  // recent half of this many (a fit's cost grows with the cube of their number).
  int max_fit_trials = 400;
  std::uint64_t seed = 0;
  std::vector<config> points_to_evaluate = {};
};
expected<std::unique_ptr<search_algorithm>> make_gp(search_space space, gp_options opts = {});

}  // namespace tune
