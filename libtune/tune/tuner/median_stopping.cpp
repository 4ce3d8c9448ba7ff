// Median stopping rule (Golovin et al. 2017), as Ray's MedianStoppingRule decides it.
#include <algorithm>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tune/tuner/scheduler_impl.hpp"

namespace tune::detail {
namespace {

class median_scheduler final : public trial_scheduler {
 public:
  median_scheduler(const median_stopping& o, std::string metric, mode m)
      : trial_scheduler(std::move(metric), m), o_(o) {}
  const char* name() const override { return "median_stopping"; }

 protected:
  status do_add(const std::string& id, const config&) override {
    trials_[id];
    return {};
  }

  verdict do_result(const std::string& id, int64_t t, double value) override {
    auto& me = trials_.at(id);
    const double sc = score(value);
    me.results.emplace_back(t, sc);
    me.best = std::max(me.best, sc);
    if (t < o_.grace_period) return {};
    std::vector<double> means;
    for (auto& [other, rec] : trials_) {
      if (other == id || rec.results.empty() || rec.results.back().first < t) continue;
      double sum = 0;
      int64_t n = 0;
      for (auto& [it, v] : rec.results)
        if (it >= o_.grace_period && it <= t) { sum += v; ++n; }
      if (n > 0) means.push_back(sum / static_cast<double>(n));
    }
    if (static_cast<int64_t>(means.size()) < o_.min_samples_required) return {};
    std::sort(means.begin(), means.end());
    const size_t k = means.size();
    const double median = k % 2 ? means[k / 2] : (means[k / 2 - 1] + means[k / 2]) / 2;
    if (t > o_.grace_period && me.best < median) return {decision::stop, std::nullopt};
    return {};
  }

  void do_end(const std::string& id, bool errored) override {
    if (errored) trials_.erase(id);
  }

 private:
  struct record {
    std::vector<std::pair<int64_t, double>> results;  // (iteration, score)
    double best = -std::numeric_limits<double>::infinity();
  };
  median_stopping o_;
  std::unordered_map<std::string, record> trials_;
};

}  // namespace

expected<std::unique_ptr<trial_scheduler>> make_median(const median_stopping& o, std::string metric, mode m) {
  if (o.grace_period < 0) return invalid("median_stopping", "grace_period", ">= 0", std::to_string(o.grace_period));
  if (o.min_samples_required < 1)
    return invalid("median_stopping", "min_samples_required", ">= 1", std::to_string(o.min_samples_required));
  return std::unique_ptr<trial_scheduler>(new median_scheduler(o, std::move(metric), m));
}

}  // namespace tune::detail
