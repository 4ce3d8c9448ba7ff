#include "controller.hpp"

#include <time.h>

#include <algorithm>
#include <charconv>
#include <future>
#include <map>
#include <optional>

#include "tune/cluster/version.hpp"

namespace tune {

namespace {

using clock_type = std::chrono::steady_clock;
using flush_atom = caf::atom_constant<caf::atom("ctlflush")>;
using lost_atom = caf::atom_constant<caf::atom("ctllost")>;

double thread_cpu_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct live_trial {
  std::string group;
  std::string node;  // where it runs (from the start's answer)
  caf::actor actor;
  bool stop_pending = false;  // asked to stop or pause before its first event came
  std::map<int64_t, std::string> checkpoints;  // iteration -> path on its node
};

struct controller_state {
  controller_setup setup;
  clock_type::time_point t0 = clock_type::now();
  std::map<std::string, live_trial> live;
  std::map<caf::actor_addr, std::string> by_actor;  // trial actors, monitored
  std::vector<encoded_result> pending;              // results not yet stored
  int64_t ingested = 0;
  double cpu0 = 0;  // the thread's CPU time when the controller started
  clock_type::time_point last_progress = clock_type::now() - std::chrono::hours(1);
  bool over = false;
  static inline const char* name = "tune.controller";
};

using controller_actor = caf::stateful_actor<controller_state>*;

double elapsed(controller_actor self) {
  return std::chrono::duration<double>(clock_type::now() - self->state.t0).count();
}

void show(controller_actor self, bool force) {
  auto& st = self->state;
  auto& opt = st.setup.options;
  if (!opt.on_progress || (!force && clock_type::now() - st.last_progress < opt.progress_every)) return;
  progress_snapshot s;
  s.experiment = opt.name;
  s.metric = st.setup.engine->options().metric;
  s.direction = st.setup.engine->options().direction;
  s.elapsed_s = elapsed(self);
  for (auto& [id, t] : st.setup.engine->trials()) s.trials.push_back({id, t.state, t.iteration, t.value, t.cfg, t.error});
  st.last_progress = clock_type::now();
  opt.on_progress(s);
}

// Ends the experiment: with an error, every trial still running is stopped (its group
// goes when this actor does).
void finish(controller_actor self, expected<experiment_summary> out) {
  auto& st = self->state;
  if (st.over) return;
  st.over = true;
  for (auto& [id, lt] : st.live) {
    if (!out && lt.actor) self->send(lt.actor, wire::trial_stop_atom::value, int64_t{st.setup.options.stop_grace.count()});
    if (!lt.group.empty()) self->send(st.setup.head, wire::pg_remove_atom::value, st.setup.token, lt.group);
  }
  if (st.setup.store->in_batch())
    if (auto s = st.setup.store->end_batch(); !s && out) out = status{s.code(), "storing the experiment: " + s.message()};
  if (st.setup.on_done) st.setup.on_done(std::move(out));
  self->quit();
}

// Writes the results received so far (into the open batch).
bool flush(controller_actor self) {
  auto& st = self->state;
  if (st.pending.empty()) return true;
  auto n = st.setup.store->add_results(st.pending);
  st.pending.clear();
  if (!n) {
    finish(self, status{n.error().code(), "storing results: " + n.error().message()});
    return false;
  }
  return true;
}

// Commits everything written since the last commit (results, trials, events: one sync
// to disk every flush_every, not one per write) and opens the next batch.
bool commit(controller_actor self) {
  auto& store = *self->state.setup.store;
  auto s = store.in_batch() ? store.end_batch() : status::ok();
  if (s) s = store.begin_batch();
  if (!s) {
    finish(self, status{s.code(), "storing the experiment: " + s.message()});
    return false;
  }
  return true;
}

void act(controller_actor self, std::vector<engine_action> actions);

// After anything that may free a slot or end the experiment: start what the engine
// wants now; finish when it is done.
void advance(controller_actor self) {
  auto& st = self->state;
  if (st.over) return;
  auto actions = st.setup.engine->step(elapsed(self));
  if (!actions) return finish(self, actions.error());
  act(self, std::move(*actions));
  if (st.over || !st.setup.engine->finished()) return;
  if (!flush(self)) return;
  show(self, true);
  experiment_summary sum;
  sum.wall_s = elapsed(self);
  sum.ingested = st.ingested;
  sum.controller_cpu_s = thread_cpu_now() - st.cpu0;  // a detached actor: its thread is its own
  for (auto& [id, t] : st.setup.engine->trials()) {
    ++sum.trials;
    sum.terminated += t.state == "terminated";
    sum.errored += t.state == "error";
  }
  auto n = st.setup.store->result_count();
  if (!n) return finish(self, n.error());
  sum.results = *n;
  finish(self, sum);
}

void give_back_group(controller_actor self, live_trial& lt) {
  if (lt.group.empty()) return;
  self->send(self->state.setup.head, wire::pg_remove_atom::value, self->state.setup.token, lt.group);
  lt.group.clear();
}

// A trial that could not start: its group goes back, it ends with the reason.
void fail_start(controller_actor self, const std::string& id, const std::string& why) {
  auto& st = self->state;
  if (st.over) return;
  give_back_group(self, st.live[id]);
  (void)st.setup.store->update_trial(id, "error", why);
  auto more = st.setup.engine->on_ended(id, false, why);  // never ran: nothing to resume
  if (!more) return finish(self, more.error());
  act(self, std::move(*more));
  advance(self);
}

void start_in_group(controller_actor self, const engine_action& a) {
  auto& st = self->state;
  auto& opt = st.setup.options;
  auto& lt = st.live[a.trial];
  std::string restore;
  if (!a.restore_from.empty()) {
    auto& from = st.live[a.restore_from].checkpoints;
    if (auto c = from.find(a.restore_iteration); c != from.end()) restore = c->second;
  }
  wire::wire_trial_spec spec{a.trial,           lt.group,        0,        opt.program.name, opt.program.sha256,
                             opt.program.size,  opt.args,        a.cfg.dump(), restore};
  auto id = a.trial;
  bool exploit = !a.restore_from.empty() && a.restore_from != a.trial;
  nlohmann::json exploit_info;
  if (exploit) exploit_info = {{"donor", a.restore_from}, {"config", a.cfg}};
  // Fetching the program and starting the worker take longer than a plain request.
  self->request(st.setup.head, st.setup.request_timeout * 6, wire::trial_start_atom::value, st.setup.token, spec,
                st.setup.programs)
      .then(
          [self, id, restore, exploit, exploit_info](wire::trial_start_atom, bool ok, std::string& text) {
            auto& st = self->state;
            if (st.over) return;
            if (!ok) return fail_start(self, id, text);
            auto info = nlohmann::json::parse(text, nullptr, false);
            nlohmann::json keep = nlohmann::json::object();
            if (info.is_object())
              for (auto key : {"pid", "node", "gpus", "trial_dir"})
                if (info.contains(key)) keep[key] = info[key];
            if (keep.contains("node") && keep["node"].is_string()) st.live[id].node = keep["node"];
            if (!restore.empty()) keep["restored_from"] = restore;
            if (exploit) (void)st.setup.store->add_event(id, "exploit", exploit_info);  // PBT: a donor's state
            // The trial may have ended already (its events can overtake this answer):
            // the store keeps the engine's state, whatever it is now.
            auto& t = st.setup.engine->trials().at(id);
            if (auto s = st.setup.store->update_trial(id, t.state, t.error, keep); !s) finish(self, s);
          },
          [self, id](caf::error& err) {
            fail_start(self, id, "start trial " + id + ": " + describe(self->system(), err));
          });
}

void act(controller_actor self, std::vector<engine_action> actions) {
  auto& st = self->state;
  for (auto& a : actions) {
    if (st.over) return;
    auto& lt = st.live[a.trial];
    if (a.what != engine_action::kind::start) {
      if (lt.actor) self->send(lt.actor, wire::trial_stop_atom::value, int64_t{st.setup.options.stop_grace.count()});
      else lt.stop_pending = true;  // stopped as soon as it says it runs
      (void)st.setup.store->add_event(a.trial, a.what == engine_action::kind::stop ? "stop" : "pause",
                                      {{"reason", a.reason}});
      continue;
    }
    if (auto s = st.setup.store->add_trial(a.trial, a.cfg, "pending"); !s && s.code() != errc::already_exists)
      return finish(self, s);
    if (!lt.group.empty()) {
      start_in_group(self, a);
      continue;
    }
    wire::wire_group_spec spec;
    spec.strategy = std::string{to_string(st.setup.options.strat)};
    for (auto& b : st.setup.options.bundles) spec.bundles.push_back(wire::to_wire_request(b));
    auto wait_ms = int64_t{st.setup.options.group_timeout.count()};
    auto timeout = st.setup.request_timeout;
    self->request(st.setup.head, timeout, wire::pg_create_atom::value, st.setup.token, version(), spec)
        .then(
            [self, a, wait_ms, timeout](wire::pg_create_atom, bool ok, std::string& group, std::string&, std::string& reason) {
              auto& st = self->state;
              if (st.over) return;
              if (!ok) return finish(self, status{errc::invalid_argument, reason});  // a bad request: every trial's
              st.live[a.trial].group = group;
              self->request(st.setup.head, std::chrono::milliseconds(wait_ms) + timeout, wire::pg_wait_atom::value,
                            st.setup.token, group, wait_ms)
                  .then(
                      [self, a, group](wire::pg_wait_atom, bool ready, const std::string& state, const std::string& why) {
                        if (self->state.over) return;
                        if (ready) return start_in_group(self, a);
                        fail_start(self, a.trial, "placement group " + group + " is " + state +
                                                      (why.empty() ? "" : ": " + why));
                      },
                      [self, a, group](caf::error& err) {
                        fail_start(self, a.trial, "wait for " + group + ": " + describe(self->system(), err));
                      });
            },
            [self, a](caf::error& err) {
              fail_start(self, a.trial, "create placement group: " + describe(self->system(), err));
            });
  }
}

// The live trial an event is about, or null when it is not one of ours (or the
// experiment is over). The first event from a trial's actor makes it known (monitored);
// a stop asked before then goes out now.
live_trial* live_for_event(controller_actor self, const std::string& id, bool ended) {
  auto& st = self->state;
  if (st.over) return nullptr;
  auto lit = st.live.find(id);
  if (lit == st.live.end()) return nullptr;
  auto& lt = lit->second;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (!lt.actor && sender && !ended) {
    lt.actor = sender;
    st.by_actor[sender.address()] = id;
    self->monitor(sender);
  }
  if (lt.stop_pending && !ended && lt.actor) {
    lt.stop_pending = false;
    self->send(lt.actor, wire::trial_stop_atom::value, int64_t{st.setup.options.stop_grace.count()});
  }
  return &lt;
}

// A number as nlohmann::json writes one (shortest round trip; a whole number keeps ".0").
void append_number(std::string& out, double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc{}) {
    out += "null";
    return;
  }
  out.append(buf, end);
  if (std::find_if(buf, end, [](char c) { return c == '.' || c == 'e' || c == 'n' || c == 'i'; }) == end) out += ".0";
}

// Results as columns (wire_results): each to the engine, then to the store with the
// next flush, its metrics written as JSON text without building a document.
void on_results(controller_actor self, const std::string& id, const wire::wire_results& r) {
  auto& st = self->state;
  if (!live_for_event(self, id, false)) return;
  size_t k = r.names.size();
  if (!r.well_formed()) return;  // not from a node of ours
  std::optional<size_t> col;  // the experiment's metric
  std::vector<std::string> keys;
  for (size_t i = 0; i < k; ++i) {
    if (r.names[i] == st.setup.engine->options().metric) col = i;
    keys.push_back(nlohmann::json(r.names[i]).dump() + ":");
  }
  double now = wall_now();
  auto& engine = *st.setup.engine;
  for (size_t row = 0; row < r.rows(); ++row) {
    std::string text = "{";
    for (size_t i = 0; i < k; ++i) {
      if (i) text += ',';
      text += keys[i];
      append_number(text, r.value(row * k + i));
    }
    text += '}';
    int64_t it = r.iterations[row];
    ++st.ingested;
    auto more = engine.on_metric(id, it, col ? std::optional<double>{r.value(row * k + *col)} : std::nullopt);
    st.pending.push_back({id, it, now, std::move(text)});
    if (!more) return finish(self, more.error());
    act(self, std::move(*more));
    if (st.over) return;
  }
  if (st.pending.size() >= 8192) flush(self);
}

void on_event(controller_actor self, const std::string& id, const std::string& kind, const std::string& json) {
  auto& st = self->state;
  auto* ltp = live_for_event(self, id, kind == "ended");
  if (!ltp) return;
  auto& lt = *ltp;
  auto& engine = *st.setup.engine;
  if (kind == "result") {
    // One result (one that has a metric that is not a number): to the engine, then to
    // the store with the next flush.
    auto body = nlohmann::json::parse(json, nullptr, false);
    if (!body.is_object()) return;
    int64_t it = body.value("iteration", int64_t{0});
    ++st.ingested;
    auto more = engine.on_result(id, it, body["metrics"]);
    st.pending.push_back({id, it, wall_now(), body["metrics"].dump()});
    if (!more) return finish(self, more.error());
    act(self, std::move(*more));
    if (st.pending.size() >= 8192) flush(self);
  } else if (kind == "checkpoint") {
    auto body = nlohmann::json::parse(json, nullptr, false);
    if (!body.is_object()) return;
    int64_t it = body.value("iteration", int64_t{-1});
    lt.checkpoints[it] = body.value("path", "");
    engine.on_checkpoint(id, it);
    (void)st.setup.store->add_event(id, "checkpoint", body);
  } else if (kind == "ended") {
    auto body = nlohmann::json::parse(json, nullptr, false);
    if (!body.is_object()) body = nlohmann::json::object();
    if (!flush(self)) return;  // its last results before its end
    bool ok = body.value("ok", false) || body.value("stopped", false);
    auto more = engine.on_ended(id, ok, body.value("error", std::string{}));
    if (!more) return finish(self, more.error());
    auto& t = engine.trials().at(id);
    nlohmann::json info{{"exit", body.value("exit", "")},
                        {"results", body.value("results", 0)},
                        {"gpu_memory_peak", body.value("gpu_memory_peak", int64_t{0})}};
    if (t.state == "error" && body.contains("stderr_tail")) info["stderr_tail"] = body["stderr_tail"];
    if (auto s = st.setup.store->update_trial(id, t.state, t.error, info); !s) return finish(self, s);
    (void)st.setup.store->add_event(id, "ended", body);
    if (lt.actor) {
      self->demonitor(lt.actor);
      st.by_actor.erase(lt.actor.address());
    }
    lt.actor = nullptr;
    lt.stop_pending = false;
    // Its resources go back, paused or not: a paused trial gets a new group when it
    // resumes (so paused trials never hold cards others wait for).
    give_back_group(self, lt);
    act(self, std::move(*more));
    advance(self);
  }
}

caf::behavior controller(controller_actor self, controller_setup setup) {
  self->state.setup = std::move(setup);
  self->state.cpu0 = thread_cpu_now();
  // A trial whose actor is gone without an "ended" (its node died): it ended in error.
  // Its last events may still be on their way (they can come by another route than the
  // down message), so it is declared lost only if nothing ended it a while later.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.by_actor.find(dm.source);
    if (it == st.by_actor.end()) return;
    self->delayed_send(self, std::chrono::seconds(2), lost_atom::value, it->second, dm.source,
                       self->system().render(dm.reason));
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    finish(self, status{errc::inconsistent, "the experiment was ended (" + self->system().render(em.reason) + ")"});
  });
  self->send(self, flush_atom::value);
  self->send(self->state.setup.head, wire::subscribe_atom::value, self->state.setup.token);  // node deaths
  return {
      [self](wire::trial_event_atom, const std::string& id, const std::string& kind, const std::string& json) {
        on_event(self, id, kind, json);
      },
      [self](wire::trial_results_atom, const std::string& id, const wire::wire_results& r) { on_results(self, id, r); },
      [](wire::pg_remove_atom, bool, const std::string&) {},  // groups given back
      [](wire::subscribe_atom, bool, const std::string&) {},
      // A node the head declared dead: its trials' actors may never say goodbye (a
      // down message for an actor reached through the head does not always come).
      [self](wire::node_event_atom, const std::string& node, const std::string& state, const std::string& reason) {
        if (state != "dead") return;
        for (auto& [id, lt] : self->state.live)
          if (lt.node == node && lt.actor)
            self->delayed_send(self, std::chrono::seconds(1), lost_atom::value, id, lt.actor.address(),
                               "node " + node + " is dead: " + reason);
      },
      [self](lost_atom, const std::string& id, const caf::actor_addr& who, const std::string& why) {
        auto& st = self->state;
        auto it = st.by_actor.find(who);
        if (it == st.by_actor.end()) return;  // it ended after all
        st.by_actor.erase(it);
        auto lit = st.live.find(id);
        if (lit == st.live.end() || !lit->second.actor || lit->second.actor.address() != who) return;
        self->demonitor(lit->second.actor);
        lit->second.actor = nullptr;
        nlohmann::json body{{"ok", false}, {"error", "its node was lost (" + why + ")"}};
        on_event(self, id, "ended", body.dump());
      },
      [self](flush_atom) {
        if (self->state.over) return;
        if (!flush(self) || !commit(self)) return;
        advance(self);
        if (self->state.over) return;
        show(self, false);
        self->delayed_send(self, self->state.setup.options.flush_every, flush_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_controller(caf::actor_system& sys, controller_setup setup) {
  return sys.spawn<caf::detached>(controller, std::move(setup));
}

expected<experiment_summary> run_experiment(cluster_client& client, experiment_engine& engine,
                                            experiment_store& store, const experiment_run_options& opt) {
  if (!client.program_server()) return status{errc::invalid_argument, "run_experiment: serve the program first"};
  auto done = std::make_shared<std::promise<expected<experiment_summary>>>();
  auto result = done->get_future();
  controller_setup setup{client.head(), client.token(), client.program_server(), client.request_timeout(),
                         &engine,       &store,         opt,
                         [done](expected<experiment_summary> out) { done->set_value(std::move(out)); }};
  spawn_controller(client.system(), std::move(setup));  // it answers through `done`
  return result.get();
}

}  // namespace tune
