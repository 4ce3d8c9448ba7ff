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

expected<search_algorithm::trial_state*> search_algorithm::open_trial(const std::string& trial_id) {
  auto it = trials_.find(trial_id);
  if (it == trials_.end())
    return status{errc::not_found, "trial \"" + trial_id + "\" was never suggested by " + name()};
  if (it->second.done) return status{errc::invalid_argument, "trial \"" + trial_id + "\" already completed"};
  return &it->second;
}

status search_algorithm::on_complete(const std::string& trial_id, std::optional<double> value) {
  auto t = open_trial(trial_id);
  if (!t) return t.error();
  if (value && !std::isfinite(*value))
    return status{errc::invalid_argument,
                  "trial \"" + trial_id + "\" completed with a non-finite value; pass nullopt"};
  if (directions_.size() > 1 && value)
    return status{errc::invalid_argument, name() + " has " + std::to_string(directions_.size()) +
                                              " objectives; complete trial \"" + trial_id +
                                              "\" with a value for each (on_complete(id, values, constraints))"};
  (*t)->done = true;
  // Several objectives and no values: the trial is forgotten (one last value is not all of them).
  observe(trial_id, directions_.size() > 1 ? std::nullopt : value ? value : (*t)->last);
  return status::ok();
}

status search_algorithm::on_complete(const std::string& trial_id, const std::vector<double>& values,
                                     const std::vector<double>& constraints) {
  auto t = open_trial(trial_id);
  if (!t) return t.error();
  if (learns() ? values.size() != directions_.size() : values.empty())
    return status{errc::invalid_argument, "trial \"" + trial_id + "\" completed with " + std::to_string(values.size()) +
                                              " values; " + name() + " has " + std::to_string(directions_.size()) +
                                              " objectives, give one value for each"};
  for (double v : values)
    if (!std::isfinite(v))
      return status{errc::invalid_argument,
                    "trial \"" + trial_id + "\" completed with a non-finite value; report it as errored instead"};
  for (double c : constraints)
    if (!std::isfinite(c))
      return status{errc::invalid_argument, "trial \"" + trial_id + "\" has a non-finite constraint value"};
  if (!constraints.empty())
    if (auto st = accepts_constraints(); !st) return st;
  if (constraints_ && *constraints_ != constraints.size())
    return status{errc::invalid_argument, "trial \"" + trial_id + "\" has " + std::to_string(constraints.size()) +
                                              " constraint values, the trials before " + std::to_string(*constraints_) +
                                              "; give the same constraints for every trial"};
  constraints_ = constraints.size();
  (*t)->done = true;
  observe_outcome(trial_id, values, constraints);
  return status::ok();
}

namespace {

// ---- random and grid search ---------------------------------------------------------

class random_search final : public search_algorithm {
 public:
  random_search(search_space space, int num_samples, std::uint64_t seed, std::string name,
                std::vector<config> first = {})
      : search_algorithm(mode::min),
        space_(std::move(space)),
        points_(space_.grid()),
        first_(std::move(first)),
        total_(std::max(points_.size() * static_cast<std::size_t>(num_samples), first_.size())),
        rng_(seed),
        name_(std::move(name)) {}

  bool finished() const override { return next_ >= total_; }
  std::string name() const override { return name_; }

 protected:
  bool learns() const override { return false; }
  expected<std::optional<config>> next_config(const std::string&) override {
    if (finished()) return std::optional<config>{};
    const auto& point = points_[next_ % points_.size()];
    auto c = next_ < first_.size() ? space_.complete(first_[next_], rng_, point) : space_.sample(rng_, point);
    if (!c) return c.error();
    ++next_;
    return std::optional<config>{std::move(*c)};
  }

 private:
  search_space space_;
  std::vector<grid_point> points_;
  std::vector<config> first_;
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

}  // namespace

status check_points(const search_space& space, const std::vector<config>& points, const std::string& who) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    rng scratch(0);
    if (auto c = space.complete(points[i], scratch); !c)
      return status{c.error().code(), who + ": points_to_evaluate[" + std::to_string(i) + "]: " + c.error().message()};
  }
  return status::ok();
}

expected<std::unique_ptr<search_algorithm>> make_random_search(search_space space,
                                                               random_search_options opts) {
  if (auto st = space.validate(); !st) return st;
  if (auto st = check_samples(opts.num_samples, "random search"); !st) return st;
  if (auto st = check_points(space, opts.points_to_evaluate, "random search"); !st) return st;
  return std::unique_ptr<search_algorithm>(new random_search(std::move(space), opts.num_samples, opts.seed, "random",
                                                             std::move(opts.points_to_evaluate)));
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

}  // namespace tune
