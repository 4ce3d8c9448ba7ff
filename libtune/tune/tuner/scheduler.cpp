// The trial scheduler protocol (id checks, pause/resume queues), FIFO, ASHA and the
// factory. Median stopping, HyperBand and PBT live in their own files.
#include "tune/tuner/scheduler.hpp"
#include "tune/core/pareto.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "tune/tuner/scheduler_impl.hpp"

namespace tune {

// ---- The protocol ----

status trial_scheduler::on_trial_add(const std::string& id, const config& cfg) {
  if (id.empty()) return {errc::invalid_argument, std::string(name()) + ": a trial id must not be empty"};
  if (states_.count(id))
    return {errc::already_exists, std::string(name()) + ": trial '" + id + "' was already added"};
  if (auto st = do_add(id, cfg); !st) return st;
  states_.emplace(id, trial_state::running);
  return {};
}

expected<verdict> trial_scheduler::on_result(const std::string& id, int64_t iteration, double value) {
  auto it = states_.find(id);
  if (it == states_.end())
    return status{errc::not_found, std::string(name()) + ": result from unknown trial '" + id + "'"};
  if (it->second == trial_state::ended)
    return status{errc::invalid_argument,
                  std::string(name()) + ": result from trial '" + id + "', which has already ended"};
  if (it->second == trial_state::paused) return verdict{decision::pause, std::nullopt};
  if (!std::isfinite(value))
    return status{errc::invalid_argument, std::string(name()) + ": trial '" + id + "' reported a non-finite " +
                                              metric_ + " (" + std::to_string(value) + "); report it as errored"};
  if (iteration < 0)
    return status{errc::invalid_argument, std::string(name()) + ": trial '" + id + "' reported iteration " +
                                              std::to_string(iteration) + " (must be >= 0)"};
  verdict v = do_result(id, iteration, value);
  if (v.action == decision::stop) it->second = trial_state::ended;
  if (v.action == decision::pause) it->second = trial_state::paused;
  return v;
}

expected<verdict> trial_scheduler::on_result(const std::string& id, int64_t iteration, double value,
                                            const std::vector<double>& others) {
  other_losses_.clear();
  if (!other_directions_.empty() && others.size() == other_directions_.size()) {
    bool finite = true;
    for (double o : others) finite = finite && std::isfinite(o);
    if (finite)
      for (std::size_t i = 0; i < others.size(); ++i)
        other_losses_.push_back(other_directions_[i] == mode::max ? -others[i] : others[i]);
  }
  auto v = on_result(id, iteration, value);
  other_losses_.clear();
  return v;
}

status trial_scheduler::end(const std::string& id, bool errored) {
  auto it = states_.find(id);
  if (it == states_.end())
    return {errc::not_found, std::string(name()) + ": " + (errored ? "error" : "completion") + " of unknown trial '" + id + "'"};
  if (it->second == trial_state::ended) return {};
  do_end(id, errored);
  it->second = trial_state::ended;
  return {};
}

status trial_scheduler::on_trial_complete(const std::string& id) { return end(id, false); }
status trial_scheduler::on_trial_error(const std::string& id) { return end(id, true); }

void trial_scheduler::on_no_more_trials() { do_no_more_trials(); }

std::optional<std::string> trial_scheduler::choose_trial_to_resume() {
  while (!resume_.empty()) {
    std::string id = std::move(resume_.front());
    resume_.pop_front();
    auto it = states_.find(id);
    if (it != states_.end() && it->second == trial_state::paused) {
      it->second = trial_state::running;
      return id;
    }
  }
  return std::nullopt;
}

std::vector<std::string> trial_scheduler::take_paused_to_stop() {
  std::vector<std::string> out;
  for (auto& id : stop_) {
    auto it = states_.find(id);
    if (it != states_.end() && it->second == trial_state::paused) {
      it->second = trial_state::ended;
      out.push_back(id);
    }
  }
  stop_.clear();
  return out;
}

expected<trial_scheduler::trial_state> trial_scheduler::state_of(const std::string& id) const {
  auto it = states_.find(id);
  if (it == states_.end()) return status{errc::not_found, std::string(name()) + ": unknown trial '" + id + "'"};
  return it->second;
}

void trial_scheduler::queue_resume(const std::string& id) { resume_.push_back(id); }
void trial_scheduler::queue_stop(const std::string& id) { stop_.push_back(id); }

// ---- FIFO ----

namespace {

class fifo_scheduler final : public trial_scheduler {
 public:
  using trial_scheduler::trial_scheduler;
  const char* name() const override { return "fifo"; }

 protected:
  status do_add(const std::string&, const config&) override { return {}; }
  verdict do_result(const std::string&, int64_t, double) override { return {}; }
  void do_end(const std::string&, bool) override {}
};

// ---- ASHA ----

class asha_scheduler final : public trial_scheduler {
 public:
  asha_scheduler(const asha& o, std::string metric, mode m) : trial_scheduler(std::move(metric), m), o_(o) {
    for (int64_t s = 0; s < o.brackets; ++s) {
      rungs_.push_back(asha_rungs(o, s));
      recorded_.emplace_back(rungs_.back().size());
    }
  }
  const char* name() const override { return "asha"; }

 protected:
  status do_add(const std::string& id, const config&) override {
    int64_t b = next_bracket_++ % o_.brackets;
    trials_.emplace(id, info{b, std::vector<bool>(rungs_[b].size(), false)});
    return {};
  }

  verdict do_result(const std::string& id, int64_t iteration, double value) override {
    if (iteration >= o_.max_t) return {decision::stop, std::nullopt};
    auto& t = trials_.at(id);
    const auto& rungs = rungs_[t.bracket];
    // The highest rung at or below this iteration.
    int64_t j = -1;
    for (int64_t k = static_cast<int64_t>(rungs.size()) - 1; k >= 0; --k)
      if (rungs[k] <= iteration) { j = k; break; }
    if (j < 0 || t.recorded[j]) return {};
    t.recorded[j] = true;
    if (!other_losses().empty()) return {kept_among_fronts(t.bracket, j, value) ? decision::go_on : decision::stop, std::nullopt};
    auto& vals = recorded_[t.bracket][j];
    const double sc = score(value);
    const auto better = std::count_if(vals.begin(), vals.end(), [&](double v) { return v > sc; });
    vals.push_back(sc);
    const int64_t keep = std::max<int64_t>(1, static_cast<int64_t>(vals.size()) / o_.reduction_factor);
    return {better < keep ? decision::go_on : decision::stop, std::nullopt};
  }

  // MO-ASHA: the trial's point joins the rung's; it goes on iff it is among the k kept
  // (whole fronts, the last by greedy hypervolume contribution).
  bool kept_among_fronts(int64_t bracket, int64_t rung, double value) {
    auto& pts = points_[{bracket, rung}];
    point p{-score(value)};
    p.insert(p.end(), other_losses().begin(), other_losses().end());
    pts.push_back(p);
    const std::size_t keep = std::max<std::size_t>(1, pts.size() / static_cast<std::size_t>(o_.reduction_factor));
    const auto kept = select_by_fronts(pts, keep);
    return std::find(kept.begin(), kept.end(), pts.size() - 1) != kept.end();
  }

  void do_end(const std::string&, bool) override {}  // recorded values stay

 private:
  struct info {
    int64_t bracket;
    std::vector<bool> recorded;
  };
  asha o_;
  std::vector<std::vector<int64_t>> rungs_;
  std::vector<std::vector<std::vector<double>>> recorded_;  // bracket, rung -> scores
  std::map<std::pair<int64_t, int64_t>, std::vector<point>> points_;  // MO-ASHA: bracket, rung -> losses
  std::unordered_map<std::string, info> trials_;
  int64_t next_bracket_ = 0;
};

}  // namespace

std::vector<int64_t> asha_rungs(const asha& o, int64_t s) {
  std::vector<int64_t> out;
  int64_t m = o.grace_period;
  for (int64_t i = 0; i < s; ++i) {
    if (m >= o.max_t) return out;
    m *= o.reduction_factor;
  }
  while (m < o.max_t) {
    out.push_back(m);
    if (m > o.max_t / o.reduction_factor) break;
    m *= o.reduction_factor;
  }
  return out;
}

namespace detail {

status invalid(const char* scheduler, const std::string& option, const std::string& rule, const std::string& got) {
  return {errc::invalid_argument, std::string(scheduler) + ": " + option + " must be " + rule + ", got " + got};
}

}  // namespace detail

expected<std::unique_ptr<trial_scheduler>> make_scheduler(const scheduler_spec& spec, std::string metric, mode m) {
  if (metric.empty()) return status{errc::invalid_argument, "scheduler: the metric name must not be empty"};
  using ptr = std::unique_ptr<trial_scheduler>;
  if (std::holds_alternative<fifo>(spec) || std::holds_alternative<std::shared_ptr<user_scheduler>>(spec))
    return ptr(new fifo_scheduler(std::move(metric), m));
  if (auto* o = std::get_if<asha>(&spec)) {
    using detail::invalid;
    if (o->max_t < 1) return invalid("asha", "max_t", ">= 1", std::to_string(o->max_t));
    if (o->grace_period < 1 || o->grace_period > o->max_t)
      return invalid("asha", "grace_period", ">= 1 and <= max_t (" + std::to_string(o->max_t) + ")",
                     std::to_string(o->grace_period));
    if (o->reduction_factor < 2) return invalid("asha", "reduction_factor", ">= 2", std::to_string(o->reduction_factor));
    if (o->brackets < 1) return invalid("asha", "brackets", ">= 1", std::to_string(o->brackets));
    return ptr(new asha_scheduler(*o, std::move(metric), m));
  }
  if (auto* o = std::get_if<hyperband>(&spec)) return detail::make_hyperband(*o, std::move(metric), m);
  if (auto* o = std::get_if<median_stopping>(&spec)) return detail::make_median(*o, std::move(metric), m);
  return detail::make_pbt(std::get<pbt>(spec), std::move(metric), m);
}

}  // namespace tune
