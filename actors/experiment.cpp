#include "experiment.hpp"

#include <map>

namespace tune {

namespace {

using clock_type = std::chrono::steady_clock;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct live_trial {
  std::string group;
  caf::actor actor;
  bool stop_pending = false;  // asked to stop or pause before its first event came
  std::map<int64_t, std::string> checkpoints;  // iteration -> path on its node
};

}  // namespace

expected<experiment_summary> run_experiment(cluster_client& client, experiment_engine& engine,
                                            experiment_store& store, const experiment_run_options& opt) {
  auto t0 = clock_type::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock_type::now() - t0).count(); };
  std::map<std::string, live_trial> live;
  std::vector<result_row> pending_results;
  experiment_summary sum;
  // A trial that could not start: its group goes back, it ends with the reason.
  auto fail_trial = [&](const std::string& id, const std::string& why) -> status {
    auto& lt = live[id];
    if (!lt.group.empty()) {
      (void)client.remove_group(lt.group);
      lt.group.clear();
    }
    (void)store.update_trial(id, "error", why);
    auto more = engine.on_ended(id, false, why);  // a trial that never ran: nothing to resume
    return more ? status::ok() : more.error();
  };

  // Carries out the engine's actions (a start may fail at once: the trial is then ended
  // with the reason, and its actions carried out in turn).
  std::function<status(std::vector<engine_action>)> act = [&](std::vector<engine_action> actions) -> status {
    for (auto& a : actions) {
      auto& lt = live[a.trial];
      if (a.what == engine_action::kind::start) {
        if (lt.group.empty()) {
          auto made = client.create_group({"", opt.strat, opt.bundles, false});
          if (!made) return made.error();  // a bad resource request: the whole experiment
          lt.group = made->id;
          if (auto st = store.add_trial(a.trial, a.cfg, "pending"); !st && st.code() != errc::already_exists) return st;
          auto ready = client.wait_ready(lt.group, opt.group_timeout);
          if (!ready) {
            if (auto st = fail_trial(a.trial, ready.error().message()); !st) return st;
            continue;
          }
        }
        std::string restore;
        if (!a.restore_from.empty()) {
          auto& from = live[a.restore_from].checkpoints;
          if (auto c = from.find(a.restore_iteration); c != from.end()) restore = c->second;
        }
        auto started = client.start_trial({a.trial, lt.group, 0, opt.program, {}, a.cfg.dump(), restore});
        if (!started) {
          if (auto st = fail_trial(a.trial, started.error().message()); !st) return st;
          continue;
        }
        auto info = nlohmann::json::parse(*started, nullptr, false);
        nlohmann::json keep = nlohmann::json::object();
        if (info.is_object())
          for (auto key : {"pid", "node", "gpus", "trial_dir"})
            if (info.contains(key)) keep[key] = info[key];
        if (!restore.empty()) keep["restored_from"] = restore;
        if (a.restore_from != a.trial && !a.restore_from.empty())  // PBT: another trial's state, a new config
          (void)store.add_event(a.trial, "exploit", {{"donor", a.restore_from}, {"config", a.cfg}});
        if (auto st = store.update_trial(a.trial, "running", "", keep); !st) return st;
        // The config may have changed (PBT): the store keeps the one it runs with now.
      } else {
        if (lt.actor) client.stop_trial(lt.actor, opt.stop_grace);  // stop and pause both end the process
        else lt.stop_pending = true;
        (void)store.add_event(a.trial, a.what == engine_action::kind::stop ? "stop" : "pause", {{"reason", a.reason}});
      }
    }
    return status::ok();
  };

  progress_snapshot last_shown;
  auto last_progress = clock_type::now() - opt.progress_every;
  auto show = [&](bool force) {
    if (!opt.on_progress || (!force && clock_type::now() - last_progress < opt.progress_every)) return;
    progress_snapshot s;
    s.experiment = opt.name;
    s.metric = engine.options().metric;
    s.direction = engine.options().direction;
    s.elapsed_s = elapsed();
    for (auto& [id, t] : engine.trials()) s.trials.push_back({id, t.state, t.iteration, t.value, t.cfg, t.error});
    last_progress = clock_type::now();
    opt.on_progress(s);
  };

  for (;;) {
    auto actions = engine.step(elapsed());
    if (!actions) return actions.error();
    if (auto st = act(*actions); !st) return st;
    if (engine.finished()) break;
    // Events until a short pause, then store the results of this round in one go.
    for (auto e = client.next_trial_event(std::chrono::milliseconds(50)); e;
         e = client.next_trial_event(std::chrono::milliseconds(0))) {
      auto body = nlohmann::json::parse(e->json, nullptr, false);
      if (!body.is_object() || !live.count(e->trial_id)) continue;
      auto& lt = live[e->trial_id];
      lt.actor = e->trial;
      if (lt.stop_pending && e->kind != "ended") {
        lt.stop_pending = false;
        client.stop_trial(lt.actor, opt.stop_grace);
      }
      if (e->kind == "result") {
        int64_t it = body.value("iteration", int64_t{0});
        pending_results.push_back({e->trial_id, it, wall_now(), body["metrics"]});
        auto more = engine.on_result(e->trial_id, it, body["metrics"]);
        if (!more) return more.error();
        if (auto st = act(*more); !st) return st;
      } else if (e->kind == "checkpoint") {
        int64_t it = body.value("iteration", int64_t{-1});
        lt.checkpoints[it] = body.value("path", "");
        engine.on_checkpoint(e->trial_id, it);
        (void)store.add_event(e->trial_id, "checkpoint", body);
      } else if (e->kind == "ended") {
        if (!pending_results.empty()) {  // its last results before its end
          if (auto n = store.add_results(pending_results); !n) return n.error();
          pending_results.clear();
        }
        bool ok = body.value("ok", false) || body.value("stopped", false);
        auto error = body.value("error", std::string{});
        auto more = engine.on_ended(e->trial_id, ok, error);
        if (!more) return more.error();
        auto& t = engine.trials().at(e->trial_id);
        nlohmann::json info{{"exit", body.value("exit", "")},
                            {"results", body.value("results", 0)},
                            {"gpu_memory_peak", body.value("gpu_memory_peak", int64_t{0})}};
        if (t.state == "error" && body.contains("stderr_tail")) info["stderr_tail"] = body["stderr_tail"];
        if (auto st = store.update_trial(e->trial_id, t.state, t.error, info); !st) return st;
        (void)store.add_event(e->trial_id, "ended", body);
        lt.actor = nullptr;
        lt.stop_pending = false;
        // Its resources go back, paused or not: a paused trial gets a new group when it
        // resumes (so paused trials never hold cards others wait for).
        if (!lt.group.empty()) {
          (void)client.remove_group(lt.group);
          lt.group.clear();
        }
        if (auto st = act(*more); !st) return st;
      }
    }
    if (!pending_results.empty()) {
      if (auto n = store.add_results(pending_results); !n) return n.error();
      pending_results.clear();
    }
    show(false);
  }
  show(true);
  for (auto& [id, lt] : live)
    if (!lt.group.empty()) (void)client.remove_group(lt.group);  // paused and never resumed
  sum.wall_s = elapsed();
  for (auto& [id, t] : engine.trials()) {
    ++sum.trials;
    sum.terminated += t.state == "terminated";
    sum.errored += t.state == "error";
  }
  auto n = store.result_count();
  if (!n) return n.error();
  sum.results = *n;
  return sum;
}

}  // namespace tune
