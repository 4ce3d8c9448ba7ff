// TPE, the Tree-structured Parzen Estimator (search.hpp says what it does; this file
// how). Two Parzen estimators, l over the good trials and g over the rest (and the
// pending ones, with the constant liar), each a mixture with one component per trial
// plus a prior component. A component has a kernel for every parameter its trial
// had (a truncated Gaussian in internal coordinates, or a categorical that favours
// the trial's option) and uses the prior's kernel (wide Gaussian at the centre, or
// uniform) for the parameters its trial did not have: another branch of a choice, the
// other side of a conditional. So a component is a distribution over whole configs of
// a tree-structured space, and so are l and g.
//
//  - multivariate (the default, as Optuna's since 5.0): a candidate is drawn whole from
//    one component of l (its kernels at every parameter the walk meets) and scored
//    with the joint densities, log l(x) - log g(x); the parameters move together.
//  - independent: each parameter is drawn from l's marginal at its path (the trials
//    that had it, plus the prior) and scored by the marginals' ratio on its own.
#include "tune/tuner/axis.hpp"
#include "tune/core/pareto.hpp"
#include "tune/tuner/search.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>

namespace tune {
namespace {

using detail::axis;


double log_normal_cdf_diff(double a, double b) {  // log(Phi(b) - Phi(a)), a < b
  const double d = 0.5 * (std::erfc(-b / std::sqrt(2.0)) - std::erfc(-a / std::sqrt(2.0)));
  return std::log(std::max(d, 1e-300));
}

double logsumexp(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) m = std::max(m, x);
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

// Normalized logs of weights (all > 0).
std::vector<double> log_normalized(std::vector<double> w) {
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (auto& x : w) x = std::log(x / total);
  return w;
}

// An index drawn with probabilities exp(logp) (never one of probability 0).
std::size_t draw_index(const std::vector<double>& logp, rng& r) {
  const double u = r.uniform();
  double acc = 0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < logp.size(); ++i) {
    const double p = std::exp(logp[i]);
    if (!(p > 0)) continue;
    acc += p;
    last = i;
    if (u < acc) return i;
  }
  return last;
}

// Recent observations weigh more once there are over 25 (Optuna's default_weights).
std::vector<double> recency_weights(std::size_t n) {
  std::vector<double> w(n, 1.0);
  if (n > 25) {
    const std::size_t ramp = n - 25;
    for (std::size_t i = 0; i < ramp; ++i)
      w[i] = ramp == 1 ? 1.0 / n : 1.0 / n + (1.0 - 1.0 / n) * static_cast<double>(i) / (ramp - 1);
  }
  return w;
}

// Kernel widths from the distances between neighbours: each observation's larger gap
// to a neighbour, the range's ends counting as neighbours except for the outermost
// observations (they take their inner gap), clipped to [range / min(100, n + 2), range]
// (Hyperopt's "magic clip"; the same rule as Optuna's).
std::vector<double> bandwidths(const std::vector<double>& mus, double low, double high) {
  const std::size_t n = mus.size();
  const double range = high - low;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return mus[a] < mus[b]; });
  std::vector<double> sigma(n, range);
  const double mins = range / std::min(100.0, 2.0 + static_cast<double>(n));
  for (std::size_t k = 0; k < n; ++k) {
    const double x = mus[order[k]];
    const double left = k > 0 ? x - mus[order[k - 1]] : x - low;
    const double right = k + 1 < n ? mus[order[k + 1]] - x : high - x;
    double s = std::max(left, right);
    if (n >= 2 && k == 0) s = right;
    if (n >= 2 && k + 1 == n) s = left;
    sigma[order[k]] = std::clamp(s, mins, range);
  }
  return sigma;
}

struct completed_trial {
  trace tr;
  double loss;        // the (first) objective, negated in max mode: lower is better
  std::size_t order;  // completion order, for recency weights
  point losses = {};  // every objective, as loss
  double violation = 0;  // the sum of the positive constraint values: 0 when feasible
};

// One numeric parameter's kernels in one estimator: a truncated Gaussian per trial of
// the estimator that had the parameter, then the prior's (wide, at the centre).
struct numeric_kernels {
  axis ax;
  std::vector<double> mu, sigma, lognorm;  // lognorm: log of the truncated density's constant
  std::vector<std::size_t> of_component;   // the estimator's component -> its kernel here
  std::vector<double> marginal_logw;       // the independent mixture over the kernels

  numeric_kernels(const numeric_spec& s, const std::vector<const completed_trial*>& trials,
                  const param_path& path, double prior_weight)
      : ax(s) {
    std::vector<std::size_t> present;
    for (std::size_t i = 0; i < trials.size(); ++i)
      if (auto it = trials[i]->tr.find(path); it != trials[i]->tr.end() && ax.holds(it->second)) {
        present.push_back(i);
        mu.push_back(ax.internal(it->second.value));
      }
    sigma = bandwidths(mu, ax.low, ax.high);
    mu.push_back(0.5 * (ax.low + ax.high));
    sigma.push_back(ax.high - ax.low);
    of_component.assign(trials.size() + 1, mu.size() - 1);
    for (std::size_t k = 0; k < present.size(); ++k) of_component[present[k]] = k;
    for (std::size_t k = 0; k < mu.size(); ++k)
      lognorm.push_back(ax.degenerate() ? 0.0
                                        : -std::log(sigma[k] * std::sqrt(2 * std::numbers::pi)) -
                                              log_normal_cdf_diff((ax.low - mu[k]) / sigma[k],
                                                                  (ax.high - mu[k]) / sigma[k]));
    auto w = recency_weights(present.size());
    w.push_back(prior_weight);
    marginal_logw = log_normalized(std::move(w));
  }

  double log_pdf(std::size_t k, double x) const {
    if (ax.degenerate()) return 0.0;
    const double z = (x - mu[k]) / sigma[k];
    return lognorm[k] - 0.5 * z * z;
  }
  double marginal_log_pdf(double x) const {
    std::vector<double> terms(mu.size());
    for (std::size_t k = 0; k < mu.size(); ++k) terms[k] = marginal_logw[k] + log_pdf(k, x);
    return logsumexp(terms);
  }
  // A value of the domain from kernel k (its own scale, snapped).
  double sample(std::size_t k, rng& r) const {
    if (ax.degenerate()) return ax.spec.lo;
    for (int tries = 0; tries < 100; ++tries) {
      const double x = mu[k] + sigma[k] * r.normal();
      if (x >= ax.low && x <= ax.high) return ax.external(x);
    }
    return ax.external(std::clamp(mu[k], ax.low, ax.high));
  }
};

// One choice's (or grid's) kernels: per trial that had it, its option is favoured
// (weight 1, plus prior_weight / (trials + 1) spread over all options, as Optuna's, in
// proportion to the choice's weights); the prior's is the choice's weights.
struct choice_kernels {
  std::vector<std::vector<double>> logp;  // kernel -> log probability of each option
  std::vector<std::size_t> of_component;
  std::vector<double> marginal_logp;  // independent: counts (recency-weighted) plus the prior

  choice_kernels(const choice_spec& spec, const std::vector<const completed_trial*>& trials,
                 const param_path& path, double prior_weight) {
    const std::size_t n = spec.n;
    const std::vector<double> prior =
        spec.weights.empty() ? std::vector<double>(n, 1.0 / static_cast<double>(n)) : spec.weights;
    std::vector<std::size_t> present, picked;
    for (std::size_t i = 0; i < trials.size(); ++i)
      if (auto it = trials[i]->tr.find(path); it != trials[i]->tr.end() && it->second.categorical &&
                                              it->second.value >= 0 && it->second.value < n) {
        present.push_back(i);
        picked.push_back(static_cast<std::size_t>(it->second.value));
      }
    const double eps = prior_weight / static_cast<double>(present.size() + 1);
    for (std::size_t c : picked) {
      std::vector<double> w(n);
      for (std::size_t o = 0; o < n; ++o) w[o] = eps * prior[o];
      w[c] += 1;
      logp.push_back(log_normalized(std::move(w)));
    }
    logp.push_back(log_normalized(prior));
    of_component.assign(trials.size() + 1, logp.size() - 1);
    for (std::size_t k = 0; k < present.size(); ++k) of_component[present[k]] = k;
    std::vector<double> counts(n);
    for (std::size_t o = 0; o < n; ++o) counts[o] = prior_weight * prior[o];
    auto rw = recency_weights(picked.size());
    for (std::size_t k = 0; k < picked.size(); ++k) counts[picked[k]] += rw[k];
    marginal_logp = log_normalized(std::move(counts));
  }
};

// A Parzen estimator over a set of trials (in completion order): components per trial
// and the prior, recency-weighted; kernels built per parameter when first asked for.
class parzen_estimator {
 public:
  parzen_estimator(std::vector<const completed_trial*> trials, double prior_weight)
      : trials_(std::move(trials)), prior_weight_(prior_weight) {
    auto w = recency_weights(trials_.size());
    w.push_back(trials_.empty() ? 1.0 : prior_weight);
    logw_ = log_normalized(std::move(w));
  }

  std::size_t components() const { return logw_.size(); }
  double log_weight(std::size_t c) const { return logw_[c]; }
  std::size_t pick_component(rng& r) const { return draw_index(logw_, r); }

  const numeric_kernels& numeric(const param_path& path, const numeric_spec& s) {
    char key[128];
    std::snprintf(key, sizeof key, "|%a|%a|%d|%a|%d", s.lo, s.hi, s.log, s.q, s.integer);
    auto [it, fresh] = numeric_.try_emplace(path + key, s, trials_, path, prior_weight_);
    return it->second;
  }
  const choice_kernels& choices(const param_path& path, const choice_spec& s) {
    std::string key = path + "|" + std::to_string(s.n);
    for (double w : s.weights) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "|%a", w);
      key += buf;
    }
    auto [it, fresh] = choice_.try_emplace(std::move(key), s, trials_, path, prior_weight_);
    return it->second;
  }

 private:
  std::vector<const completed_trial*> trials_;
  double prior_weight_;
  std::vector<double> logw_;
  std::map<std::string, numeric_kernels> numeric_;
  std::map<std::string, choice_kernels> choice_;
};

// Independent TPE: each parameter on its own, from l's marginal, by the marginals' ratio.
class independent_sampler final : public param_sampler {
 public:
  independent_sampler(parzen_estimator& l, parzen_estimator& g, int candidates)
      : l_(l), g_(g), candidates_(candidates) {}

  double sample_number(const param_path& path, const numeric_spec& s, rng& r) override {
    const auto& lk = l_.numeric(path, s);
    const auto& gk = g_.numeric(path, s);
    double best = s.lo, best_score = -std::numeric_limits<double>::infinity();
    for (int k = 0; k < candidates_; ++k) {
      const double v = lk.sample(draw_index(lk.marginal_logw, r), r);
      const double x = lk.ax.internal(v);
      const double score = lk.marginal_log_pdf(x) - gk.marginal_log_pdf(x);
      if (score > best_score) best_score = score, best = v;
    }
    return best;
  }

  std::size_t sample_index(const param_path& path, const choice_spec& spec, rng& r) override {
    const auto& lk = l_.choices(path, spec);
    const auto& gk = g_.choices(path, spec);
    std::size_t best = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    for (int k = 0; k < candidates_; ++k) {
      const std::size_t c = draw_index(lk.marginal_logp, r);
      const double score = lk.marginal_logp[c] - gk.marginal_logp[c];
      if (score > best_score) best_score = score, best = c;
    }
    return best;
  }

 private:
  parzen_estimator& l_;
  parzen_estimator& g_;
  int candidates_;
};

// Multivariate TPE: one candidate, drawn whole from component `component` of l. It
// keeps each draw's kernels in l and g, for the joint densities.
class joint_sampler final : public param_sampler {
 public:
  struct draw {
    const numeric_kernels* num[2] = {nullptr, nullptr};  // [0] l's, [1] g's
    const choice_kernels* cat[2] = {nullptr, nullptr};
    double x = 0;         // numeric: internal coordinate
    std::size_t idx = 0;  // choice: the option
  };

  joint_sampler(parzen_estimator& l, parzen_estimator& g, std::size_t component)
      : l_(l), g_(g), component_(component) {}

  double sample_number(const param_path& path, const numeric_spec& s, rng& r) override {
    const auto& lk = l_.numeric(path, s);
    const double v = lk.sample(lk.of_component[component_], r);
    draws_.push_back(draw{{&lk, &g_.numeric(path, s)}, {}, lk.ax.internal(v), 0});
    return v;
  }

  std::size_t sample_index(const param_path& path, const choice_spec& spec, rng& r) override {
    const auto& lk = l_.choices(path, spec);
    const std::size_t c = draw_index(lk.logp[lk.of_component[component_]], r);
    draws_.push_back(draw{{}, {&lk, &g_.choices(path, spec)}, 0, c});
    return c;
  }

  // log l(x) (side 0) or log g(x) (side 1) of the candidate drawn.
  double log_density(const parzen_estimator& e, int side) const {
    std::vector<double> terms(e.components());
    for (std::size_t c = 0; c < terms.size(); ++c) {
      double t = e.log_weight(c);
      for (const auto& d : draws_)
        t += d.num[side] ? d.num[side]->log_pdf(d.num[side]->of_component[c], d.x)
                         : d.cat[side]->logp[d.cat[side]->of_component[c]][d.idx];
      terms[c] = t;
    }
    return logsumexp(terms);
  }

 private:
  parzen_estimator& l_;
  parzen_estimator& g_;
  std::size_t component_;
  std::vector<draw> draws_;
};

// BOHB's part (Falkner et al. 2018): the values each trial reported at each budget
// (iteration), and the model fitted at the largest budget enough trials reached.
struct budget_model {
  double random_fraction = 1.0 / 3;
  int min_points = 0;  // 0: the parameters + 1
  std::map<std::int64_t, std::map<std::string, double>> losses;  // budget -> trial -> loss
  std::map<std::string, trace> traces;                            // every trial suggested
  std::size_t parameters = 0;                                     // the most a trace had
};

class tpe_search final : public search_algorithm {
 public:
  tpe_search(search_space space, tpe_options o, std::optional<budget_model> budgets = std::nullopt)
      : search_algorithm(o.directions.empty() ? std::vector<mode>{o.metric_mode} : o.directions),
        space_(std::move(space)),
        opts_(o),
        rng_(o.seed),
        budgets_(std::move(budgets)) {}

  bool finished() const override {
    return opts_.num_samples > 0 && suggested_ >= static_cast<std::size_t>(opts_.num_samples);
  }
  std::string name() const override { return budgets_ ? "bohb" : "tpe"; }

 protected:
  expected<std::optional<config>> next_config(const std::string& trial_id) override {
    if (finished()) return std::optional<config>{};
    trace tr;
    expected<config> c = status{errc::invalid_argument, "unreachable"};
    if (suggested_ < opts_.points_to_evaluate.size()) {
      c = space_.complete(opts_.points_to_evaluate[suggested_], rng_, {}, nullptr, &tr);
    } else if (budgets_) {
      auto at_budget = budget_trials();
      if (at_budget.empty() || rng_.uniform() < budgets_->random_fraction)
        c = space_.sample(rng_, {}, nullptr, &tr);
      else
        c = model_based(tr, at_budget);
    } else if (done_.size() < static_cast<std::size_t>(std::max(opts_.n_startup_trials, 1))) {
      c = space_.sample(rng_, {}, nullptr, &tr);
    } else {
      c = model_based(tr, done_);
    }
    if (!c) return c.error();
    if (budgets_) {
      budgets_->parameters = std::max(budgets_->parameters, tr.size());
      budgets_->traces[trial_id] = tr;
    }
    pending_[trial_id] = {std::move(tr), suggested_++};
    return std::optional<config>{std::move(*c)};
  }

  void observe(const std::string& trial_id, std::optional<double> value) override {
    if (value) return observe_outcome(trial_id, {*value}, {});
    pending_.erase(trial_id);
  }

  void observe_result(const std::string& trial_id, std::int64_t iteration, double value) override {
    if (budgets_) budgets_->losses[iteration][trial_id] = metric_mode() == mode::max ? -value : value;
  }

  // The trials at the largest budget that at least min_points trials reached (each
  // with its value there), or none yet.
  std::vector<completed_trial> budget_trials() const {
    const std::size_t needed = budgets_->min_points > 0 ? static_cast<std::size_t>(budgets_->min_points)
                                                        : std::max<std::size_t>(budgets_->parameters, 1) + 1;
    for (auto it = budgets_->losses.rbegin(); it != budgets_->losses.rend(); ++it) {
      if (it->second.size() < needed) continue;
      std::vector<completed_trial> out;
      for (const auto& [id, loss] : it->second)
        if (auto t = budgets_->traces.find(id); t != budgets_->traces.end())
          out.push_back(completed_trial{t->second, loss, out.size(), {loss}, 0});
      return out;
    }
    return {};
  }

  void observe_outcome(const std::string& trial_id, const std::vector<double>& values,
                       const std::vector<double>& constraints) override {
    auto it = pending_.find(trial_id);
    if (it == pending_.end()) return;
    point losses;
    for (std::size_t i = 0; i < values.size(); ++i) losses.push_back(directions()[i] == mode::max ? -values[i] : values[i]);
    double violation = 0;
    for (double c : constraints) violation += std::max(c, 0.0);
    done_.push_back(completed_trial{std::move(it->second.tr), losses.front(), done_.size(), losses, violation});
    pending_.erase(it);
  }

 private:
  // The good trials (first) and the rest: feasible ones first, the best by the
  // objective, or by non-dominated fronts and hypervolume with several.
  std::pair<std::vector<const completed_trial*>, std::vector<const completed_trial*>> split(
      const std::vector<completed_trial>& done) const {
    std::vector<const completed_trial*> feasible, infeasible;
    for (const auto& t : done) (t.violation > 0 ? infeasible : feasible).push_back(&t);
    std::stable_sort(infeasible.begin(), infeasible.end(), [](auto* a, auto* b) { return a->violation < b->violation; });
    const auto wanted = static_cast<std::size_t>(std::ceil(opts_.gamma * static_cast<double>(done.size())));
    const std::size_t n_below = directions().size() > 1 ? wanted : std::min<std::size_t>(wanted, opts_.max_below);
    std::vector<const completed_trial*> below, above;
    if (directions().size() == 1) {
      std::stable_sort(feasible.begin(), feasible.end(), [](auto* a, auto* b) { return a->loss < b->loss; });
      for (auto* t : feasible) (below.size() < n_below ? below : above).push_back(t);
    } else {
      std::vector<point> pts;
      for (auto* t : feasible) pts.push_back(t->losses);
      for (std::size_t i : select_by_fronts(pts, n_below)) below.push_back(feasible[i]);
      for (auto* t : feasible)
        if (std::find(below.begin(), below.end(), t) == below.end()) above.push_back(t);
    }
    for (auto* t : infeasible) (below.size() < n_below ? below : above).push_back(t);
    return {below, above};
  }

  expected<config> model_based(trace& tr, const std::vector<completed_trial>& done) {
    auto [below, above] = split(done);
    // The constant liar: trials still running count as the worst so far (in the "bad"
    // set), so that configs suggested side by side do not crowd one place.
    std::vector<completed_trial> liars;
    if (opts_.constant_liar) {
      liars.reserve(pending_.size());
      for (const auto& [id, p] : pending_)
        liars.push_back(completed_trial{p.tr, std::numeric_limits<double>::infinity(), done.size() + p.seq});
      for (const auto& l : liars) above.push_back(&l);
    }
    auto by_order = [](auto* a, auto* b) { return a->order < b->order; };
    std::sort(below.begin(), below.end(), by_order);
    std::sort(above.begin(), above.end(), by_order);
    parzen_estimator l(std::move(below), opts_.prior_weight), g(std::move(above), opts_.prior_weight);
    if (!opts_.multivariate.value_or(directions().size() == 1)) {
      independent_sampler s(l, g, opts_.n_ei_candidates);
      return space_.sample(rng_, {}, &s, &tr);
    }
    expected<config> best = status{errc::invalid_argument, "unreachable"};
    double best_score = -std::numeric_limits<double>::infinity();
    for (int k = 0; k < opts_.n_ei_candidates; ++k) {
      joint_sampler s(l, g, l.pick_component(rng_));
      trace t;
      auto cand = space_.sample(rng_, {}, &s, &t);
      if (!cand) return cand;
      const double score = s.log_density(l, 0) - s.log_density(g, 1);
      if (k == 0 || score > best_score) best_score = score, best = std::move(cand), tr = std::move(t);
    }
    return best;
  }

  search_space space_;
  tpe_options opts_;
  rng rng_;
  std::size_t suggested_ = 0;
  // Suggested and not yet complete, with the order they were suggested in (the liars'
  // order: an ordered map, so the same calls give the same configs everywhere).
  struct pending_trial {
    trace tr;
    std::size_t seq = 0;
  };
  std::map<std::string, pending_trial> pending_;
  std::vector<completed_trial> done_;
  std::optional<budget_model> budgets_;
};

}  // namespace

expected<std::unique_ptr<search_algorithm>> make_tpe(search_space space, tpe_options opts) {
  if (auto st = space.validate(); !st) return st;
  auto bad = [](std::string m) { return status{errc::invalid_argument, "tpe: " + std::move(m)}; };
  if (opts.num_samples < 0) return bad("num_samples must be >= 0 (0: no limit)");
  if (opts.n_startup_trials < 0) return bad("n_startup_trials must be >= 0");
  if (opts.n_ei_candidates < 1) return bad("n_ei_candidates must be >= 1 (Optuna uses 24)");
  if (!(opts.gamma > 0 && opts.gamma <= 1)) return bad("gamma must be in (0, 1] (Optuna uses 0.1)");
  if (opts.max_below < 1) return bad("max_below must be >= 1 (Optuna uses 25)");
  if (!(opts.prior_weight > 0) || !std::isfinite(opts.prior_weight))
    return bad("prior_weight must be a finite number > 0 (Optuna uses 1.0)");
  if (auto st = check_points(space, opts.points_to_evaluate, "tpe"); !st) return st;
  return std::unique_ptr<search_algorithm>(new tpe_search(std::move(space), opts));
}

expected<std::unique_ptr<search_algorithm>> make_bohb(search_space space, bohb_options opts) {
  if (auto st = space.validate(); !st) return st;
  auto bad = [](std::string m) { return status{errc::invalid_argument, "bohb: " + std::move(m)}; };
  if (opts.num_samples < 0) return bad("num_samples must be >= 0 (0: no limit)");
  if (!(opts.random_fraction >= 0 && opts.random_fraction <= 1))
    return bad("random_fraction must be in [0, 1] (BOHB uses 1/3)");
  if (opts.min_points_in_model < 0) return bad("min_points_in_model must be >= 0 (0: the parameters + 1)");
  if (!(opts.gamma > 0 && opts.gamma <= 1)) return bad("gamma must be in (0, 1] (BOHB uses 0.15)");
  if (opts.n_ei_candidates < 1) return bad("n_ei_candidates must be >= 1 (BOHB uses 64)");
  if (auto st = check_points(space, opts.points_to_evaluate, "bohb"); !st) return st;
  tpe_options t{.metric_mode = opts.metric_mode,
                .num_samples = opts.num_samples,
                .n_startup_trials = 0,
                .n_ei_candidates = opts.n_ei_candidates,
                .gamma = opts.gamma,
                .max_below = std::numeric_limits<int>::max(),
                .constant_liar = false,  // a running trial is in the model at the budgets it reached
                .seed = opts.seed,
                .points_to_evaluate = std::move(opts.points_to_evaluate)};
  budget_model b;
  b.random_fraction = opts.random_fraction;
  b.min_points = opts.min_points_in_model;
  return std::unique_ptr<search_algorithm>(new tpe_search(std::move(space), std::move(t), std::move(b)));
}

}  // namespace tune
