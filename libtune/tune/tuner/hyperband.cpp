// Synchronous HyperBand (Li et al. 2017) with pause and resume.
#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "tune/core/pareto.hpp"
#include "tune/tuner/scheduler_impl.hpp"

namespace tune {

namespace {
int64_t ipow(int64_t b, int64_t e) {
  int64_t r = 1;
  while (e-- > 0) r *= b;
  return r;
}
int64_t s_max_of(const hyperband& o) {
  int64_t s = 0, p = 1;
  while (p <= o.max_t / o.reduction_factor) { p *= o.reduction_factor; ++s; }
  return s;
}
}  // namespace

expected<std::vector<hyperband_bracket>> hyperband_plan(const hyperband& o) {
  using detail::invalid;
  if (o.max_t < 1) return invalid("hyperband", "max_t", ">= 1", std::to_string(o.max_t));
  if (o.reduction_factor < 2) return invalid("hyperband", "reduction_factor", ">= 2", std::to_string(o.reduction_factor));
  const int64_t s_max = s_max_of(o);
  if (o.brackets < 0 || o.brackets > s_max + 1)
    return invalid("hyperband", "brackets",
                   "between 0 (all) and s_max + 1 = " + std::to_string(s_max + 1) + " for max_t " +
                       std::to_string(o.max_t) + " and reduction_factor " + std::to_string(o.reduction_factor),
                   std::to_string(o.brackets));
  const int64_t count = o.brackets == 0 ? s_max + 1 : o.brackets;
  std::vector<hyperband_bracket> plan;
  for (int64_t s = s_max; s > s_max - count; --s) {
    hyperband_bracket b{s, {}};
    const int64_t es = ipow(o.reduction_factor, s);
    const int64_t n = ((s_max + 1) * es + s) / (s + 1);  // ceil((s_max + 1) eta^s / (s + 1))
    for (int64_t i = 0; i <= s; ++i) {
      const int64_t ni = n / ipow(o.reduction_factor, i);
      int64_t r = i == s ? o.max_t
                         : std::max<int64_t>(1, std::llround(static_cast<double>(o.max_t) /
                                                             static_cast<double>(ipow(o.reduction_factor, s - i))));
      b.rungs.push_back({ni, r});
    }
    plan.push_back(std::move(b));
  }
  return plan;
}

namespace detail {
namespace {

class hyperband_scheduler final : public trial_scheduler {
 public:
  hyperband_scheduler(const hyperband& o, std::vector<hyperband_bracket> plan, std::string metric, mode m)
      : trial_scheduler(std::move(metric), m), o_(o), plan_(std::move(plan)) {}
  const char* name() const override { return "hyperband"; }

 protected:
  status do_add(const std::string& id, const config&) override {
    if (brackets_.empty() || brackets_.back().added == brackets_.back().capacity()) {
      bracket fresh;
      fresh.plan = plan_[next_template_++ % plan_.size()];
      brackets_.push_back(std::move(fresh));
    }
    auto& b = brackets_.back();
    ++b.added;
    b.live.push_back(id);
    where_[id] = brackets_.size() - 1;
    return {};
  }

  verdict do_result(const std::string& id, int64_t t, double value) override {
    auto& b = brackets_[where_.at(id)];
    if (t >= o_.max_t) {  // done: the last rung, or jumped past every rung
      leave(b, id);
      process(b, nullptr);
      return {decision::stop, std::nullopt};
    }
    if (t < b.plan.rungs[b.rung].r) return {};
    b.reached[id] = score(value);
    if (!other_losses().empty()) {
      point p{-score(value)};
      p.insert(p.end(), other_losses().begin(), other_losses().end());
      b.points[id] = std::move(p);
    }
    bool me = false;
    if (process(b, &id, &me)) return {me ? decision::go_on : decision::stop, std::nullopt};
    return {decision::pause, std::nullopt};
  }

  void do_end(const std::string& id, bool) override {
    auto& b = brackets_[where_.at(id)];
    leave(b, id);
    process(b, nullptr);
  }

  void do_no_more_trials() override {
    no_more_ = true;
    for (auto& b : brackets_) process(b, nullptr);
  }

 private:
  struct bracket {
    hyperband_bracket plan;
    int64_t added = 0;
    size_t rung = 0;
    std::vector<std::string> live;                   // in play at this rung, in add order
    std::unordered_map<std::string, double> reached;  // score at this rung
    std::unordered_map<std::string, point> points;    // several objectives: losses at this rung
    int64_t capacity() const { return plan.rungs[0].n; }
  };

  static void leave(bracket& b, const std::string& id) {
    b.live.erase(std::remove(b.live.begin(), b.live.end(), id), b.live.end());
    b.reached.erase(id);
    b.points.erase(id);
  }

  // When every live trial reached the rung (and no more can join): promote the best,
  // stop the rest. `current` is the trial whose result is being answered (not paused);
  // returns whether the rung was decided, `*current_goes_on` its fate.
  bool process(bracket& b, const std::string* current, bool* current_goes_on = nullptr) {
    if (b.live.empty() || b.rung + 1 >= b.plan.rungs.size()) return false;
    if (b.added < b.capacity() && !no_more_) return false;
    for (auto& id : b.live)
      if (!b.reached.count(id)) return false;
    const size_t keep = std::max<size_t>(1, b.live.size() / static_cast<size_t>(o_.reduction_factor));
    std::vector<std::string> order = ranked(b, keep);
    std::vector<std::string> winners;
    for (size_t i = 0; i < order.size(); ++i) {
      const bool win = i < keep;
      if (win) winners.push_back(order[i]);
      if (current && order[i] == *current) {
        *current_goes_on = win;
      } else if (win) {
        queue_resume(order[i]);
      } else {
        queue_stop(order[i]);
      }
    }
    // Keep add order among the winners.
    std::vector<std::string> live;
    for (auto& id : b.live)
      if (std::find(winners.begin(), winners.end(), id) != winners.end()) live.push_back(id);
    b.live = std::move(live);
    b.reached.clear();
    b.points.clear();
    ++b.rung;
    return true;
  }

  // The live trials, the `keep` to promote first: by the metric's score (add order
  // breaks ties), or with every one's objectives known by non-dominated fronts and
  // hypervolume (select_by_fronts).
  static std::vector<std::string> ranked(const bracket& b, size_t keep) {
    std::vector<std::string> order = b.live;
    bool all_points = !b.points.empty();
    for (auto& id : b.live) all_points = all_points && b.points.count(id);
    if (all_points) {
      std::vector<point> pts;
      for (auto& id : b.live) pts.push_back(b.points.at(id));
      std::vector<std::string> first;
      for (size_t i : select_by_fronts(pts, keep)) first.push_back(b.live[i]);
      for (auto& id : b.live)
        if (std::find(first.begin(), first.end(), id) == first.end()) first.push_back(id);
      return first;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](const std::string& x, const std::string& y) { return b.reached.at(x) > b.reached.at(y); });
    return order;
  }

  hyperband o_;
  std::vector<hyperband_bracket> plan_;
  size_t next_template_ = 0;
  std::vector<bracket> brackets_;
  std::unordered_map<std::string, size_t> where_;
  bool no_more_ = false;
};

}  // namespace

expected<std::unique_ptr<trial_scheduler>> make_hyperband(const hyperband& o, std::string metric, mode m) {
  auto plan = hyperband_plan(o);
  if (!plan) return plan.error();
  return std::unique_ptr<trial_scheduler>(new hyperband_scheduler(o, std::move(*plan), std::move(metric), m));
}

}  // namespace detail
}  // namespace tune
