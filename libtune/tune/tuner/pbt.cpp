// Population based training (Jaderberg et al. 2017), asynchronous, as Ray's
// PopulationBasedTraining decides it; random draws from our own splitmix64.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "tune/core/splitmix.hpp"
#include "tune/tuner/scheduler_impl.hpp"

namespace tune::detail {
namespace {

nlohmann::json* find_key(nlohmann::json& cfg, const std::string& key) {
  if (!cfg.is_object()) return nullptr;
  if (!key.empty() && key[0] == '/') {
    nlohmann::json::json_pointer p;
    try {
      p = nlohmann::json::json_pointer(key);
    } catch (const nlohmann::json::exception&) {
      return nullptr;
    }
    return cfg.contains(p) ? &cfg[p] : nullptr;
  }
  auto it = cfg.find(key);
  return it == cfg.end() ? nullptr : &*it;
}

class pbt_scheduler final : public trial_scheduler {
 public:
  pbt_scheduler(const pbt& o, std::string metric, mode m)
      : trial_scheduler(std::move(metric), m), o_(o), rng_(o.seed) {}
  const char* name() const override { return "pbt"; }

 protected:
  status do_add(const std::string& id, const config& cfg) override {
    for (auto& mu : o_.hyperparameter_mutations) {
      config copy = cfg;
      if (!find_key(copy, mu.key))
        return {errc::invalid_argument, "pbt: trial '" + id + "' has no hyperparameter '" + mu.key +
                                            "' named in hyperparameter_mutations"};
    }
    trials_.emplace(id, state{cfg, 0, 0, false, 0.0, static_cast<int64_t>(order_.size())});
    order_.push_back(id);
    return {};
  }

  verdict do_result(const std::string& id, int64_t t, double value) override {
    auto& me = trials_.at(id);
    if (t < o_.burn_in_period) return {};
    if (t - me.last_perturbation < o_.perturbation_interval) return {};
    me.has_score = true;
    me.last_score = score(value);
    me.last_iteration = t;
    me.last_perturbation = t;

    // Quantiles over trials with a score, worst first (ties: add order).
    std::vector<const std::string*> ranked;
    for (auto& id2 : order_) {
      auto it = trials_.find(id2);
      if (it != trials_.end() && it->second.has_score) ranked.push_back(&it->first);
    }
    std::stable_sort(ranked.begin(), ranked.end(), [&](const std::string* a, const std::string* b) {
      return trials_.at(*a).last_score < trials_.at(*b).last_score;
    });
    const size_t n = ranked.size();
    if (n <= 1) return {};
    size_t q = static_cast<size_t>(std::ceil(static_cast<double>(n) * o_.quantile_fraction - 1e-9));
    q = std::min(q, n / 2);
    bool lower = false;
    for (size_t i = 0; i < q; ++i)
      if (*ranked[i] == id) lower = true;
    if (!lower || q == 0) return {};
    const std::string donor = *ranked[n - q + rng_.below(q)];
    const auto& d = trials_.at(donor);
    std::vector<std::string> resample;
    config fresh = explore(d.cfg, resample);
    me.cfg = fresh;
    me.last_perturbation = d.last_perturbation;
    me.last_iteration = d.last_iteration;
    queue_resume(id);
    return {decision::pause, exploit_instruction{id, donor, d.last_iteration, std::move(fresh), std::move(resample)}};
  }

 public:
  void update_config(const std::string& id, const config& cfg) override {
    if (auto it = trials_.find(id); it != trials_.end()) it->second.cfg = cfg;
  }

 protected:

  void do_end(const std::string& id, bool errored) override {
    if (!errored) return;  // a completed trial stays a possible donor
    trials_.erase(id);
  }

 private:
  // The donor's configuration explored; the keys whose new values the user's functions
  // draw (where hooks run) go to `resample`.
  config explore(const config& from, std::vector<std::string>& resample) {
    config out = from;
    for (auto& mu : o_.hyperparameter_mutations) {
      nlohmann::json* v = find_key(out, mu.key);
      if (!v) continue;
      const double u = rng_.uniform();
      if (mu.drawn_by_function()) {
        if (u < o_.resample_probability || !v->is_number() || v->is_boolean()) {
          resample.push_back(mu.key);
        } else {
          const double f = o_.perturbation_factors[rng_.below(o_.perturbation_factors.size())];
          if (v->is_number_integer()) *v = static_cast<int64_t>(std::llround(v->get<double>() * f));  // as Ray's int(round())
          else *v = v->get<double>() * f;
        }
        continue;
      }
      if (!mu.options.empty()) {
        const auto pos = std::find(mu.options.begin(), mu.options.end(), *v);
        if (u < o_.resample_probability || pos == mu.options.end()) {
          *v = mu.options[rng_.below(mu.options.size())];
        } else {
          const int64_t shift = rng_.below(2) == 0 ? -1 : 1;
          const int64_t idx = std::clamp<int64_t>(pos - mu.options.begin() + shift, 0,
                                                  static_cast<int64_t>(mu.options.size()) - 1);
          *v = mu.options[idx];
        }
        continue;
      }
      if (u < o_.resample_probability || !v->is_number()) {
        if (mu.integer) {
          const auto lo = static_cast<int64_t>(std::ceil(mu.low)), hi = static_cast<int64_t>(std::floor(mu.high));
          *v = lo + static_cast<int64_t>(rng_.below(static_cast<uint64_t>(hi - lo + 1)));
        } else if (mu.log) {
          *v = std::exp(std::log(mu.low) + rng_.uniform() * (std::log(mu.high) - std::log(mu.low)));
        } else {
          *v = mu.low + rng_.uniform() * (mu.high - mu.low);
        }
      } else {
        const double f = o_.perturbation_factors[rng_.below(o_.perturbation_factors.size())];
        if (v->is_number_integer())
          *v = static_cast<int64_t>(v->get<double>() * f);  // truncated, as Ray's int()
        else
          *v = v->get<double>() * f;
      }
    }
    return out;
  }

  struct state {
    config cfg;
    int64_t last_perturbation = 0;
    int64_t last_iteration = 0;
    bool has_score = false;
    double last_score = 0;
    int64_t order = 0;
  };
  pbt o_;
  splitmix_rng rng_;
  std::unordered_map<std::string, state> trials_;
  std::vector<std::string> order_;
};

}  // namespace

expected<std::unique_ptr<trial_scheduler>> make_pbt(const pbt& o, std::string metric, mode m) {
  auto num = [](double x) { return std::to_string(x); };
  if (o.perturbation_interval < 1)
    return invalid("pbt", "perturbation_interval", ">= 1", std::to_string(o.perturbation_interval));
  if (o.burn_in_period < 0) return invalid("pbt", "burn_in_period", ">= 0", std::to_string(o.burn_in_period));
  if (!(o.quantile_fraction > 0 && o.quantile_fraction <= 0.5))
    return invalid("pbt", "quantile_fraction", "in (0, 0.5]", num(o.quantile_fraction));
  if (!(o.resample_probability >= 0 && o.resample_probability <= 1))
    return invalid("pbt", "resample_probability", "in [0, 1]", num(o.resample_probability));
  if (o.perturbation_factors.empty()) return invalid("pbt", "perturbation_factors", "non-empty", "an empty list");
  for (double f : o.perturbation_factors)
    if (!(f > 0) || !std::isfinite(f)) return invalid("pbt", "perturbation_factors", "all finite and > 0", num(f));
  if (o.hyperparameter_mutations.empty())
    return invalid("pbt", "hyperparameter_mutations", "non-empty (what may PBT change?)", "an empty list");
  for (auto& mu : o.hyperparameter_mutations) {
    const std::string name = "hyperparameter_mutations['" + mu.key + "']";
    if (mu.key.empty()) return invalid("pbt", "hyperparameter_mutations key", "non-empty", "\"\"");
    if (!mu.options.empty() || mu.drawn_by_function()) continue;
    if (!std::isfinite(mu.low) || !std::isfinite(mu.high) || !(mu.low < mu.high))
      return invalid("pbt", name, "a non-empty options list or a range with low < high",
                     "[" + num(mu.low) + ", " + num(mu.high) + "]");
    if (mu.log && !(mu.low > 0)) return invalid("pbt", name, "a log range with low > 0", num(mu.low));
    if (mu.integer && std::floor(mu.high) < std::ceil(mu.low))
      return invalid("pbt", name, "an integer range holding an integer", "[" + num(mu.low) + ", " + num(mu.high) + "]");
  }
  return std::unique_ptr<trial_scheduler>(new pbt_scheduler(o, std::move(metric), m));
}

}  // namespace tune::detail
