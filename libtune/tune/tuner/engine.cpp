#include "tune/tuner/engine.hpp"

#include <cmath>
#include <cstdio>
#include <set>

#include "tune/core/json_text.hpp"

namespace tune {

expected<std::unique_ptr<experiment_engine>> experiment_engine::make(search_algorithm& search,
                                                                     trial_scheduler& scheduler,
                                                                     engine_options options) {
  if (options.metric.empty()) return status{errc::invalid_argument, "no metric: say which reported metric to tune"};
  if (options.max_concurrent < 1)
    return status{errc::invalid_argument,
                  "max_concurrent must be at least 1, not " + std::to_string(options.max_concurrent)};
  if (options.max_failures < 0)
    return status{errc::invalid_argument, "max_failures must be 0 (no restarts) or more, not " +
                                              std::to_string(options.max_failures)};
  // (A model-based search's mode is its own option: the tuner builds it from the same
  // settings. Random and grid search have none that matters.)
  if (scheduler.metric() != options.metric || scheduler.metric_mode() != options.direction)
    return status{errc::invalid_argument, "the scheduler must tune the same metric and mode as the experiment (" +
                                              options.metric + ")"};
  (void)search;
  if (!options.other_directions.empty() && options.other_directions.size() != options.other_objectives.size())
    return status{errc::invalid_argument, "other_directions: give one direction per other objective"};
  scheduler.set_other_objectives(options.other_directions);
  if (options.time_budget_s && !(*options.time_budget_s > 0))
    return status{errc::invalid_argument, "the time budget must be a positive number of seconds"};
  if (options.stop.max_time_s && !(*options.stop.max_time_s > 0))
    return status{errc::invalid_argument, "the stop criterion max_time_s must be a positive number of seconds"};
  if (options.stop.max_iterations && *options.stop.max_iterations < 1)
    return status{errc::invalid_argument, "the stop criterion max_iterations must be at least 1"};
  return std::unique_ptr<experiment_engine>{new experiment_engine(search, scheduler, std::move(options))};
}

std::string experiment_engine::next_id() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d", ++counter_);
  return opt_.trial_prefix + buf;
}

int experiment_engine::running() const { return running_; }

// Every change of a trial's state goes through here: the count of running trials is
// kept (a step with many trials does not scan them all).
void experiment_engine::set_state(engine_trial& t, trial_state s) {
  running_ += (s == trial_state::running) - (t.state == trial_state::running);
  t.state = s;
}

bool experiment_engine::finished() const {
  if (!search_done_ && !over_budget_) return false;
  for (auto& [id, t] : trials_)
    if (t.state == trial_state::running || t.state == trial_state::pending) return false;
  return done_;
}

void experiment_engine::sweep_paused_to_stop() {
  for (auto& id : scheduler_.take_paused_to_stop()) {
    auto it = trials_.find(id);
    if (it == trials_.end()) continue;
    if (it->second.state == trial_state::paused) {
      set_state(it->second, trial_state::terminated);
      (void)search_.on_complete(id);
    } else {
      stop_after_pause_.insert(id);  // still pausing: ends when its process does
    }
  }
}

engine_action experiment_engine::start_action(engine_trial& t) {
  engine_action a{engine_action::kind::start, t.id, t.cfg, "", -1, ""};
  if (auto x = exploits_.find(t.id); x != exploits_.end()) {
    auto& donor = trials_[x->second.second];
    a.restore_from = donor.id;
    a.restore_iteration = donor.checkpoint;
    exploits_.erase(x);
  } else if (t.starts > 0) {
    if (t.checkpoint >= 0) {
      a.restore_from = t.id;
      a.restore_iteration = t.checkpoint;
    }
    t.replay_until = t.iteration;  // it may report again what came after that checkpoint (or all)
  }
  set_state(t, trial_state::running);
  t.started_at = now_;
  ++t.starts;
  return a;
}

expected<std::vector<engine_action>> experiment_engine::step(double now_s) {
  now_ = std::max(now_, now_s);
  std::vector<engine_action> out;
  if (opt_.time_budget_s && now_s > *opt_.time_budget_s && !over_budget_) {
    over_budget_ = true;
    char why[96];
    std::snprintf(why, sizeof why, "the experiment's time budget of %g s is spent", *opt_.time_budget_s);
    for (auto& [id, t] : trials_)
      if (t.state == trial_state::running && !asked_.count(id)) {
        asked_[id] = engine_action::kind::stop;
        out.push_back({engine_action::kind::stop, id, {}, "", -1, why});
      }
  }
  if (over_budget_) {
    done_ = out.empty() && running() == 0;
    return out;
  }
  // Counted once: each start below makes one more (a scan per start made a step with
  // many trials quadratic).
  int now_running = running();
  for (bool progress = true; progress && now_running < opt_.max_concurrent;) {
    progress = false;
    if (auto id = scheduler_.choose_trial_to_resume()) {
      auto it = trials_.find(*id);
      if (it == trials_.end()) return status{errc::inconsistent, "the scheduler resumed unknown trial " + *id};
      if (it->second.state == trial_state::paused) {
        out.push_back(start_action(it->second));
        ++now_running;
      } else {
        resume_after_pause_.insert(*id);  // its process is still ending: started when it has
      }
      progress = true;
      continue;
    }
    if (search_done_) break;
    auto id = next_id();
    auto cfg = search_.suggest(id);
    if (!cfg) return cfg.error();
    if (!*cfg) {
      --counter_;  // the id was not used
      if (search_.finished()) {
        search_done_ = true;
        scheduler_.on_no_more_trials();
        sweep_paused_to_stop();
        progress = true;  // HyperBand may now resume what it waited with
      }
      continue;
    }
    if (auto st = scheduler_.on_trial_add(id, **cfg); !st) return st;
    auto& t = trials_[id];
    t.id = id;
    t.cfg = **cfg;
    out.push_back(start_action(t));
    ++now_running;
    progress = true;
  }
  sweep_paused_to_stop();
  done_ = out.empty() && now_running == 0 && search_done_;
  return out;
}

namespace {
std::string number_text(double v) { return json_text(nlohmann::json(v)); }
}  // namespace

// A result's values of the other objectives and constraints, kept as the trial's
// latest (a trial not running, or replaying what it reported before, keeps its own).
void experiment_engine::record_others(const std::string& id, int64_t iteration,
                                      const std::vector<std::optional<double>>& others) {
  auto it = trials_.find(id);
  if (it == trials_.end() || it->second.state != trial_state::running || iteration <= it->second.replay_until) return;
  auto& t = it->second;
  t.others.resize(opt_.other_objectives.size() + opt_.constraints.size());
  for (std::size_t i = 0; i < others.size() && i < t.others.size(); ++i)
    if (others[i] && std::isfinite(*others[i])) t.others[i] = others[i];
}

expected<std::vector<engine_action>> experiment_engine::on_metric(const std::string& id, int64_t iteration,
                                                                  std::optional<double> value,
                                                                  const std::vector<std::optional<double>>& others) {
  record_others(id, iteration, others);
  return on_metric(id, iteration, value);
}

expected<std::vector<engine_action>> experiment_engine::on_result(const std::string& id, int64_t iteration,
                                                                  const nlohmann::json& metrics) {
  if (!opt_.other_objectives.empty() || !opt_.constraints.empty()) {
    std::vector<std::optional<double>> others;
    auto read = [&](const std::string& name) {
      auto m = metrics.is_object() ? metrics.find(name) : metrics.end();
      others.push_back(metrics.is_object() && m != metrics.end() && m->is_number() ? std::optional<double>{m->get<double>()}
                                                                                  : std::nullopt);
    };
    for (const auto& n : opt_.other_objectives) read(n);
    for (const auto& n : opt_.constraints) read(n);
    record_others(id, iteration, others);
  }
  if (!metrics.is_object() || !metrics.contains(opt_.metric)) return on_metric(id, iteration, std::nullopt);
  const auto& m = metrics[opt_.metric];
  if (m.is_number()) return on_metric(id, iteration, m.get<double>());
  // Not a number at all: the trial is stopped with what it reported.
  auto it = trials_.find(id);
  if (it == trials_.end()) return status{errc::not_found, "a result of unknown trial " + id};
  auto& t = it->second;
  t.iteration = std::max(t.iteration, iteration);
  if (t.state != trial_state::running || asked_.count(id)) return std::vector<engine_action>{};
  return stop_for_value(id, t, json_text(m));
}

std::vector<engine_action> experiment_engine::stop_for_value(const std::string& id, engine_trial& t,
                                                             const std::string& shown) {
  t.error = "it reported " + opt_.metric + " = " + shown + ", not a finite number";
  asked_[id] = engine_action::kind::stop;
  return {{engine_action::kind::stop, id, {}, "", -1, t.error}};
}

expected<std::vector<engine_action>> experiment_engine::on_metric(const std::string& id, int64_t iteration,
                                                                  std::optional<double> value) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return status{errc::not_found, "a result of unknown trial " + id};
  auto& t = it->second;
  t.iteration = std::max(t.iteration, iteration);
  if (t.state != trial_state::running || asked_.count(id)) return std::vector<engine_action>{};  // late: recorded only
  if (iteration <= t.replay_until) return std::vector<engine_action>{};  // seen before its restart
  if (!value) return std::vector<engine_action>{};
  double v = *value;
  if (!std::isfinite(v)) return stop_for_value(id, t, number_text(v));
  t.value = v;
  if (auto st = search_.on_result(id, iteration, v); !st) return st;
  std::vector<double> others;  // the other objectives' latest values, when all are known
  if (!opt_.other_directions.empty())
    for (std::size_t i = 0; i < opt_.other_objectives.size() && i < t.others.size() && t.others[i]; ++i)
      others.push_back(*t.others[i]);
  auto verdict = opt_.other_directions.empty() ? scheduler_.on_result(id, iteration, v)
                                               : scheduler_.on_result(id, iteration, v, others);
  if (!verdict) return verdict.error();
  auto action = verdict->action;
  std::vector<engine_action> out;
  std::string reason;
  if (action == decision::go_on) {
    if (opt_.stop.max_iterations && iteration >= *opt_.stop.max_iterations) {
      action = decision::stop;
      reason = "reached " + std::to_string(*opt_.stop.max_iterations) + " iterations";
    } else if (opt_.stop.metric_threshold && !better(opt_.direction, *opt_.stop.metric_threshold, v)) {
      action = decision::stop;
      reason = "reached " + opt_.metric + " " + number_text(v);
    } else if (opt_.stop.max_time_s && t.started_at >= 0 && t.run_s + (now_ - t.started_at) >= *opt_.stop.max_time_s) {
      action = decision::stop;
      char buf[96];
      std::snprintf(buf, sizeof buf, "ran for its %g s", *opt_.stop.max_time_s);
      reason = buf;
    }
  } else if (action == decision::stop) {
    // (A scheduler also stops a trial that reached its max_t: not early then.)
    reason = std::string{"stopped by "} + scheduler_.name() + " at iteration " + std::to_string(iteration);
  }
  if (action == decision::stop) {
    asked_[id] = engine_action::kind::stop;
    out.push_back({engine_action::kind::stop, id, {}, "", -1, reason});
  } else if (action == decision::pause) {
    asked_[id] = engine_action::kind::pause;
    if (verdict->exploit) exploits_[id] = {verdict->exploit->new_config, verdict->exploit->donor};
    out.push_back({engine_action::kind::pause, id, {}, "", -1,
                   verdict->exploit ? "exploits " + verdict->exploit->donor : std::string{"paused by "} + scheduler_.name()});
  }
  sweep_paused_to_stop();
  return out;
}

void experiment_engine::on_checkpoint(const std::string& id, int64_t iteration) {
  if (auto it = trials_.find(id); it != trials_.end()) it->second.checkpoint = std::max(it->second.checkpoint, iteration);
}

expected<std::vector<engine_action>> experiment_engine::on_ended(const std::string& id, bool ok, const std::string& error) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return status{errc::not_found, "the end of unknown trial " + id};
  auto& t = it->second;
  if (t.state != trial_state::running) return std::vector<engine_action>{};  // told twice: nothing more
  if (t.started_at >= 0) t.run_s += std::max(0.0, now_ - t.started_at);
  t.started_at = -1;
  std::optional<engine_action::kind> asked;
  if (auto a = asked_.find(id); a != asked_.end()) {
    asked = a->second;
    asked_.erase(a);
  }
  std::vector<engine_action> out;
  if (asked == engine_action::kind::pause) {
    set_state(t, trial_state::paused);
    if (auto x = exploits_.find(id); x != exploits_.end()) t.cfg = x->second.first;
    if (stop_after_pause_.erase(id)) {
      set_state(t, trial_state::terminated);
      complete_search(id, t);
    } else if (resume_after_pause_.erase(id)) {
      out.push_back(start_action(t));
    }
    return out;
  }
  if (asked == engine_action::kind::stop) {
    set_state(t, t.error.empty() ? trial_state::terminated : trial_state::error);
    if (t.error.empty()) (void)scheduler_.on_trial_complete(id);
    else (void)scheduler_.on_trial_error(id);
    if (t.error.empty()) complete_search(id, t);
    else (void)search_.on_complete(id);
  } else if (auto missing = first_unreported(t); ok && !missing.empty()) {
    set_state(t, trial_state::error);
    t.error = "it ended without reporting " + missing + (error.empty() ? "" : " (" + error + ")");
    (void)scheduler_.on_trial_error(id);
    (void)search_.on_complete(id);
  } else if (ok) {
    set_state(t, trial_state::terminated);
    (void)scheduler_.on_trial_complete(id);
    complete_search(id, t);
  } else if (t.failures < opt_.max_failures && !over_budget_) {
    // Started again at once (its slot is free), from its latest checkpoint.
    ++t.failures;
    t.last_failure = error.empty() ? "its process failed" : error;
    out.push_back(start_action(t));
    return out;
  } else {
    set_state(t, trial_state::error);
    t.error = error.empty() ? "its process failed" : error;
    if (t.failures > 0) t.error += " (failed " + std::to_string(t.failures + 1) + " times)";
    (void)scheduler_.on_trial_error(id);
    (void)search_.on_complete(id);
  }
  sweep_paused_to_stop();
  return out;
}

// The metric, or another objective or a constraint, the trial never reported; empty
// when it reported them all.
bool experiment_engine::meets_constraints(const engine_trial& t) const {
  const std::size_t k = opt_.other_objectives.size();
  for (std::size_t c = 0; c < opt_.constraints.size(); ++c)
    if (k + c >= t.others.size() || !t.others[k + c] || *t.others[k + c] > 0) return false;
  return true;
}

std::string experiment_engine::first_unreported(const engine_trial& t) const {
  if (!t.value && !opt_.metric.empty()) return opt_.metric;
  const std::size_t k = opt_.other_objectives.size();
  for (std::size_t i = 0; i < k + opt_.constraints.size(); ++i)
    if (i >= t.others.size() || !t.others[i]) return i < k ? opt_.other_objectives[i] : opt_.constraints[i - k];
  return {};
}

// The search learns the trial's outcome: its metric's value, or with several
// objectives or constraints all of them (a trial without them all is forgotten).
void experiment_engine::complete_search(const std::string& id, const engine_trial& t) {
  if (opt_.other_objectives.empty() && opt_.constraints.empty()) {
    (void)search_.on_complete(id);
    return;
  }
  if (!first_unreported(t).empty()) {
    (void)search_.on_complete(id);
    return;
  }
  std::vector<double> values{*t.value}, constraints;
  const std::size_t k = opt_.other_objectives.size();
  for (std::size_t i = 0; i < t.others.size(); ++i) (i < k ? values : constraints).push_back(*t.others[i]);
  (void)search_.on_complete(id, values, constraints);
}

expected<std::vector<engine_action>> experiment_engine::on_interrupted(const std::string& id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return status{errc::not_found, "the interruption of unknown trial " + id};
  auto& t = it->second;
  if (t.state != trial_state::running) return std::vector<engine_action>{};
  if (asked_.count(id)) return on_ended(id, true);  // what it was asked to do is done
  if (t.started_at >= 0) t.run_s += std::max(0.0, now_ - t.started_at);
  return std::vector<engine_action>{start_action(t)};
}

}  // namespace tune
