// The hooks of a C++ tuning script on a thread of their own (local_hooks), speaking the
// hook protocol of hooks.hpp: each event handled in order, user code guarded (an
// exception is a failure naming the hook and the trial).
#include "tune/tuner/hooks.hpp"

#include <cmath>
#include <exception>
#include <stdexcept>

#include "tune/core/clock.hpp"
#include "tune/core/json_text.hpp"

namespace tune {

namespace hook {

std::string describe(const failure& f) {
  std::string out = f.hook;
  if (!f.trial.empty()) out += " for " + f.trial;
  out += " " + (f.message.empty() ? std::string{"failed"} : f.message);
  return out;
}

}  // namespace hook

namespace {

// The value a PBT sample function drew, in the type the parameter had (Ray's rule: an
// integer stays an integer, rounded; a boolean stays a boolean).
nlohmann::json hook_as_before(const nlohmann::json& before, nlohmann::json drawn) {
  if (before.is_boolean() && drawn.is_number()) return drawn.get<double>() != 0;
  if (before.is_number_integer() && drawn.is_number_float()) return static_cast<int64_t>(std::llround(drawn.get<double>()));
  return drawn;
}

nlohmann::json* hook_pointer(nlohmann::json& cfg, const std::string& key) {
  try {
    auto p = nlohmann::json::json_pointer(key.empty() || key[0] != '/' ? "/" + key : key);
    return cfg.contains(p) ? &cfg[p] : nullptr;
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

}  // namespace

hook::interest local_hooks::interest_of(const local_hooks_setup& s) {
  hook::interest w;
  bool watches = !s.callbacks.empty() || !s.stoppers.empty() || s.search || s.scheduler;
  w.results = watches;
  w.trials = watches;
  w.suggests = static_cast<bool>(s.search);
  w.prepares = static_cast<bool>(s.resources);
  w.explores = static_cast<bool>(s.explore) || !s.samplers.empty();
  w.schedules = static_cast<bool>(s.scheduler);
  return w;
}

local_hooks::local_hooks(local_hooks_setup setup) : s_(std::move(setup)), wants_(interest_of(s_)) {}

local_hooks::~local_hooks() {
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

status local_hooks::start(std::function<void()> wake) {
  wake_ = std::move(wake);
  thread_ = std::thread([this] { run(); });
  return {};
}

void local_hooks::post(hook::event e) {
  {
    std::lock_guard lock{mu_};
    in_.push_back(std::move(e));
  }
  cv_.notify_one();
}

std::vector<hook::answer> local_hooks::take() {
  std::lock_guard lock{mu_};
  return std::exchange(out_, {});
}

void local_hooks::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock{mu_};
  cv_.wait_for(lock, timeout, [&] { return in_.empty() && !busy_; });
}

void local_hooks::run() {
  for (;;) {
    std::deque<hook::event> batch;
    {
      std::unique_lock lock{mu_};
      cv_.wait(lock, [&] { return stopping_ || !in_.empty(); });
      if (in_.empty()) return;
      batch.swap(in_);
      busy_ = true;
    }
    std::vector<hook::answer> answers;
    for (auto& e : batch) handle(e, answers);
    bool any = !answers.empty();
    {
      std::lock_guard lock{mu_};
      for (auto& a : answers) out_.push_back(std::move(a));
      busy_ = false;
    }
    cv_.notify_all();
    if (any && wake_) wake_();
  }
}

// Runs one user hook; an exception ends the hooks with a failure that names it (what
// follows is not run: the experiment ends).
template <class F>
bool local_hooks::guarded(const std::string& hook, const std::string& trial, std::vector<hook::answer>& out, F&& f) {
  if (failed_) return false;
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    out.push_back(hook::failure{hook, trial, std::string{"raised "} + e.what(), ""});
  } catch (...) {
    out.push_back(hook::failure{hook, trial, "raised an exception that is not a std::exception", ""});
  }
  failed_ = true;
  return false;
}

trial_info& local_hooks::trial(const std::string& id) {
  auto& t = trials_[id];
  t.id = id;
  return t;
}

std::vector<trial_info> local_hooks::all_trials() const {
  std::vector<trial_info> out;
  for (auto& [id, t] : trials_) out.push_back(t);
  return out;
}

void local_hooks::ask_scheduler_to_resume(std::vector<hook::answer>& out) {
  if (!s_.scheduler) return;
  std::vector<trial_info> paused;
  for (auto& [id, t] : trials_)
    if (t.state == trial_state::paused) paused.push_back(t);
  if (paused.empty()) return;
  std::optional<std::string> pick;
  if (!guarded(s_.scheduler->name() + ".choose_trial_to_resume", "", out,
               [&] { pick = s_.scheduler->choose_trial_to_resume(paused); }))
    return;
  if (pick) out.push_back(hook::decided{*pick, hook::decided::kind::resume, "resumed by " + s_.scheduler->name()});
}

void local_hooks::on_result(const hook::result& r, std::vector<hook::answer>& out) {
  auto& t = trial(r.trial);
  auto result = nlohmann::json::parse(r.metrics, nullptr, false);
  if (!result.is_object()) result = nlohmann::json::object();
  result["training_iteration"] = r.iteration;
  result["trial_id"] = r.trial;
  result["timestamp"] = r.time;
  if (t.started > 0) result["time_total_s"] = r.time - t.started;
  t.iteration = r.iteration;
  bool stopped = false;
  for (auto& s : s_.stoppers) {
    bool stop = false, all = false;
    if (!guarded(s->name(), r.trial, out, [&] {
          stop = (*s)(r.trial, result);
          all = s->stop_all();
        }))
      return;
    if (stop && !stopped) out.push_back(hook::decided{r.trial, hook::decided::kind::stop, "stopped by " + s->name()});
    stopped = stopped || stop;
    if (all) out.push_back(hook::stop_all{s->name() + ".stop_all() said so"});
  }
  if (s_.scheduler && !stopped) {
    decision d = decision::go_on;
    if (!guarded(s_.scheduler->name() + ".on_trial_result", r.trial, out,
                 [&] { d = s_.scheduler->on_trial_result(t, result); }))
      return;
    if (d == decision::stop) out.push_back(hook::decided{r.trial, hook::decided::kind::stop, "stopped by " + s_.scheduler->name()});
    if (d == decision::pause) out.push_back(hook::decided{r.trial, hook::decided::kind::pause, "paused by " + s_.scheduler->name()});
    stopped = d != decision::go_on;
  }
  if (s_.search && !stopped &&
      !guarded(s_.search->name() + ".on_trial_result", r.trial, out, [&] { s_.search->on_trial_result(r.trial, result); }))
    return;
  for (auto& c : s_.callbacks)
    if (!guarded(c->name() + ".on_trial_result", r.trial, out, [&] { c->on_trial_result(t, result); })) return;
  if (result.value(should_checkpoint, false) && !stopped)
    out.push_back(hook::decided{r.trial, hook::decided::kind::checkpoint, "a callback asked for one"});
  result.erase(should_checkpoint);
  t.last_result = std::move(result);
}

void local_hooks::handle(hook::event& e, std::vector<hook::answer>& out) {
  if (failed_) {
    if (std::holds_alternative<hook::end>(e)) out.push_back(hook::done{});
    return;
  }
  std::visit(
      [&](auto& ev) {
        using T = std::decay_t<decltype(ev)>;
        if constexpr (std::is_same_v<T, hook::setup>) {
          for (auto& t : ev.trials) trials_[t.id] = t;
          if (s_.search && ev.experiment.resumed && !s_.saved_state.empty())
            guarded(s_.search->name() + ".restore", "", out, [&] {
              if (auto st = s_.search->restore(s_.saved_state); !st) throw std::runtime_error(st.message());
            });
          for (auto& c : s_.callbacks) guarded(c->name() + ".setup", "", out, [&] { c->setup(ev.experiment); });
        } else if constexpr (std::is_same_v<T, hook::suggest>) {
          hook::suggestion s{ev.trial, hook::suggestion::kind::wait, {}};
          if (!s_.search) {
            out.push_back(hook::failure{"suggest", ev.trial, "was asked of hooks that hold no searcher", ""});
            failed_ = true;
            return;
          }
          if (!guarded(s_.search->name() + ".suggest", ev.trial, out, [&] {
                auto cfg = s_.search->suggest(ev.trial);
                if (cfg) s = {ev.trial, hook::suggestion::kind::config, std::move(*cfg)};
                else if (s_.search->finished()) s.what = hook::suggestion::kind::finished;
              }))
            return;
          out.push_back(std::move(s));
        } else if constexpr (std::is_same_v<T, hook::prepare>) {
          hook::prepared p{ev.trial, ev.cfg, nullptr, ""};
          if (s_.resources && !guarded("resources_fn", ev.trial, out, [&] { p.resources = s_.resources(ev.cfg); })) return;
          out.push_back(std::move(p));
        } else if constexpr (std::is_same_v<T, hook::explore>) {
          config cfg = ev.cfg;
          for (auto& key : ev.resample) {
            auto fn = s_.samplers.find(key);
            auto* v = hook_pointer(cfg, key);
            if (fn == s_.samplers.end() || !v) continue;
            if (!guarded("the sample function of mutation '" + key + "'", ev.trial, out, [&] { *v = hook_as_before(*v, fn->second()); }))
              return;
          }
          if (s_.explore && !guarded("explore_fn", ev.trial, out, [&] { cfg = s_.explore(cfg); })) return;
          out.push_back(hook::explored{ev.trial, std::move(cfg)});
        } else if constexpr (std::is_same_v<T, hook::trial_start>) {
          auto& t = trial(ev.trial);
          bool first = t.started == 0;
          t.cfg = ev.cfg;
          t.state = trial_state::running;
          if (first) t.started = wall_seconds();
          if (first && s_.scheduler && !guarded(s_.scheduler->name() + ".on_trial_add", ev.trial, out, [&] { s_.scheduler->on_trial_add(t); }))
            return;
          for (auto& c : s_.callbacks)
            if (!guarded(c->name() + (ev.restored_from >= 0 ? ".on_trial_restore" : ".on_trial_start"), ev.trial, out, [&] {
                  ev.restored_from >= 0 ? c->on_trial_restore(t) : c->on_trial_start(t);
                }))
              return;
        } else if constexpr (std::is_same_v<T, hook::result>) {
          on_result(ev, out);
        } else if constexpr (std::is_same_v<T, hook::checkpoint>) {
          auto& t = trial(ev.trial);
          t.checkpoint = ev.iteration;
          t.checkpoint_dir = ev.dir;
          for (auto& c : s_.callbacks)
            if (!guarded(c->name() + ".on_trial_save", ev.trial, out, [&] { c->on_trial_save(t); })) return;
        } else if constexpr (std::is_same_v<T, hook::trial_end>) {
          auto& t = trial(ev.trial);
          t.state = ev.recovering ? trial_state::running : ev.state;
          t.error = ev.error;
          const bool error = ev.state == trial_state::error;
          if (ev.state != trial_state::paused) {
            if (!ev.recovering && s_.search &&
                !guarded(s_.search->name() + ".on_trial_complete", ev.trial, out,
                         [&] { s_.search->on_trial_complete(ev.trial, t.last_result, error); }))
              return;
            if (!ev.recovering && s_.scheduler &&
                !guarded(s_.scheduler->name() + (error ? ".on_trial_error" : ".on_trial_complete"), ev.trial, out, [&] {
                  error ? s_.scheduler->on_trial_error(t) : s_.scheduler->on_trial_complete(t, t.last_result);
                }))
              return;
            for (auto& c : s_.callbacks) {
              auto which = ev.recovering ? ".on_trial_recover" : error ? ".on_trial_error" : ".on_trial_complete";
              if (!guarded(c->name() + which, ev.trial, out, [&] {
                    ev.recovering ? c->on_trial_recover(t) : error ? c->on_trial_error(t) : c->on_trial_complete(t);
                  }))
                return;
            }
          }
          ask_scheduler_to_resume(out);
        } else if constexpr (std::is_same_v<T, hook::save>) {
          if (!s_.search) return;
          std::string state;
          if (guarded(s_.search->name() + ".save", "", out, [&] { state = s_.search->save(); }))
            out.push_back(hook::saved{std::move(state)});
        } else if constexpr (std::is_same_v<T, hook::end>) {
          auto all = all_trials();
          for (auto& c : s_.callbacks) guarded(c->name() + ".on_experiment_end", "", out, [&] { c->on_experiment_end(all); });
          out.push_back(hook::done{});
        }
      },
      e);
}

}  // namespace tune
