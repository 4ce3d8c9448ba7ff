// GP-based Bayesian optimisation (search.hpp says what it does; this file how).
//
// The space becomes a unit cube: a numeric parameter one coordinate (its internal
// coordinates of axis.hpp, scaled to [0, 1]), a choice of values or a grid one
// coordinate per option (one-hot). A Gaussian process models the standardized losses:
// a Matérn 5/2 kernel with a length scale per coordinate, a signal variance and a
// noise variance, fitted by maximizing the marginal likelihood times weak log-normal
// priors (L-BFGS with the analytic gradient, NLopt). The next config maximizes the
// logarithm of the expected improvement over the best loss so far: many random
// candidates and perturbations of the best configs, the best few refined by BOBYQA
// (NLopt) over the numeric coordinates. Trials still running are "fantasized": the GP,
// conditioned on the completed trials, adds them at its own mean (the kriging
// believer), which leaves their surroundings' variance, and so their improvement, low.
// Linear algebra is Eigen's (Cholesky factorizations and solves), not our own.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <limits>
#include <map>

#include <Eigen/Dense>
#include <nlopt.hpp>

#include "tune/tuner/axis.hpp"
#include "tune/tuner/search.hpp"

namespace tune {
namespace {

using detail::axis;
using Eigen::MatrixXd;
using Eigen::VectorXd;

const double kSqrt5 = std::sqrt(5.0);

// ---- the space as a unit cube ------------------------------------------------------

struct dimension {
  param_path path;
  bool numeric = true;
  numeric_spec spec;      // numeric
  std::size_t width = 1;  // coordinates: 1, or the number of options (one-hot)
  std::size_t first = 0;  // its first coordinate
};

std::string dotted_join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

status scan(const search_space& s, const param_path& prefix, const std::string& dotted, std::vector<dimension>& out,
            std::size_t& coords) {
  for (const auto& [name, d] : s.params()) {
    const param_path path = prefix + "/" + name;
    const std::string where = dotted_join(dotted, name);
    auto add = [&](dimension dim) {
      dim.path = path;
      dim.first = coords;
      coords += dim.width;
      out.push_back(std::move(dim));
    };
    switch (d.what()) {
      case domain::kind::constant:
        break;
      case domain::kind::number:
        add(dimension{{}, true, d.number(), 1, 0});
        break;
      case domain::kind::grid:
        add(dimension{{}, false, {}, d.grid_values().size(), 0});
        break;
      case domain::kind::choice:
        for (const auto& o : d.options())
          if (o.what() != domain::kind::constant)
            return status{errc::invalid_argument,
                          "gp: parameter \"" + where + "\" is " + d.describe() +
                              ", a choice of sub-spaces or domains; the GP needs the same parameters in every "
                              "config — write a choice of values there, or use tpe (it models conditional spaces)"};
        add(dimension{{}, false, {}, d.options().size(), 0});
        break;
      case domain::kind::nested:
        if (auto st = scan(d.subspace(), path, where, out, coords); !st) return st;
        break;
      case domain::kind::conditional:
        return status{errc::invalid_argument,
                      "gp: parameter \"" + where +
                          "\" is conditional; the GP needs the same parameters in every config — use tpe for "
                          "conditional spaces"};
    }
  }
  return status::ok();
}

// Draws the config at a point of the cube (the walk of the space asks, we answer).
class cube_decoder final : public param_sampler {
 public:
  cube_decoder(const std::map<param_path, const dimension*>& dims, const VectorXd& x) : dims_(dims), x_(x) {}
  double sample_number(const param_path& path, const numeric_spec& s, rng& r) override {
    auto it = dims_.find(path);
    if (it == dims_.end()) return uniform_number(s, r);
    return axis(s).from_unit(x_[static_cast<Eigen::Index>(it->second->first)]);
  }
  std::size_t sample_index(const param_path& path, const choice_spec& s, rng& r) override {
    auto it = dims_.find(path);
    if (it == dims_.end()) return uniform_index(s, r);
    const auto first = static_cast<Eigen::Index>(it->second->first);
    Eigen::Index best = 0;
    x_.segment(first, static_cast<Eigen::Index>(it->second->width)).maxCoeff(&best);
    return static_cast<std::size_t>(best);
  }

 private:
  const std::map<param_path, const dimension*>& dims_;
  const VectorXd& x_;
};

// ---- the Gaussian process ----------------------------------------------------------

// Hyperparameters, in logs: [log length scale per coordinate..., log signal
// variance, log noise variance].
struct gp_fit {
  VectorXd theta;
  MatrixXd X;    // n × D
  VectorXd y;    // standardized
  Eigen::LLT<MatrixXd> llt;
  VectorXd alpha;  // K^-1 y
  bool ok = false;
};

double matern52(double r) { return (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r); }

// Scaled distance between rows a of A and b of B.
double scaled_distance(const MatrixXd& A, Eigen::Index a, const MatrixXd& B, Eigen::Index b, const VectorXd& inv_ls) {
  return ((A.row(a) - B.row(b)).transpose().cwiseProduct(inv_ls)).norm();
}

MatrixXd kernel_matrix(const MatrixXd& X, const VectorXd& theta) {
  const Eigen::Index n = X.rows(), d = X.cols();
  const VectorXd inv_ls = (-theta.head(d)).array().exp();
  const double s2 = std::exp(theta[d]), noise = std::exp(theta[d + 1]);
  MatrixXd K(n, n);
  for (Eigen::Index a = 0; a < n; ++a) {
    K(a, a) = s2 + noise;
    for (Eigen::Index b = 0; b < a; ++b) K(a, b) = K(b, a) = s2 * matern52(scaled_distance(X, a, X, b, inv_ls));
  }
  return K;
}

// Weak priors, in logs: length scales around 0.5 of the cube, signal variance around 1
// (the losses are standardized), noise around 1e-3.
struct log_prior {
  static constexpr double ls_mean = -0.6931, ls_sd = 1.0, s2_mean = 0.0, s2_sd = 1.0, noise_mean = -6.9, noise_sd = 2.0;
  static double value(const VectorXd& t, Eigen::Index d, VectorXd& grad) {
    double v = 0;
    auto term = [&](Eigen::Index i, double mean, double sd) {
      const double z = (t[i] - mean) / sd;
      v += -0.5 * z * z;
      grad[i] += -z / sd;
    };
    for (Eigen::Index i = 0; i < d; ++i) term(i, ls_mean, ls_sd);
    term(d, s2_mean, s2_sd);
    term(d + 1, noise_mean, noise_sd);
    return v;
  }
};

// The negative log posterior of the hyperparameters and its gradient.
double negative_log_posterior(const MatrixXd& X, const VectorXd& y, const VectorXd& theta, VectorXd& grad) {
  const Eigen::Index n = X.rows(), d = X.cols();
  grad = VectorXd::Zero(d + 2);
  MatrixXd K = kernel_matrix(X, theta);
  Eigen::LLT<MatrixXd> llt(K);
  if (llt.info() != Eigen::Success) return 1e10;
  const VectorXd alpha = llt.solve(y);
  const MatrixXd L = llt.matrixL();
  double log_det = 0;
  for (Eigen::Index i = 0; i < n; ++i) log_det += std::log(L(i, i));
  const double nll = 0.5 * y.dot(alpha) + log_det + 0.5 * static_cast<double>(n) * std::log(2 * std::numbers::pi);
  // d(nll)/d(theta_j) = 0.5 tr((K^-1 - alpha alpha^T) dK/dtheta_j)
  const MatrixXd W = llt.solve(MatrixXd::Identity(n, n)) - alpha * alpha.transpose();
  const VectorXd inv_ls = (-theta.head(d)).array().exp();
  const double s2 = std::exp(theta[d]), noise = std::exp(theta[d + 1]);
  double g_s2 = 0;
  for (Eigen::Index a = 0; a < n; ++a) {
    g_s2 += 0.5 * W(a, a) * s2;
    for (Eigen::Index b = 0; b < a; ++b) {
      const double r = scaled_distance(X, a, X, b, inv_ls);
      const double e = std::exp(-kSqrt5 * r);
      g_s2 += W(a, b) * s2 * (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * e;  // both triangles: 2 × 0.5
      const double c = W(a, b) * s2 * 5.0 / 3.0 * (1 + kSqrt5 * r) * e;
      for (Eigen::Index i = 0; i < d; ++i) {
        const double t = (X(a, i) - X(b, i)) * inv_ls[i];
        grad[i] += c * t * t;
      }
    }
  }
  grad[d] = g_s2;
  grad[d + 1] = 0.5 * noise * W.trace();
  VectorXd prior_grad = VectorXd::Zero(d + 2);
  const double lp = log_prior::value(theta, d, prior_grad);
  grad -= prior_grad;
  return nll - lp;
}

struct fit_problem {
  const MatrixXd* X;
  const VectorXd* y;
  double best = std::numeric_limits<double>::infinity();
  std::vector<double> best_theta;
};

double nlopt_posterior(const std::vector<double>& t, std::vector<double>& g, void* data) {
  auto* p = static_cast<fit_problem*>(data);
  VectorXd theta = Eigen::Map<const VectorXd>(t.data(), static_cast<Eigen::Index>(t.size()));
  VectorXd grad;
  const double v = negative_log_posterior(*p->X, *p->y, theta, grad);
  if (!g.empty()) Eigen::Map<VectorXd>(g.data(), static_cast<Eigen::Index>(g.size())) = grad;
  if (std::isfinite(v) && v < p->best) p->best = v, p->best_theta = t;
  return std::isfinite(v) ? v : 1e10;
}

// MAP hyperparameters from each start (the previous fit's and the priors' means).
VectorXd fit_hyperparameters(const MatrixXd& X, const VectorXd& y, const std::vector<VectorXd>& starts) {
  const auto d = static_cast<unsigned>(X.cols());
  std::vector<double> lb(d + 2), ub(d + 2);
  for (unsigned i = 0; i < d; ++i) lb[i] = std::log(1e-2), ub[i] = std::log(20.0);
  lb[d] = std::log(0.05), ub[d] = std::log(20.0);
  lb[d + 1] = std::log(1e-6), ub[d + 1] = std::log(0.5);
  fit_problem p{&X, &y, std::numeric_limits<double>::infinity(), {}};
  for (const auto& start : starts) {
    nlopt::opt opt(nlopt::LD_LBFGS, d + 2);
    opt.set_lower_bounds(lb);
    opt.set_upper_bounds(ub);
    opt.set_min_objective(nlopt_posterior, &p);
    opt.set_maxeval(150);
    opt.set_ftol_rel(1e-7);
    std::vector<double> t(start.data(), start.data() + start.size());
    for (unsigned i = 0; i < d + 2; ++i) t[i] = std::clamp(t[i], lb[i], ub[i]);
    double value = 0;
    try {
      opt.optimize(t, value);
    } catch (const std::exception&) {
      // roundoff or a failed step: the best point seen is kept (fit_problem)
    }
  }
  if (p.best_theta.empty()) return starts.front();
  return Eigen::Map<const VectorXd>(p.best_theta.data(), static_cast<Eigen::Index>(p.best_theta.size()));
}

bool condition(gp_fit& f) {
  f.llt.compute(kernel_matrix(f.X, f.theta));
  f.ok = f.llt.info() == Eigen::Success;
  if (f.ok) f.alpha = f.llt.solve(f.y);
  return f.ok;
}

void predict(const gp_fit& f, const VectorXd& x, double& mean, double& var) {
  const Eigen::Index n = f.X.rows(), d = f.X.cols();
  const VectorXd inv_ls = (-f.theta.head(d)).array().exp();
  const double s2 = std::exp(f.theta[d]);
  VectorXd k(n);
  for (Eigen::Index a = 0; a < n; ++a)
    k[a] = s2 * matern52(((f.X.row(a).transpose() - x).cwiseProduct(inv_ls)).norm());
  mean = k.dot(f.alpha);
  const VectorXd v = f.llt.matrixL().solve(k);
  var = std::max(s2 - v.squaredNorm(), 1e-12);
}

// log of h(z) = phi(z) + z Phi(z), the expected improvement of a unit Gaussian, without
// cancellation far below the incumbent (h(z) = phi(z) (1 - t R(t)) with t = -z and R
// Mills' ratio).
double log_h(double z) {
  const double log_phi = -0.5 * z * z - 0.5 * std::log(2 * std::numbers::pi);
  if (z > -1) return std::log(std::exp(log_phi) + z * 0.5 * std::erfc(-z / std::sqrt(2.0)));
  const double t = -z;
  double rest;
  if (t < 30) {
    const double mills = std::sqrt(std::numbers::pi / 2) * std::exp(0.5 * t * t) * std::erfc(t / std::sqrt(2.0));
    rest = 1 - t * mills;
  } else {
    const double t2 = t * t;
    rest = 1 / t2 - 3 / (t2 * t2) + 15 / (t2 * t2 * t2);
  }
  return log_phi + std::log(std::max(rest, 1e-300));
}

double log_ei(const gp_fit& f, const VectorXd& x, double best) {
  double mean = 0, var = 0;
  predict(f, x, mean, var);
  const double sd = std::sqrt(var);
  return std::log(sd) + log_h((best - mean) / sd);
}

// ---- the search --------------------------------------------------------------------

struct observed {
  VectorXd x;
  double loss;
};

class gp_search final : public search_algorithm {
 public:
  gp_search(search_space space, gp_options o, std::vector<dimension> dims, std::size_t coords)
      : search_algorithm(o.metric_mode),
        space_(std::move(space)),
        opts_(std::move(o)),
        rng_(opts_.seed),
        dims_(std::move(dims)),
        coords_(coords) {
    for (const auto& d : dims_) by_path_[d.path] = &d;
  }

  bool finished() const override {
    return opts_.num_samples > 0 && suggested_ >= static_cast<std::size_t>(opts_.num_samples);
  }
  std::string name() const override { return "gp"; }

 protected:
  status accepts_constraints() const override {
    return status{errc::invalid_argument,
                  "gp does not model constraints; use tpe (it handles them as Optuna's constrained TPE)"};
  }
  expected<std::optional<config>> next_config(const std::string& trial_id) override {
    if (finished()) return std::optional<config>{};
    trace tr;
    expected<config> c = status{errc::invalid_argument, "unreachable"};
    if (suggested_ < opts_.points_to_evaluate.size()) {
      c = space_.complete(opts_.points_to_evaluate[suggested_], rng_, {}, nullptr, &tr);
    } else if (done_.size() < static_cast<std::size_t>(std::max(opts_.n_startup_trials, 2)) || coords_ == 0) {
      c = space_.sample(rng_, {}, nullptr, &tr);
    } else {
      const VectorXd x = next_point();
      cube_decoder decode(by_path_, x);
      c = space_.sample(rng_, {}, &decode, &tr);
    }
    if (!c) return c.error();
    pending_[trial_id] = encode(tr);
    ++suggested_;
    return std::optional<config>{std::move(*c)};
  }

  void observe(const std::string& trial_id, std::optional<double> value) override {
    auto it = pending_.find(trial_id);
    if (it == pending_.end()) return;
    if (value) done_.push_back(observed{it->second, metric_mode() == mode::max ? -*value : *value});
    pending_.erase(it);
  }

 private:
  VectorXd encode(const trace& tr) const {
    VectorXd x = VectorXd::Constant(static_cast<Eigen::Index>(coords_), 0.5);
    for (const auto& d : dims_) {
      auto it = tr.find(d.path);
      if (it == tr.end()) continue;
      const auto first = static_cast<Eigen::Index>(d.first);
      if (d.numeric) {
        x[first] = axis(d.spec).to_unit(it->second.value);
      } else {
        x.segment(first, static_cast<Eigen::Index>(d.width)).setZero();
        x[first + static_cast<Eigen::Index>(std::min<double>(it->second.value, static_cast<double>(d.width - 1)))] = 1;
      }
    }
    return x;
  }

  // A random point of the cube (one-hot options).
  VectorXd random_point() {
    VectorXd x(static_cast<Eigen::Index>(coords_));
    for (const auto& d : dims_) {
      const auto first = static_cast<Eigen::Index>(d.first);
      if (d.numeric) {
        x[first] = rng_.uniform();
      } else {
        x.segment(first, static_cast<Eigen::Index>(d.width)).setZero();
        x[first + static_cast<Eigen::Index>(rng_.below(d.width))] = 1;
      }
    }
    return x;
  }

  VectorXd near(const VectorXd& x, double sd) {
    VectorXd y = x;
    for (const auto& d : dims_)
      if (d.numeric) {
        const auto i = static_cast<Eigen::Index>(d.first);
        y[i] = std::clamp(x[i] + sd * rng_.normal(), 0.0, 1.0);
      }
    return y;
  }

  // The trials the GP is fitted on: all of them, or past max_fit_trials the best half
  // and the most recent half of that many (a fit costs the cube of their number).
  std::vector<const observed*> fit_set() const {
    std::vector<const observed*> all;
    for (const auto& o : done_) all.push_back(&o);
    const auto cap = static_cast<std::size_t>(opts_.max_fit_trials);
    if (all.size() <= cap) return all;
    std::vector<const observed*> by_loss = all;
    std::stable_sort(by_loss.begin(), by_loss.end(), [](auto* a, auto* b) { return a->loss < b->loss; });
    std::vector<const observed*> out(by_loss.begin(), by_loss.begin() + static_cast<std::ptrdiff_t>(cap / 2));
    for (auto it = all.rbegin(); it != all.rend() && out.size() < cap; ++it)
      if (std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
    return out;
  }

  gp_fit fitted() {
    const auto used = fit_set();
    const auto n = static_cast<Eigen::Index>(used.size()), D = static_cast<Eigen::Index>(coords_);
    gp_fit f;
    f.X.resize(n, D);
    VectorXd loss(n);
    for (Eigen::Index i = 0; i < n; ++i) f.X.row(i) = used[static_cast<std::size_t>(i)]->x, loss[i] = used[static_cast<std::size_t>(i)]->loss;
    const double mean = loss.mean();
    double sd = std::sqrt((loss.array() - mean).square().mean());
    if (!(sd > 1e-12)) sd = 1;
    f.y = (loss.array() - mean) / sd;
    VectorXd prior(D + 2);
    prior.head(D).setConstant(log_prior::ls_mean);
    prior[D] = log_prior::s2_mean;
    prior[D + 1] = log_prior::noise_mean;
    std::vector<VectorXd> starts{prior};
    if (theta_.size() == D + 2) starts.insert(starts.begin(), theta_);
    f.theta = theta_ = fit_hyperparameters(f.X, f.y, starts);
    if (!condition(f)) {  // should not happen with the noise's lower bound; fall back to the prior
      f.theta = prior;
      condition(f);
    }
    return f;
  }

  VectorXd next_point() {
    gp_fit f = fitted();
    if (!f.ok) return random_point();
    // The pending trials, believed at the GP's mean (the kriging believer; same
    // hyperparameters). Measured against believing them at the worst value (constant
    // liar) and at the mean value, at 8 in flight: the believer finds the best configs.
    if (opts_.fantasize_pending && !pending_.empty()) {
      const auto n = f.X.rows();
      f.X.conservativeResize(n + static_cast<Eigen::Index>(pending_.size()), Eigen::NoChange);
      f.y.conservativeResize(f.X.rows());
      Eigen::Index i = n;
      for (const auto& [id, x] : pending_) {
        double m = 0, v = 0;
        predict(f, x, m, v);
        f.X.row(i) = x.transpose();
        f.y[i++] = m;
      }
      if (!condition(f)) return random_point();
    }
    // The incumbent counts the fantasies too: what is believed of a pending config is
    // no improvement to expect there again.
    const double best = f.y.minCoeff();
    // Candidates: random points, and perturbations of the best configs so far.
    std::vector<std::pair<double, VectorXd>> cands;
    for (int k = 0; k < opts_.n_candidates; ++k) {
      VectorXd x = random_point();
      cands.emplace_back(log_ei(f, x, best), std::move(x));
    }
    std::vector<std::size_t> order(done_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return done_[a].loss < done_[b].loss; });
    for (std::size_t t = 0; t < std::min<std::size_t>(5, order.size()); ++t)
      for (int k = 0; k < opts_.n_candidates / 40; ++k) {
        VectorXd x = near(done_[order[t]].x, k % 2 ? 0.02 : 0.1);
        cands.emplace_back(log_ei(f, x, best), std::move(x));
      }
    std::partial_sort(cands.begin(), cands.begin() + std::min<std::ptrdiff_t>(opts_.n_local, cands.size()), cands.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first; });
    VectorXd chosen = cands.front().second;
    double chosen_value = cands.front().first;
    for (int k = 0; k < std::min<int>(opts_.n_local, static_cast<int>(cands.size())); ++k) {
      auto [v, x] = refine(f, cands[static_cast<std::size_t>(k)].second, best);
      if (v > chosen_value) chosen_value = v, chosen = std::move(x);
    }
    return chosen;
  }

  // BOBYQA over the numeric coordinates, the options kept.
  std::pair<double, VectorXd> refine(const gp_fit& f, const VectorXd& start, double best) {
    std::vector<Eigen::Index> free;
    for (const auto& d : dims_)
      if (d.numeric) free.push_back(static_cast<Eigen::Index>(d.first));
    const double start_value = log_ei(f, start, best);
    if (free.empty()) return {start_value, start};
    struct problem {
      const gp_fit* f;
      VectorXd x;
      const std::vector<Eigen::Index>* free;
      double best;
    } p{&f, start, &free, best};
    auto objective = [](const std::vector<double>& u, std::vector<double>&, void* data) {
      auto* q = static_cast<problem*>(data);
      for (std::size_t i = 0; i < u.size(); ++i) q->x[(*q->free)[i]] = u[i];
      const double v = log_ei(*q->f, q->x, q->best);
      return std::isfinite(v) ? v : -1e300;
    };
    const auto n = static_cast<unsigned>(free.size());
    nlopt::opt opt(n >= 2 ? nlopt::LN_BOBYQA : nlopt::LN_COBYLA, n);
    opt.set_lower_bounds(std::vector<double>(n, 0.0));
    opt.set_upper_bounds(std::vector<double>(n, 1.0));
    opt.set_max_objective(objective, &p);
    opt.set_maxeval(static_cast<int>(40 + 10 * n));
    opt.set_xtol_abs(1e-4);
    std::vector<double> u(n);
    for (unsigned i = 0; i < n; ++i) u[i] = start[free[i]];
    double value = start_value;
    try {
      opt.optimize(u, value);
    } catch (const std::exception&) {
      return {start_value, start};
    }
    VectorXd x = start;
    for (unsigned i = 0; i < n; ++i) x[free[i]] = u[i];
    const double v = log_ei(f, x, best);
    return v > start_value ? std::pair{v, x} : std::pair{start_value, start};
  }

  search_space space_;
  gp_options opts_;
  rng rng_;
  std::vector<dimension> dims_;
  std::size_t coords_;
  std::map<param_path, const dimension*> by_path_;
  std::size_t suggested_ = 0;
  std::map<std::string, VectorXd> pending_;  // ordered: the same calls give the same configs
  std::vector<observed> done_;
  VectorXd theta_;
};

}  // namespace

expected<std::unique_ptr<search_algorithm>> make_gp(search_space space, gp_options opts) {
  if (auto st = space.validate(); !st) return st;
  auto bad = [](std::string m) { return status{errc::invalid_argument, "gp: " + std::move(m)}; };
  if (opts.num_samples < 0) return bad("num_samples must be >= 0 (0: no limit)");
  if (opts.n_startup_trials < 0) return bad("n_startup_trials must be >= 0");
  if (opts.n_candidates < 1) return bad("n_candidates must be >= 1 (default 2000)");
  if (opts.n_local < 0) return bad("n_local must be >= 0 (default 5)");
  if (opts.max_fit_trials < 4) return bad("max_fit_trials must be >= 4 (default 400)");
  std::vector<dimension> dims;
  std::size_t coords = 0;
  if (auto st = scan(space, "", "", dims, coords); !st) return st;
  if (auto st = check_points(space, opts.points_to_evaluate, "gp"); !st) return st;
  return std::unique_ptr<search_algorithm>(new gp_search(std::move(space), std::move(opts), std::move(dims), coords));
}

}  // namespace tune
