#include "tune/tuner/search.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <limits>
#include <numeric>

namespace tune {

// ---- search_algorithm: id bookkeeping shared by every algorithm --------------------

expected<std::optional<config>> search_algorithm::suggest(const std::string& trial_id) {
  if (trials_.count(trial_id))
    return status{errc::already_exists,
                  "trial \"" + trial_id + "\" already has a config; give each trial a new id"};
  auto c = next_config(trial_id);
  if (c && c->has_value()) trials_.emplace(trial_id, trial_state{});
  return c;
}

status search_algorithm::on_result(const std::string& trial_id, std::int64_t iteration, double value) {
  auto it = trials_.find(trial_id);
  if (it == trials_.end())
    return status{errc::not_found, "trial \"" + trial_id + "\" was never suggested by " + name()};
  if (it->second.done)
    return status{errc::invalid_argument,
                  "trial \"" + trial_id + "\" already completed; a result after on_complete is a bug"};
  if (!std::isfinite(value))
    return status{errc::invalid_argument,
                  "trial \"" + trial_id + "\" reported a non-finite value; report it as errored"};
  it->second.last = value;
  observe_result(trial_id, iteration, value);
  return status::ok();
}

status search_algorithm::on_complete(const std::string& trial_id, std::optional<double> value) {
  auto it = trials_.find(trial_id);
  if (it == trials_.end())
    return status{errc::not_found, "trial \"" + trial_id + "\" was never suggested by " + name()};
  if (it->second.done)
    return status{errc::invalid_argument, "trial \"" + trial_id + "\" already completed"};
  if (value && !std::isfinite(*value))
    return status{errc::invalid_argument,
                  "trial \"" + trial_id + "\" completed with a non-finite value; pass nullopt"};
  it->second.done = true;
  observe(trial_id, value ? value : it->second.last);
  return status::ok();
}

namespace {

// ---- random and grid search ---------------------------------------------------------

class random_search final : public search_algorithm {
 public:
  random_search(search_space space, int num_samples, std::uint64_t seed, std::string name)
      : search_algorithm(mode::min),
        space_(std::move(space)),
        points_(space_.grid()),
        total_(points_.size() * static_cast<std::size_t>(num_samples)),
        rng_(seed),
        name_(std::move(name)) {}

  bool finished() const override { return next_ >= total_; }
  std::string name() const override { return name_; }

 protected:
  expected<std::optional<config>> next_config(const std::string&) override {
    if (finished()) return std::optional<config>{};
    auto c = space_.sample(rng_, points_[next_ % points_.size()]);
    if (!c) return c.error();
    ++next_;
    return std::optional<config>{std::move(*c)};
  }

 private:
  search_space space_;
  std::vector<grid_point> points_;
  std::size_t total_;
  std::size_t next_ = 0;
  rng rng_;
  std::string name_;
};

status check_samples(int n, const char* fn) {
  if (n < 1)
    return status{errc::invalid_argument, std::string(fn) + ": num_samples is " + std::to_string(n) +
                                              "; it must be >= 1 (how many times to run the grid)"};
  return status::ok();
}

std::string first_random(const search_space& s, const std::string& prefix) {
  for (const auto& [name, d] : s.params()) {
    const std::string dotted = prefix.empty() ? name : prefix + "." + name;
    if (d.what() == domain::kind::nested) {
      if (auto n = first_random(d.subspace(), dotted); !n.empty()) return n;
    } else if (d.what() != domain::kind::constant && d.what() != domain::kind::grid) {
      return "parameter \"" + dotted + "\" is " + d.describe();
    }
  }
  return {};
}

// ---- TPE --------------------------------------------------------------------------

constexpr double kPi = 3.14159265358979323846;

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

// A mixture of Gaussians truncated to [low, high], in internal coordinates.
struct parzen {
  std::vector<double> mu, sigma, logw, logz;
  double low = 0, high = 1;

  parzen(const std::vector<double>& obs, double lo, double hi, double prior_weight)
      : low(lo), high(hi) {
    const double range = high - low;
    std::vector<double> w = recency_weights(obs.size());
    std::vector<double> mus = obs;
    const double prior_mu = 0.5 * (low + high);
    mus.push_back(prior_mu);
    w.push_back(prior_weight);
    // Bandwidths from neighbour distances (prior included), clipped ("magic clip").
    std::vector<std::size_t> order(mus.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return mus[a] < mus[b]; });
    sigma.assign(mus.size(), range);
    const double maxs = range, mins = range / std::min(100.0, 1.0 + static_cast<double>(mus.size()));
    for (std::size_t k = 0; k < order.size(); ++k) {
      const double x = mus[order[k]];
      const double left = k > 0 ? x - mus[order[k - 1]] : -1;
      const double right = k + 1 < order.size() ? mus[order[k + 1]] - x : -1;
      // The larger gap to a neighbour; equal values (gap 0) get the narrowest width.
      const double s = left < 0 && right < 0 ? range : std::max(left, right);
      sigma[order[k]] = std::clamp(s, mins, maxs);
    }
    sigma.back() = range;  // the prior stays wide
    mu = std::move(mus);
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    for (std::size_t i = 0; i < mu.size(); ++i) {
      logw.push_back(std::log(w[i] / total));
      logz.push_back(log_normal_cdf_diff((low - mu[i]) / sigma[i], (high - mu[i]) / sigma[i]));
    }
  }

  double sample(rng& r) const {
    double u = r.uniform(), acc = 0;
    std::size_t i = 0;
    for (; i + 1 < mu.size(); ++i) {
      acc += std::exp(logw[i]);
      if (u < acc) break;
    }
    for (int tries = 0; tries < 100; ++tries) {
      const double x = mu[i] + sigma[i] * r.normal();
      if (x >= low && x <= high) return x;
    }
    return std::clamp(mu[i], low, high);
  }

  double log_pdf(double x) const {
    std::vector<double> terms(mu.size());
    for (std::size_t i = 0; i < mu.size(); ++i) {
      const double z = (x - mu[i]) / sigma[i];
      terms[i] = logw[i] - logz[i] - 0.5 * z * z - std::log(sigma[i] * std::sqrt(2 * kPi));
    }
    return logsumexp(terms);
  }
};

struct completed_trial {
  trace tr;
  double loss;  // value, negated in max mode: lower is better
  std::size_t order;  // completion order, for recency weights
};

class tpe_sampler final : public param_sampler {
 public:
  tpe_sampler(const std::vector<const completed_trial*>& below,
              const std::vector<const completed_trial*>& above, const tpe_options& o)
      : below_(below), above_(above), opts_(o) {}

  double sample_number(const param_path& path, const numeric_spec& s, rng& r) override {
    // Internal coordinates: log for log domains; integers/quantized widened by half a step.
    const double step = s.integer ? 1.0 : s.q;
    auto to_internal = [&](double v) { return s.log ? std::log(v) : v; };
    double low = s.lo, high = s.hi;
    if (step > 0 && !s.log) low -= step / 2, high += step / 2;
    if (s.log && s.integer) high += 1;  // lograndint: floor of a log-uniform below hi+1
    low = to_internal(low), high = to_internal(high);
    if (!(high > low)) return s.lo;
    auto obs = [&](const std::vector<const completed_trial*>& ts) {
      std::vector<double> v;
      for (const auto* t : ts)
        if (auto it = t->tr.find(path);
            it != t->tr.end() && !it->second.categorical && it->second.value >= s.lo &&
            it->second.value <= s.hi)
          v.push_back(std::clamp(to_internal(it->second.value), low, high));
      return v;
    };
    parzen l(obs(below_), low, high, opts_.prior_weight), g(obs(above_), low, high, opts_.prior_weight);
    double best = s.lo, best_score = -std::numeric_limits<double>::infinity();
    for (int k = 0; k < opts_.n_ei_candidates; ++k) {
      double x = l.sample(r);
      double v = s.log ? std::exp(x) : x;
      if (s.log && s.integer) v = std::floor(v);
      v = snap(s, v);
      const double xi = std::clamp(to_internal(v), low, high);
      const double score = l.log_pdf(xi) - g.log_pdf(xi);
      if (score > best_score) best_score = score, best = v;
    }
    return best;
  }

  std::size_t sample_index(const param_path& path, std::size_t n, rng& r) override {
    auto weights = [&](const std::vector<const completed_trial*>& ts) {
      std::vector<double> w(n, opts_.prior_weight / static_cast<double>(n));
      std::vector<std::size_t> idx;
      for (const auto* t : ts)
        if (auto it = t->tr.find(path); it != t->tr.end() && it->second.categorical &&
                                        it->second.value >= 0 && it->second.value < n)
          idx.push_back(static_cast<std::size_t>(it->second.value));
      auto rw = recency_weights(idx.size());
      for (std::size_t i = 0; i < idx.size(); ++i) w[idx[i]] += rw[i];
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      for (auto& x : w) x /= total;
      return w;
    };
    auto l = weights(below_), g = weights(above_);
    std::size_t best = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    for (int k = 0; k < opts_.n_ei_candidates; ++k) {
      double u = r.uniform(), acc = 0;
      std::size_t c = 0;
      for (; c + 1 < n; ++c) {
        acc += l[c];
        if (u < acc) break;
      }
      const double score = std::log(l[c]) - std::log(g[c]);
      if (score > best_score) best_score = score, best = c;
    }
    return best;
  }

 private:
  const std::vector<const completed_trial*>& below_;
  const std::vector<const completed_trial*>& above_;
  const tpe_options& opts_;
};

class tpe_search final : public search_algorithm {
 public:
  tpe_search(search_space space, tpe_options o)
      : search_algorithm(o.metric_mode), space_(std::move(space)), opts_(o), rng_(o.seed) {}

  bool finished() const override {
    return opts_.num_samples > 0 && suggested_ >= static_cast<std::size_t>(opts_.num_samples);
  }
  std::string name() const override { return "tpe"; }

 protected:
  expected<std::optional<config>> next_config(const std::string& trial_id) override {
    if (finished()) return std::optional<config>{};
    trace tr;
    expected<config> c = status{errc::invalid_argument, "unreachable"};
    if (done_.size() < static_cast<std::size_t>(std::max(opts_.n_startup_trials, 1))) {
      c = space_.sample(rng_, {}, nullptr, &tr);
    } else {
      std::vector<const completed_trial*> sorted;
      for (const auto& t : done_) sorted.push_back(&t);
      std::stable_sort(sorted.begin(), sorted.end(),
                       [](auto* a, auto* b) { return a->loss < b->loss; });
      const auto n_below = std::min<std::size_t>(
          static_cast<std::size_t>(std::ceil(opts_.gamma * static_cast<double>(sorted.size()))),
          static_cast<std::size_t>(opts_.max_below));
      std::vector<const completed_trial*> below(sorted.begin(), sorted.begin() + n_below),
          above(sorted.begin() + n_below, sorted.end());
      // The constant liar: trials still running count as the worst so far (in the
      // "bad" set), so that configs suggested side by side do not crowd one place.
      std::vector<completed_trial> liars;
      if (opts_.constant_liar) {
        liars.reserve(pending_.size());
        for (const auto& [id, p] : pending_)
          liars.push_back(completed_trial{p.tr, std::numeric_limits<double>::infinity(), done_.size() + p.seq});
        for (const auto& l : liars) above.push_back(&l);
      }
      auto by_order = [](auto* a, auto* b) { return a->order < b->order; };
      std::sort(below.begin(), below.end(), by_order);
      std::sort(above.begin(), above.end(), by_order);
      tpe_sampler sampler(below, above, opts_);
      c = space_.sample(rng_, {}, &sampler, &tr);
    }
    if (!c) return c.error();
    pending_[trial_id] = {std::move(tr), suggested_++};
    return std::optional<config>{std::move(*c)};
  }

  void observe(const std::string& trial_id, std::optional<double> value) override {
    auto it = pending_.find(trial_id);
    if (it == pending_.end()) return;
    if (value) {
      const double loss = metric_mode() == mode::max ? -*value : *value;
      done_.push_back(completed_trial{std::move(it->second.tr), loss, done_.size()});
    }
    pending_.erase(it);
  }

 private:
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
};

}  // namespace

expected<std::unique_ptr<search_algorithm>> make_random_search(search_space space,
                                                               random_search_options opts) {
  if (auto st = space.validate(); !st) return st;
  if (auto st = check_samples(opts.num_samples, "random search"); !st) return st;
  return std::unique_ptr<search_algorithm>(
      new random_search(std::move(space), opts.num_samples, opts.seed, "random"));
}

expected<std::unique_ptr<search_algorithm>> make_grid_search(search_space space,
                                                             grid_search_options opts) {
  if (auto st = space.validate(); !st) return st;
  if (auto st = check_samples(opts.num_samples, "grid search"); !st) return st;
  if (auto what = first_random(space, ""); !what.empty())
    return status{errc::invalid_argument,
                  "grid search: " + what +
                      "; a grid takes grid_search({...}) or constants only — write "
                      "grid_search({...}) there, or use random search (it expands grids too)"};
  return std::unique_ptr<search_algorithm>(new random_search(std::move(space), opts.num_samples, 0, "grid"));
}

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
  return std::unique_ptr<search_algorithm>(new tpe_search(std::move(space), opts));
}

}  // namespace tune
