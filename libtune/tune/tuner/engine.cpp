#include "tune/tuner/engine.hpp"

#include <cmath>
#include <cstdio>
#include <set>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

// An action about a trial that carries no configuration (stop, pause, checkpoint, suggest).
engine_action make_action(engine_action::kind what, std::string trial, std::string reason = {}) {
  engine_action a;
  a.what = what;
  a.trial = std::move(trial);
  a.reason = std::move(reason);
  return a;
}

}  // namespace

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
  auto rules = stop_rules::make(options.stoppers);
  if (!rules) return rules.error();
  if (options.hooks_suggest && options.max_suggestions < 0)
    return status{errc::invalid_argument, "max_suggestions must be 0 (until the searcher finishes) or more"};
  std::unique_ptr<experiment_engine> e{new experiment_engine(search, scheduler, std::move(options))};
  e->rules_ = std::move(*rules);
  e->watched_ = e->opt_.other_objectives;
  e->watched_.insert(e->watched_.end(), e->opt_.constraints.begin(), e->opt_.constraints.end());
  e->watched_.insert(e->watched_.end(), e->rules_.metrics().begin(), e->rules_.metrics().end());
  return e;
}

std::string experiment_engine::id_of(int n) const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d", n);
  return opt_.trial_prefix + buf;
}

std::string experiment_engine::next_id() { return id_of(++counter_); }

// The search learns of results and ends, unless the searcher is the hooks' (which hear of
// them there).
status experiment_engine::learn_result(const std::string& id, int64_t iteration, double v) {
  return opt_.hooks_suggest ? status::ok() : search_.on_result(id, iteration, v);
}

void experiment_engine::learn_complete(const std::string& id) {
  if (!opt_.hooks_suggest) (void)search_.on_complete(id);
}

status experiment_engine::learn_complete(const std::string& id, const std::vector<double>& values,
                                         const std::vector<double>& constraints) {
  return opt_.hooks_suggest ? status::ok() : search_.on_complete(id, values, constraints);
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
  if (!asking_.empty()) return false;
  for (auto& [id, t] : trials_)
    if (t.state == trial_state::running || t.state == trial_state::pending) return false;
  return done_;
}

bool experiment_engine::counts(const std::string& id, int64_t iteration) const {
  auto it = trials_.find(id);
  return it != trials_.end() && it->second.state == trial_state::running && !asked_.count(id) &&
         iteration > it->second.replay_until;
}

void experiment_engine::sweep_paused_to_stop() {
  for (auto& id : scheduler_.take_paused_to_stop()) {
    auto it = trials_.find(id);
    if (it == trials_.end()) continue;
    if (it->second.state == trial_state::paused) {
      set_state(it->second, trial_state::terminated);
      learn_complete(id);
    } else {
      stop_after_pause_.insert(id);  // still pausing: ends when its process does
    }
  }
}

engine_action experiment_engine::start_action(engine_trial& t) {
  auto a = make_action(engine_action::kind::start, t.id);
  a.cfg = t.cfg;
  a.request = t.request;
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

std::vector<engine_action> experiment_engine::stop_all(const std::string& reason) {
  std::vector<engine_action> out;
  if (over_budget_) return out;
  over_budget_ = true;
  stop_reason_ = reason;
  for (auto& [id, t] : trials_)
    if (t.state == trial_state::running && !asked_.count(id)) {
      asked_[id] = engine_action::kind::stop;
      out.push_back(make_action(engine_action::kind::stop, id, reason));
    }
  // Nothing asked for or being prepared will start: their ids are not used, or their
  // trials end before they ran.
  asking_.clear();
  unanswered_ids_.clear();
  for (auto id : std::set<std::string>(preparing_)) end_unstarted(id, trials_.at(id), trial_state::terminated, "");
  for (auto& [id, t] : trials_)
    if (t.state == trial_state::paused) {
      set_state(t, trial_state::terminated);
      (void)scheduler_.on_trial_complete(id);
      complete_search(id, t);
    }
  return out;
}

// A trial that never ran: ended here (its hooks' preparation failed, or the experiment
// stopped before it started).
void experiment_engine::end_unstarted(const std::string& id, engine_trial& t, trial_state s, const std::string& error) {
  preparing_.erase(id);
  set_state(t, s);
  t.error = error;
  learn_complete(id);
}

expected<engine_action> experiment_engine::new_trial(const std::string& id, config cfg) {
  auto& t = trials_[id];
  t.id = id;
  t.cfg = std::move(cfg);
  if (opt_.hooks_prepare) {
    preparing_.insert(id);
    auto a = make_action(engine_action::kind::prepare, id);
    a.cfg = t.cfg;
    return a;
  }
  if (auto st = scheduler_.on_trial_add(id, t.cfg); !st) return st;
  return start_action(t);
}

// The hooks' searcher is asked for as many configurations as there is room for (the
// ids answered "not now" first, so that ids stay in sequence).
void experiment_engine::ask_hooks(std::vector<engine_action>& out, int& now_running) {
  if (search_waits_ && now_ - last_wait_at_ < opt_.suggest_retry_s) return;
  search_waits_ = false;
  while (!search_done_ && now_running < opt_.max_concurrent &&
         (opt_.max_suggestions == 0 || suggested_ + static_cast<int>(asking_.size()) < opt_.max_suggestions)) {
    std::string id;
    if (!unanswered_ids_.empty()) {
      id = *unanswered_ids_.begin();
      unanswered_ids_.erase(unanswered_ids_.begin());
    } else {
      id = next_id();
    }
    asking_.insert(id);
    out.push_back(make_action(engine_action::kind::suggest, id));
    ++now_running;
  }
}

// A searcher that keeps answering "not now" while nothing runs, waits, or is asked for
// waits for something that will not come.
status experiment_engine::check_idle_searcher() {
  bool idle = opt_.hooks_suggest && !search_done_ && !over_budget_ && running() == 0 && preparing_.empty() &&
              exploring_.empty() && waited_;
  for (auto& [id, t] : trials_) idle = idle && t.state != trial_state::paused;
  if (!idle) {
    idle_since_.reset();
    return {};
  }
  if (!idle_since_) idle_since_ = now_;
  if (now_ - *idle_since_ < opt_.suggest_patience_s) return {};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "the searcher answered no configuration (not ready: None) for %g s while no trial ran or waited: it "
                "waits for something that will not come; a searcher with nothing more to suggest says so "
                "(Searcher.FINISHED)",
                opt_.suggest_patience_s);
  return {errc::inconsistent, buf};
}

expected<std::vector<engine_action>> experiment_engine::step(double now_s) {
  now_ = std::max(now_, now_s);
  std::vector<engine_action> out;
  if (opt_.time_budget_s && now_s > *opt_.time_budget_s && !over_budget_) {
    char why[96];
    std::snprintf(why, sizeof why, "the experiment's time budget of %g s is spent", *opt_.time_budget_s);
    out = stop_all(why);
  } else if (auto why = rules_.empty() ? std::string{} : rules_.stop_all(now_); !why.empty() && !over_budget_) {
    out = stop_all(why);
  }
  if (over_budget_) {
    done_ = out.empty() && running() == 0;
    return out;
  }
  // Counted once: each start below makes one more (a scan per start made a step with
  // many trials quadratic).
  int now_running = running() + static_cast<int>(asking_.size() + preparing_.size());
  for (bool progress = true; progress && now_running < opt_.max_concurrent;) {
    progress = false;
    std::optional<std::string> resume;
    if (!hook_resumes_.empty()) {
      resume = hook_resumes_.front();
      hook_resumes_.pop_front();
    } else {
      resume = scheduler_.choose_trial_to_resume();
    }
    if (resume) {
      auto it = trials_.find(*resume);
      if (it == trials_.end()) return status{errc::inconsistent, "the scheduler resumed unknown trial " + *resume};
      if (exploring_.count(*resume)) {
        resume_after_explore_.insert(*resume);  // started once its new configuration is known
      } else if (it->second.state == trial_state::paused) {
        out.push_back(start_action(it->second));
        ++now_running;
      } else {
        resume_after_pause_.insert(*resume);  // its process is still ending: started when it has
      }
      progress = true;
      continue;
    }
    if (search_done_) break;
    if (opt_.hooks_suggest) {
      ask_hooks(out, now_running);
      break;
    }
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
    auto a = new_trial(id, std::move(**cfg));
    if (!a) return a.error();
    out.push_back(std::move(*a));
    ++now_running;
    progress = true;
  }
  sweep_paused_to_stop();
  if (auto st = check_idle_searcher(); !st) return st;
  done_ = out.empty() && now_running == 0 && search_done_;
  return out;
}

expected<std::vector<engine_action>> experiment_engine::on_suggestion(const std::string& id, std::optional<config> cfg,
                                                                     bool finished) {
  if (!asking_.erase(id)) {
    if (over_budget_) return std::vector<engine_action>{};  // asked before the experiment stopped
    return status{errc::inconsistent, "the searcher answered for " + id + ", which it was not asked for"};
  }
  std::vector<engine_action> out;
  if (!cfg) {
    if (finished) {
      if (id == id_of(counter_)) --counter_;  // not used: the ids stay in sequence
      else unanswered_ids_.insert(id);
      search_done_ = true;
      scheduler_.on_no_more_trials();
      sweep_paused_to_stop();
    } else {
      unanswered_ids_.insert(id);
      search_waits_ = true;
      waited_ = true;
      last_wait_at_ = now_;
    }
    return out;
  }
  waited_ = false;
  if (opt_.accept_suggestion) {
    auto accepted = opt_.accept_suggestion(*cfg);
    if (!accepted) return status{accepted.error().code(), "the searcher's configuration for " + id + ": " + accepted.error().message()};
    cfg = std::move(*accepted);
  }
  ++suggested_;
  if (opt_.max_suggestions > 0 && suggested_ >= opt_.max_suggestions) {
    search_done_ = true;
    scheduler_.on_no_more_trials();
  }
  auto a = new_trial(id, std::move(*cfg));
  if (!a) return a.error();
  out.push_back(std::move(*a));
  return out;
}

expected<std::vector<engine_action>> experiment_engine::on_prepared(const std::string& id, config cfg,
                                                                   expected<std::optional<trial_resources>> request) {
  auto it = trials_.find(id);
  if (it == trials_.end() || !preparing_.count(id)) {
    if (it != trials_.end() && tune::finished(it->second.state)) return std::vector<engine_action>{};  // stopped meanwhile
    return status{errc::inconsistent, "the hooks prepared " + id + ", which was not being prepared"};
  }
  auto& t = it->second;
  if (!request) {
    end_unstarted(id, t, trial_state::error, request.error().message());
    return std::vector<engine_action>{};
  }
  preparing_.erase(id);
  t.cfg = std::move(cfg);
  t.request = std::move(*request);
  if (auto st = scheduler_.on_trial_add(id, t.cfg); !st) return st;
  return std::vector<engine_action>{start_action(t)};
}

expected<std::vector<engine_action>> experiment_engine::on_explored(const std::string& id, config cfg) {
  if (!exploring_.erase(id)) return std::vector<engine_action>{};  // ended meanwhile
  std::vector<engine_action> out;
  auto x = exploits_.find(id);
  auto& t = trials_.at(id);
  if (x != exploits_.end()) x->second.first = cfg;
  scheduler_.update_config(id, cfg);
  if (t.state == trial_state::paused) t.cfg = std::move(cfg);
  if (resume_after_explore_.erase(id)) {
    if (t.state == trial_state::paused) out.push_back(start_action(t));
    else resume_after_pause_.insert(id);
  }
  return out;
}

std::vector<engine_action> experiment_engine::stop_trial(const std::string& id, engine_trial& t, const std::string& reason) {
  (void)t;
  asked_[id] = engine_action::kind::stop;
  return {make_action(engine_action::kind::stop, id, reason)};
}

expected<std::vector<engine_action>> experiment_engine::on_decision(const std::string& id, engine_action::kind what,
                                                                   const std::string& reason) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return status{errc::not_found, "a decision about unknown trial " + id};
  auto& t = it->second;
  std::vector<engine_action> out;
  if (t.state == trial_state::paused && what == engine_action::kind::stop) {
    set_state(t, trial_state::terminated);
    (void)scheduler_.on_trial_complete(id);
    complete_search(id, t);
    return out;
  }
  if (t.state != trial_state::running || asked_.count(id)) return out;  // moved on meanwhile
  if (what == engine_action::kind::stop) return stop_trial(id, t, reason);
  if (what == engine_action::kind::pause) {
    asked_[id] = engine_action::kind::pause;
    out.push_back(make_action(engine_action::kind::pause, id, reason));
  } else if (what == engine_action::kind::checkpoint) {
    out.push_back(make_action(engine_action::kind::checkpoint, id, reason));
  }
  return out;
}

expected<std::vector<engine_action>> experiment_engine::on_resume(const std::string& id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return status{errc::not_found, "the scheduler resumed unknown trial " + id};
  if (over_budget_ || tune::finished(it->second.state)) return std::vector<engine_action>{};
  if (it->second.state == trial_state::running) {
    if (asked_.count(id) && asked_.at(id) == engine_action::kind::pause) resume_after_pause_.insert(id);
    return std::vector<engine_action>{};
  }
  hook_resumes_.push_back(id);
  return step(now_);
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
  if (rules_.empty() || !counts(id, iteration)) return on_metric(id, iteration, value);
  // The stop rules' values follow the other objectives' and the constraints'.
  const size_t first = opt_.other_objectives.size() + opt_.constraints.size();
  std::vector<std::optional<double>> read(rules_.metrics().size());
  for (size_t i = 0; i < read.size() && first + i < others.size(); ++i)
    if (others[first + i] && std::isfinite(*others[first + i])) read[i] = others[first + i];
  auto why = rules_.on_result(id, read);
  auto out = on_metric(id, iteration, value);
  if (!out) return out;
  auto& t = trials_.at(id);
  if (!why.empty() && t.state == trial_state::running && !asked_.count(id)) {
    auto more = stop_trial(id, t, why);
    out->insert(out->end(), more.begin(), more.end());
  }
  if (auto all = rules_.stop_all(now_); !all.empty()) {
    auto more = stop_all(all);
    out->insert(out->end(), more.begin(), more.end());
  }
  return out;
}

expected<std::vector<engine_action>> experiment_engine::on_result(const std::string& id, int64_t iteration,
                                                                  const nlohmann::json& metrics) {
  std::vector<std::optional<double>> others;
  for (const auto& name : watched_) {
    auto m = metrics.is_object() ? metrics.find(name) : metrics.end();
    others.push_back(metrics.is_object() && m != metrics.end() && m->is_number() ? std::optional<double>{m->get<double>()}
                                                                                : std::nullopt);
  }
  if (!metrics.is_object() || !metrics.contains(opt_.metric)) return on_metric(id, iteration, std::nullopt, others);
  const auto& m = metrics[opt_.metric];
  if (m.is_number()) return on_metric(id, iteration, m.get<double>(), others);
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
  return {make_action(engine_action::kind::stop, id, t.error)};
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
  if (auto st = learn_result(id, iteration, v); !st) return st;
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
    out.push_back(make_action(engine_action::kind::stop, id, reason));
  } else if (action == decision::pause) {
    asked_[id] = engine_action::kind::pause;
    if (auto& x = verdict->exploit) {
      exploits_[id] = {x->new_config, x->donor};
      // PBT's explore, finished by the hooks (its sample functions, its explore function):
      // the trial waits for its new configuration before it starts again.
      if (opt_.hooks_explore) {
        exploring_.insert(id);
        auto a = make_action(engine_action::kind::explore, id);
        a.cfg = x->new_config;
        a.restore_from = x->donor;
        a.resample = x->resample;
        out.push_back(std::move(a));
      }
    }
    out.push_back(make_action(engine_action::kind::pause, id,
                         verdict->exploit ? "exploits " + verdict->exploit->donor : std::string{"paused by "} + scheduler_.name()));
  }
  sweep_paused_to_stop();
  return out;
}

void experiment_engine::on_checkpoint(const std::string& id, int64_t iteration) {
  if (auto it = trials_.find(id); it != trials_.end()) it->second.checkpoint = std::max(it->second.checkpoint, iteration);
}

bool experiment_engine::fail_ended(const std::string& id, const std::string& error) {
  auto it = trials_.find(id);
  if (it == trials_.end() || it->second.state != trial_state::terminated) return false;
  set_state(it->second, trial_state::error);
  it->second.error = error;
  return true;
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
    if (auto x = exploits_.find(id); x != exploits_.end() && !exploring_.count(id)) t.cfg = x->second.first;
    if (stop_after_pause_.erase(id)) {
      set_state(t, trial_state::terminated);
      exploring_.erase(id);
      complete_search(id, t);
    } else if (resume_after_pause_.erase(id)) {
      if (exploring_.count(id)) resume_after_explore_.insert(id);
      else out.push_back(start_action(t));
    }
    return out;
  }
  if (asked == engine_action::kind::stop) {
    set_state(t, t.error.empty() ? trial_state::terminated : trial_state::error);
    if (t.error.empty()) (void)scheduler_.on_trial_complete(id);
    else (void)scheduler_.on_trial_error(id);
    if (t.error.empty()) complete_search(id, t);
    else learn_complete(id);
  } else if (auto missing = first_unreported(t); ok && !missing.empty()) {
    set_state(t, trial_state::error);
    t.error = "it ended without reporting " + missing + (error.empty() ? "" : " (" + error + ")");
    (void)scheduler_.on_trial_error(id);
    learn_complete(id);
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
    learn_complete(id);
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
    learn_complete(id);
    return;
  }
  if (!first_unreported(t).empty()) {
    learn_complete(id);
    return;
  }
  std::vector<double> values{*t.value}, constraints;
  const std::size_t k = opt_.other_objectives.size();
  for (std::size_t i = 0; i < t.others.size(); ++i) (i < k ? values : constraints).push_back(*t.others[i]);
  (void)learn_complete(id, values, constraints);
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
