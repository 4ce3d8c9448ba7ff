// The controller actor: messages in, the live trials' table (tune/tuner/live_trials.hpp)
// deciding, its commands out to the head, the nodes' trials and the checkpoint copier;
// what it records of the trials is in controller_trials.cpp.
#include "controller.hpp"

#include <atomic>

#include <time.h>

#include <future>
#include <mutex>

#include "checkpoint_copy.hpp"
#include "transport/dial.hpp"
#include <unistd.h>

#include "tune/core/trace.hpp"
#include "tune/cluster/token.hpp"
#include "controller_state.hpp"
#include "typed.hpp"

namespace tune {

namespace {

double thread_cpu_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
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

// A group given back to the head (its answer, or a refusal, changes nothing: a group
// already gone is what was asked).
void give_back(controller_actor self, const std::string& group) {
  auto& st = self->state;
  self->request(st.setup.head, st.setup.request_timeout, wire::pg_remove_atom::value, st.setup.token, group)
      .then([](wire::pg_remove_atom, const std::string&) {}, [](caf::error&) {});
}

void stop_actor(controller_actor self, actor_handle h) {
  if (auto a = actor_of(self, h)) self->send(a, wire::trial_stop_atom::value, int64_t{self->state.setup.options.stop_grace.count()});
}

void watch(controller_actor self, actor_handle h) {
  if (auto a = actor_of(self, h)) self->monitor(a);
}

void unwatch(controller_actor self, actor_handle h) {
  if (auto it = self->state.actors.find(h); it != self->state.actors.end()) self->demonitor(it->second);
}

// One command of the table's.
void carry_out(controller_actor self, live_command& cmd) {
  auto& st = self->state;
  std::visit(
      [&](auto& c) {
        using T = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<T, live::create_group>) create_group(self, c);
        else if constexpr (std::is_same_v<T, live::wait_group>) wait_group(self, c);
        else if constexpr (std::is_same_v<T, live::start_trial>) start_trial(self, c);
        else if constexpr (std::is_same_v<T, live::stop_actor>) stop_actor(self, c.actor), gang_stopped(self, c.actor);
        else if constexpr (std::is_same_v<T, live::kill_actor>) self->send(actor_of(self, c.actor), wire::trial_kill_atom::value);
        else if constexpr (std::is_same_v<T, live::ack>) self->send(actor_of(self, c.actor), wire::trial_ack_atom::value, c.received);
        else if constexpr (std::is_same_v<T, live::route>) self->send(actor_of(self, c.actor), wire::route_atom::value, c.received);
        else if constexpr (std::is_same_v<T, live::greet>) greet(self, c.trial, c.group, c.received);
        else if constexpr (std::is_same_v<T, live::retake_group>) retake_group(self, c);
        else if constexpr (std::is_same_v<T, live::remove_group>) give_back(self, c.group);
        else if constexpr (std::is_same_v<T, live::watch>) watch(self, c.actor);
        else if constexpr (std::is_same_v<T, live::unwatch>) unwatch(self, c.actor);
        else if constexpr (std::is_same_v<T, live::start_failed>) start_failed(self, c.trial, c.why);
        else if constexpr (std::is_same_v<T, live::ended>) trial_ended(self, c.trial, false), gang_ended(self, c.trial);
        else if constexpr (std::is_same_v<T, live::moved_out>) trial_ended(self, c.trial, true), gang_ended(self, c.trial);
        else if constexpr (std::is_same_v<T, live::note>) (void)st.setup.store->add_event(c.trial, c.event, c.body);
        else if constexpr (std::is_same_v<T, live::fail>) finish(self, status{errc::invalid_argument, c.why});
      },
      cmd);
}

// A message from a trial's actor about trial `id` (`last`: its end): whether it is heard.
bool heard(controller_actor self, const std::string& id, bool last) {
  auto& st = self->state;
  if (st.over) return false;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  bool ok = st.table.accept(id, sender ? handle_of(self, sender) : 0, last);
  drain(self);
  return ok && !st.over;
}

}  // namespace

// Its end: recorded, then the table says what follows (moved out, or ended).
void end_of(controller_actor self, const std::string& id, wire::wire_trial_end end) {
  auto& st = self->state;
  st.records[id].end = std::move(end);
  st.table.on_ended(id);
  drain(self);
}

namespace {

// The head's process is gone: the experiment waits for it to be started again at the
// same address (nodes and their trials keep running meanwhile), up to head_wait.
void head_lost(controller_actor self, const std::string& why) {
  auto& st = self->state;
  if (st.over || st.head_down) return;
  st.head_down = true;
  st.head_lost_at = now(self);
  st.table.on_head_lost(st.head_lost_at);
  std::cerr << "tune: lost the head at " << st.setup.head_host << ":" << st.setup.head_port << " (" << why
            << "); waiting for it to be back\n";
  (void)st.setup.store->add_event("", "head_lost", {{"reason", why}});
  self->delayed_send(self, std::chrono::milliseconds(250), controller_reconnect_atom::value);
}

// The head is back (a new process): the table makes the starts on their way again and
// takes the running trials' groups back (their events, held since the head went away,
// then come here, from the first one this did not get).
void head_back(controller_actor self, caf::actor head) {
  auto& st = self->state;
  st.setup.head = caf::actor_cast<head_iface>(head);
  self->monitor(st.setup.head);
  st.head_down = false;
  if (st.feed) st.feed->resend_all();  // the new head's board knows nothing yet
  std::cerr << "tune: the head is back; continuing\n";
  (void)st.setup.store->add_event("", "head_back", {{"after_s", std::chrono::duration<double>(now(self) - st.head_lost_at).count()}});
  self->send(st.setup.head, wire::subscribe_atom::value, st.setup.token);
  st.table.on_head_back(now(self));
  drain(self);
}

void reconnect(controller_actor self) {
  auto& st = self->state;
  if (st.over || !st.head_down) return;
  if (now(self) > st.head_lost_at + st.setup.head_wait)
    return finish(self, status{errc::not_found, "the head at " + st.setup.head_host + ":" + std::to_string(st.setup.head_port) +
                                                    " did not come back within " +
                                                    std::to_string(st.setup.head_wait.count() / 1000) + " s"});
  auto d = dial(self->home_system(), st.setup.head_host, st.setup.head_port);
  if (!d) {
    self->delayed_send(self, std::chrono::milliseconds(500), controller_reconnect_atom::value);
    return;
  }
  self->request(d->to, st.setup.request_timeout, std::move(d->msg))
      .then(
          [self](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (ptr) return head_back(self, caf::actor_cast<caf::actor>(ptr));
            self->delayed_send(self, std::chrono::milliseconds(500), controller_reconnect_atom::value);
          },
          [self](caf::error&) { self->delayed_send(self, std::chrono::milliseconds(500), controller_reconnect_atom::value); });
}

// A node the head declared dead: its trials' actors may never say goodbye (a down
// message for an actor reached through the head does not always come). Whatever the
// node sent before it died came through the head before this notice (one connection
// to here, in order): a short wait for messages already being handled is enough.
void node_event(controller_actor self, const std::string& node, const std::string& state, const std::string& reason) {
  auto& st = self->state;
  if (st.setup.options.auto_rebalance && !st.over && !st.head_down && now(self) - st.last_rebalance_ask > std::chrono::seconds(2)) {
    st.last_rebalance_ask = now(self);
    self->delayed_send(st.setup.head, std::chrono::milliseconds(500), wire::rebalance_atom::value, st.setup.token);
  }
  if (state != "dead") return;
  gang_node_dead(self, node, reason);
  for (auto& [id, h] : st.table.on_node_dead(node))
    self->delayed_send(self, std::chrono::milliseconds(20), controller_lost_atom::value, id, h, "node " + node + " is dead: " + reason);
}

void lost(controller_actor self, const std::string& id, actor_handle h, const std::string& why) {
  auto& st = self->state;
  if (st.over || gang_holds_end(self, id)) return;  // its end came: the gang's others are awaited
  wire::wire_trial_end end;
  end.error = "its node was lost (" + why + ")";
  st.records[id].end = std::move(end);
  if (!st.table.on_lost(id, h, now(self))) st.records[id].end.reset();
  drain(self);
}

// Whether a trial actor's wire id is a gang's worker of rank > 0 (<trial>~w<rank>@<run>).
bool is_worker(const std::string& wire_id) { return wire_id.find("~w") != std::string::npos; }

// The trial actors' messages, each heard (or not) first.
controller_trials_iface::behavior_type trial_handlers(controller_actor self) {
  return {
      // Its start is known from the start's answer, its end from trial_ended_atom.
      // A gang's worker of rank > 0 (controller_gang.cpp) speaks of itself, not as the
      // trial: its results are not the trial's, its checkpoints are shards of rank 0's.
      [self](wire::trial_started_atom, const std::string& wire_id, const wire::wire_trial_started&) {
        if (is_worker(wire_id)) return (void)gang_worker_heard(self, wire_id);
        heard(self, self->state.from_wire(wire_id), false);
      },
      [self](wire::trial_done_atom, const std::string& wire_id, const std::string&) {
        if (is_worker(wire_id)) return (void)gang_worker_heard(self, wire_id);
        heard(self, self->state.from_wire(wire_id), false);
      },
      [self](wire::trial_joined_atom, const std::string& wire_id) {
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) gang_joined(self, gang_trial(self, *w), w);
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (heard(self, id, false)) gang_joined(self, id, nullptr);
      },
      [self](wire::trial_checkpoint_atom, const std::string& wire_id, const wire::wire_checkpoint& c) {
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) w->joined = true, w->checkpoints[c.iteration] = c.path;
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (heard(self, id, false)) gang_joined(self, id, nullptr), on_checkpoint(self, id, c);
      },
      [self](wire::trial_beside_atom, const std::string& wire_id, const wire::wire_beside& beside) {
        auto* w = is_worker(wire_id) ? gang_worker_heard(self, wire_id) : nullptr;
        auto id = w ? gang_trial(self, *w) : self->state.from_wire(wire_id);
        if (w || (!is_worker(wire_id) && heard(self, id, false))) on_foreign(self, id, beside);
      },
      [self](wire::trial_output_atom, const std::string& wire_id, const std::vector<std::string>& lines) {
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) on_output(self, gang_trial(self, *w), lines, w->rank, w->pid);
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (heard(self, id, false)) on_output(self, id, lines);
      },
      [self](wire::trial_results_atom, const std::string& wire_id, const wire::wire_results& r) {
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) w->joined = true;
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (heard(self, id, false) && r.well_formed()) gang_joined(self, id, nullptr), ingest_results(self, id, r);
      },
      [self](wire::trial_result_atom, const std::string& wire_id, const wire::wire_result& r) {
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) w->joined = true;
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (heard(self, id, false)) gang_joined(self, id, nullptr), ingest_result(self, id, r);
      },
      [self](wire::trial_ended_atom, const std::string& wire_id, wire::wire_trial_end& e) {
        trace_step("end_heard", wire_id);
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) gang_worker_ended(self, *w, e);
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (heard(self, id, true) && !gang_hold_end(self, id, e)) end_of(self, id, std::move(e));
      },
      [self](wire::trial_node_atom, const std::string& wire_id, const caf::actor& node, const std::string& access) {
        if (is_worker(wire_id)) {
          if (auto* w = gang_worker_heard(self, wire_id)) w->node_actor = node, w->access = access;
          return;
        }
        auto id = self->state.from_wire(wire_id);
        if (!heard(self, id, false)) return;
        self->state.records[id].node_actor = node;
        self->state.records[id].access = access;
      },
  };
}

// The head's messages, and the controller's own.
controller_head_iface::behavior_type head_handlers(controller_actor self) {
  return {
      // A group of a trial whose node died, placed again by the head: the trial is
      // ended as lost (and started again in a new group with max_failures).
      [](wire::pg_moved_atom, const std::string&, const std::vector<uint32_t>&) {},
      [](wire::subscribe_atom, const std::string&) {},
      [](wire::rebalance_atom, const std::string&) {},  // the head's plan: its moves come as pg_move
      // The head asks to move the trial in `group` off `avoid` (rebalance, drain).
      [self](wire::pg_move_atom, const std::string& group, const std::vector<std::string>& avoid, const std::string& why) {
        auto& st = self->state;
        auto from = self->current_sender();
        if (st.over || !from || from->node() != st.setup.head.node()) return;  // the head's process
        st.table.on_move(group, avoid, now(self), why);
        drain(self);
      },
      [self](wire::node_event_atom, const std::string& node, const std::string& state, const std::string& reason) {
        node_event(self, node, state, reason);
      },
      [self](controller_lost_atom, const std::string& id, actor_handle h, const std::string& why) { lost(self, id, h, why); },
      [self](controller_gang_atom, const std::string& trial, uint64_t attempt, int32_t what, actor_handle h) {
        gang_timer_fired(self, trial, attempt, what, h);
      },
      [self](controller_reconnect_atom) { reconnect(self); },
      [self](controller_hooks_atom) { take_hook_answers(self); },
      [self](controller_flush_atom) {
        if (self->state.over) return;
        if (!flush(self) || !commit(self)) return;
        hooks_tick(self);
        if (self->state.over) return;
        advance(self);
        if (self->state.over) return;
        show(self, false);
        board_report(self, false);
        self->delayed_send(self, self->state.setup.options.flush_every, controller_flush_atom::value);
      },
  };
}

controller_iface::behavior_type controller(controller_actor self, controller_setup setup) {
  auto& st = self->state;
  st.setup = std::move(setup);
  st.cpu0 = thread_cpu_now();
  auto key = random_token();
  st.run_key = key ? key->substr(0, 8) : std::to_string(::getpid());
  st.t0 = now(self);
  st.last_progress = st.last_board = st.t0 - std::chrono::hours(1);
  st.table = live_trials({wire::ack_every, st.setup.options.min_move_interval});
  open_sinks(self);
  st.copier = spawn_checkpoint_copier(self->system(), {st.setup.token, st.setup.programs, st.setup.request_timeout});
  // The copier ends with this actor, whatever ends it (an exception too: a copier left
  // behind would hold up its actor system's shutdown for ever).
  self->attach_functor([copier = st.copier](const caf::error&) { caf::anon_send_exit(copier, caf::exit_reason::user_shutdown); });
  // A refusal of what it asks without waiting (subscribe; rebalance, which only the
  // admin may): nothing to do. Any other error message ends it, as CAF's default does.
  self->set_error_handler([self](caf::error& err) {
    if (!wire::is_refusal(err)) self->quit(std::move(err));
  });
  // A trial whose actor is gone without an end (its node died): it ended in error. Its
  // last messages may still be on their way (they can come by another route than the
  // down message), so it is declared lost only if nothing ended it a while later.
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.setup.head_port != 0 && dm.source == st.setup.head.address())
      return head_lost(self, self->system().render(dm.reason));
    auto h = st.handles.find(dm.source);
    if (h == st.handles.end()) return;
    if (gang_down(self, h->second, self->system().render(dm.reason))) return;
    if (auto id = st.table.on_down(h->second))
      self->delayed_send(self, std::chrono::seconds(2), controller_lost_atom::value, *id, h->second, self->system().render(dm.reason));
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    finish(self, status{errc::inconsistent, "the experiment was ended (" + self->system().render(em.reason) + ")"});
  });
  // An exception that escapes a handler ends the controller (CAF's rule) with its text
  // as the reason, which run_experiment returns (rather than waiting for ever).
  self->set_exception_handler([](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return caf::make_error(caf::sec::runtime_error, std::string{x.what()});
    } catch (...) {
      return caf::make_error(caf::sec::runtime_error, std::string{"an exception that is not a std::exception"});
    }
  });
  if (st.setup.resumed) load_copies(self);
  if (auto& ap = st.setup.options.auto_packing; ap && !st.setup.options.bundles.empty())
    st.packing.emplace(*ap, st.setup.options.card_memory);
  open_feed(self);
  self->send(self, controller_flush_atom::value);
  self->send(st.setup.head, wire::subscribe_atom::value, st.setup.token);  // node deaths
  if (st.setup.head_port != 0) self->monitor(st.setup.head);
  open_hooks(self);
  if (!st.setup.initial_actions.empty()) act(self, std::exchange(st.setup.initial_actions, {}));
  return typed_union<controller_iface>(trial_handlers(self), head_handlers(self));
}

}  // namespace

live_clock::time_point now(controller_actor self) { return self->clock().now(); }

double elapsed(controller_actor self) { return std::chrono::duration<double>(now(self) - self->state.t0).count(); }

trial_from_owner_iface actor_of(controller_actor self, actor_handle h) {
  auto it = self->state.actors.find(h);
  return it == self->state.actors.end() ? trial_from_owner_iface{} : caf::actor_cast<trial_from_owner_iface>(it->second);
}

actor_handle handle_of(controller_actor self, const caf::actor& a) {
  auto& st = self->state;
  auto addr = a.address();
  if (auto it = st.handles.find(addr); it != st.handles.end()) return it->second;
  st.handles.emplace(addr, st.next_handle);
  st.actors.emplace(st.next_handle, addr);
  return st.next_handle++;
}

void drain(controller_actor self) {
  auto& st = self->state;
  while (!st.over) {
    auto commands = st.table.take();
    if (commands.empty()) return;
    for (auto& c : commands) {
      if (st.over) return;
      carry_out(self, c);
    }
  }
}

// Ends the experiment: with an error, every trial still running is stopped (its group
// goes when this actor does).
void finish(controller_actor self, expected<experiment_summary> out) {
  auto& st = self->state;
  if (st.over) return;
  close_hooks(self, static_cast<bool>(out));  // on_experiment_end, the searcher's last state
  close_sinks(self);  // first: the trackers' last runs and links reach the final report
  board_report(self, true, out ? "done" : "failed", out ? "" : out.error().message());
  for (auto& [id, r] : st.records) drop_standby(self, id);
  st.over = true;
  st.table.release_all(!out);
  for (auto& c : st.table.take()) carry_out(self, c);  // stops and groups given back
  self->send_exit(st.copier, caf::exit_reason::user_shutdown);
  if (st.setup.store->in_batch())
    if (auto s = st.setup.store->end_batch(); !s && out) out = status{s.code(), "storing the experiment: " + s.message()};
  if (st.setup.on_done) st.setup.on_done(std::move(out));
  self->quit();
}

// Writes the results received so far (into the open batch).
bool flush(controller_actor self) {
  auto& st = self->state;
  sinks_flush(self);
  if (st.pending.empty()) return true;
  auto n = st.setup.store->add_results(st.pending);
  st.pending.clear();
  if (!n) {
    finish(self, status{n.error().code(), "storing results: " + n.error().message()});
    return false;
  }
  return true;
}

// After anything that may free a slot or end the experiment: start what the engine
// wants now; finish when it is done.
void advance(controller_actor self) {
  auto& st = self->state;
  if (st.over) return;
  auto actions = st.setup.engine->step(elapsed(self));
  if (!actions) return finish(self, actions.error());
  if (!actions->empty()) act(self, std::move(*actions));
  if (st.over || !st.setup.engine->finished()) return;
  if (st.copies > 0) return;  // its last checkpoints are still being copied
  if (!flush(self)) return;
  show(self, true);
  experiment_summary sum;
  sum.wall_s = elapsed(self);
  sum.ingested = st.ingested;
  sum.controller_cpu_s = thread_cpu_now() - st.cpu0;  // a detached actor: its thread is its own
  for (auto& [id, t] : st.setup.engine->trials()) {
    ++sum.trials;
    sum.terminated += t.state == trial_state::terminated;
    sum.errored += t.state == trial_state::error;
  }
  auto n = st.setup.store->result_count();
  if (!n) return finish(self, n.error());
  sum.results = *n;
  finish(self, sum);
}

namespace {

// The controllers run_experiment waits for, for interrupt_experiments (never destroyed:
// a signal's thread may use it while the process exits).
struct running_experiments {
  std::mutex m;
  std::vector<caf::actor> controllers;
  std::string interrupted;  // why, once interrupt_experiments was called
  static running_experiments& get() {
    static auto* r = new running_experiments;
    return *r;
  }
};

}  // namespace

void interrupt_experiments(const std::string& why) {
  auto& r = running_experiments::get();
  std::lock_guard lock{r.m};
  if (r.interrupted.empty()) r.interrupted = why;
  for (auto& c : r.controllers) caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
}

caf::actor spawn_controller(caf::actor_system& sys, controller_setup setup) {
  if (!setup.own_thread) return caf::actor_cast<caf::actor>(sys.spawn(controller, std::move(setup)));
  return caf::actor_cast<caf::actor>(sys.spawn<caf::detached>(controller, std::move(setup)));
}

expected<experiment_summary> run_experiment(cluster_client& client, experiment_engine& engine,
                                            experiment_store& store, const experiment_run_options& opt,
                                            resume_plan* resumed) {
  if (!client.program_server()) return status{errc::invalid_argument, "run_experiment: serve the program first"};
  auto& running = running_experiments::get();
  {
    std::lock_guard lock{running.m};
    if (!running.interrupted.empty()) return status{errc::inconsistent, running.interrupted};
  }
  // Answered once: by the controller's end (on_done), or by its exit when it ended
  // without one (an exception in a handler), with the reason.
  struct answer {
    std::promise<expected<experiment_summary>> promise;
    std::atomic<bool> given{false};
    void give(expected<experiment_summary> out) {
      if (!given.exchange(true)) promise.set_value(std::move(out));
    }
  };
  auto done = std::make_shared<answer>();
  auto result = done->promise.get_future();
  controller_setup setup;
  setup.head = caf::actor_cast<head_iface>(client.head());
  setup.token = client.token();
  setup.programs = client.program_server();
  setup.request_timeout = client.request_timeout();
  setup.engine = &engine;
  setup.store = &store;
  setup.options = opt;
  setup.on_done = [done](expected<experiment_summary> out) { done->give(std::move(out)); };
  if (resumed) {
    setup.resumed = true;
    setup.initial_actions = resumed->actions;
    setup.replayed_results = std::move(resumed->results);
  }
  setup.head_host = client.head_host();
  setup.head_port = client.head_port();
  auto& sys = client.system();
  auto ctl = spawn_controller(sys, std::move(setup));  // it answers through `done`
  ctl->attach_functor([done, &sys](const caf::error& reason) {
    done->give(status{errc::inconsistent, "the experiment's controller ended before the experiment (" + sys.render(reason) +
                                              "): its store keeps what it recorded; tune resume continues it"});
  });
  {
    std::lock_guard lock{running.m};
    if (running.interrupted.empty()) running.controllers.push_back(ctl);
    else caf::anon_send_exit(ctl, caf::exit_reason::user_shutdown);
  }
  auto out = result.get();
  std::lock_guard lock{running.m};
  std::erase(running.controllers, ctl);
  if (!out && !running.interrupted.empty()) return status{out.error().code(), running.interrupted};
  return out;
}

}  // namespace tune
