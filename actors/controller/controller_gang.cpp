// Trials of several workers (docs/workers.md): a worker process in each bundle of the
// trial's group, started, stopped and ended together. Rank 0 is the trial as the live
// table knows it (its actor, its results, its end); ranks 1.. are started here once rank
// 0 runs (its node gave the rendezvous: MASTER_ADDR and MASTER_PORT), each as a trial of
// its own id on its bundle's node (wire::worker_id), and kept beside it:
//
//   rank 0 answered ──► ranks 1.. started ──► all running ──► (all joined, or the join
//                                                              deadline names who did not)
//   a worker fails (exits not ok, its start refused, its actor or node lost)
//        ──► every other rank stopped at once; rank 0's end carries that worker's error
//   rank 0 ends (done, stopped) ──► the others given a moment to end, then stopped;
//        its end is passed on once every rank has ended (the group goes back then, with
//        nothing left on any node)
//   the engine stops or pauses the trial ──► every rank stopped with its grace
//
// What a worker of rank > 0 reports is not the trial's (Ray Train's rule: rank 0's
// results are); its checkpoints are shards of rank 0's (controller_checkpoints.cpp).
#include <algorithm>
#include <iostream>
#include <sstream>

#include "controller_state.hpp"
#include "tune/core/trace.hpp"

namespace tune {

namespace {

constexpr auto failed_grace = std::chrono::milliseconds(500);   // the others' SIGTERM before SIGKILL
constexpr auto ended_wait = std::chrono::milliseconds(2000);    // rank 0 ended: the others' own end
constexpr auto reap_margin = std::chrono::milliseconds(5000);   // then no end awaited any longer

gang_state* gang_of_trial(controller_actor self, const std::string& trial, uint64_t attempt) {
  auto it = self->state.gangs.find(trial);
  return it == self->state.gangs.end() || it->second.attempt != attempt ? nullptr : &it->second;
}

bool running(const gang_worker& w) { return w.actor != 0 && !w.ended; }

void stop_workers(controller_actor self, gang_state& g, std::chrono::milliseconds grace) {
  g.stopping = true;  // what they end with now is not a failure of theirs
  for (auto& w : g.workers)
    if (running(w)) self->send(actor_of(self, w.actor), wire::trial_stop_atom::value, int64_t{grace.count()});
}

std::string who(const gang_worker& w) {
  std::string s = "worker rank " + std::to_string(w.rank);
  if (!w.node.empty()) s += " (node " + w.node + (w.pid > 0 ? ", pid " + std::to_string(w.pid) : std::string{}) + ")";
  return s;
}

// The gang has failed: the first failure is the trial's error; every rank is stopped.
void fail(controller_actor self, const std::string& trial, gang_state& g, const std::string& why,
          const std::string& tail = {}) {
  if (!g.failure.empty()) return;
  g.failure = why;
  g.failure_tail = tail;
  std::cerr << "tune: " << trial << ": " << why << "; stopping its other workers\n";
  (void)self->state.setup.store->add_event(trial, "worker_failed", {{"reason", why}});
  stop_workers(self, g, failed_grace);
  if (g.leader && !g.leader_end) self->send(actor_of(self, g.leader), wire::trial_stop_atom::value, int64_t{failed_grace.count()});
}

// Every rank runs: the time since rank 0's start was sent (docs/workers.md's number),
// and the join deadline set.
void all_running(controller_actor self, const std::string& trial, gang_state& g) {
  auto& st = self->state;
  nlohmann::json workers = nlohmann::json::array();
  workers.push_back({{"rank", 0}, {"node", g.leader_node}, {"pid", g.leader_pid}});
  for (auto& w : g.workers)
    workers.push_back({{"rank", w.rank}, {"node", w.node}, {"pid", w.pid}, {"trial_dir", w.trial_dir}});
  double ms = std::chrono::duration<double, std::milli>(now(self) - g.sent_at).count();
  (void)st.setup.store->add_event(trial, "workers_running",
                                  {{"world_size", g.workers.size() + 1}, {"after_ms", ms}, {"workers", workers},
                                   {"master", g.rendezvous.master_addr + ":" + std::to_string(g.rendezvous.master_port)}});
  if (st.feed) st.feed->where(trial, {{"workers", workers}});
  if (auto t = st.setup.options.join_timeout; t.count() > 0)
    self->delayed_send(self, t, controller_gang_atom::value, trial, g.attempt, static_cast<int32_t>(gang_timer::join), actor_handle{0});
}

void worker_started(controller_actor self, const std::string& trial, uint64_t attempt, uint32_t rank,
                    const wire::wire_trial_started& s, const caf::actor& a) {
  auto* g = gang_of_trial(self, trial, attempt);
  if (!g) return caf::anon_send(caf::actor_cast<caf::actor>(a), wire::trial_kill_atom::value);  // a stale attempt's
  auto& w = g->workers[rank - 1];
  w.starting = false;
  w.actor = handle_of(self, a);
  self->state.gang_of[w.actor] = {trial, attempt, rank};
  w.node = s.node;
  w.pid = s.pid;
  w.trial_dir = s.trial_dir;
  w.gpus = s.gpus;
  self->monitor(a);
  self->send(actor_of(self, w.actor), wire::route_atom::value, w.received);  // its events from here
  if (g->stopping || g->released) {  // the gang ended meanwhile
    self->send(actor_of(self, w.actor), wire::trial_stop_atom::value, int64_t{failed_grace.count()});
    return;
  }
  if (std::all_of(g->workers.begin(), g->workers.end(), [](auto& x) { return x.actor != 0; })) all_running(self, trial, *g);
}

void start_worker(controller_actor self, const std::string& trial, gang_state& g, uint32_t rank) {
  auto& st = self->state;
  auto spec = g.spec;
  spec.trial_id = st.on_wire(wire::worker_id(trial, rank));
  spec.bundle = rank;
  spec.gang = g.rendezvous;
  spec.gang.rank = rank;
  uint64_t attempt = g.attempt;
  g.workers[rank - 1].starting = true;
  self->request(st.setup.head, st.setup.request_timeout * 6, wire::trial_start_atom::value, st.setup.token, spec,
                st.setup.programs)
      .then(
          [self, trial, attempt, rank](wire::trial_start_atom, wire::wire_trial_started& s, caf::actor& a) {
            worker_started(self, trial, attempt, rank, s, a);
          },
          [self, trial, attempt, rank](caf::error& err) {
            auto* g = gang_of_trial(self, trial, attempt);
            if (!g) return;
            auto& w = g->workers[rank - 1];
            w.starting = false;
            w.ended = true;  // none to wait for
            auto why = wire::is_refusal(err) ? wire::refusal_reason(err) : describe(self->system(), err);
            fail(self, trial, *g, "worker rank " + std::to_string(rank) + " could not start: " + why);
            gang_release(self, trial);
          });
}

// Every rank has ended: rank 0's end goes on (the table, the engine), with the gang's
// failure as its error.
void release(controller_actor self, const std::string& trial, gang_state& g) {
  if (!g.leader_end) return;
  if (std::any_of(g.workers.begin(), g.workers.end(), [](auto& w) { return running(w) || w.starting; })) return;
  auto end = std::move(*g.leader_end);
  g.leader_end.reset();
  if (!g.failure.empty()) {
    end.ok = false;
    end.stopped = false;
    end.error = g.failure;
    if (!g.failure_tail.empty()) end.stderr_tail = g.failure_tail;
  }
  g.released = true;
  end_of(self, trial, std::move(end));
}

}  // namespace

void gang_sent(controller_actor self, const live::start_trial& c, const wire::wire_trial_spec& spec) {
  auto& st = self->state;
  gang_state g;
  g.attempt = c.attempt;
  g.spec = spec;
  g.sent_at = now(self);
  g.workers.resize(st.setup.options.world_size - 1);
  for (uint32_t r = 1; r < st.setup.options.world_size; ++r) g.workers[r - 1].rank = r;
  // An earlier attempt's workers still running (its end was not waited for: a lost rank
  // 0) are ended now; their late messages are a stale attempt's.
  if (auto old = st.gangs.find(c.trial); old != st.gangs.end())
    for (auto& w : old->second.workers)
      if (running(w)) self->send(actor_of(self, w.actor), wire::trial_kill_atom::value);
  st.gangs[c.trial] = std::move(g);
}

void gang_leader_started(controller_actor self, const std::string& trial, uint64_t attempt,
                         const wire::wire_trial_started& running0, actor_handle leader) {
  auto* g = gang_of_trial(self, trial, attempt);
  if (!g) return;
  g->leader = leader;
  g->leader_node = running0.node;
  g->leader_pid = running0.pid;
  g->rendezvous = running0.gang;
  if (g->workers.empty()) return all_running(self, trial, *g);
  for (auto& w : g->workers) start_worker(self, trial, *g, w.rank);
}

void gang_start_failed(controller_actor self, const std::string& trial, uint64_t attempt) {
  if (gang_of_trial(self, trial, attempt)) self->state.gangs.erase(trial);
}

gang_worker* gang_worker_heard(controller_actor self, const std::string& wire_id) {
  auto& st = self->state;
  if (st.over) return nullptr;
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (!sender) return nullptr;
  auto h = handle_of(self, sender);
  auto it = st.gang_of.find(h);
  gang_worker* w = nullptr;
  if (it != st.gang_of.end()) {
    if (auto* g = gang_of_trial(self, it->second.trial, it->second.attempt)) w = &g->workers[it->second.rank - 1];
  } else {
    // Before its start's answer (it gave up waiting for a greeting): known by its id.
    auto id = st.from_wire(wire_id);
    auto trial = wire::trial_of_worker(id);
    auto g = st.gangs.find(trial);
    auto at = id.rfind("~w");
    if (g == st.gangs.end() || at == std::string::npos) return nullptr;
    auto rank = std::strtoul(id.c_str() + at + 2, nullptr, 10);
    if (rank < 1 || rank > g->second.workers.size() || g->second.workers[rank - 1].actor != 0) return nullptr;
    w = &g->second.workers[rank - 1];
    w->actor = h;
    st.gang_of[h] = {trial, g->second.attempt, static_cast<uint32_t>(rank)};
    self->monitor(sender);
  }
  if (!w) {
    self->send(actor_of(self, h), wire::trial_kill_atom::value);  // a stale attempt's worker
    return nullptr;
  }
  if (++w->received % wire::ack_every == 0) self->send(actor_of(self, h), wire::trial_ack_atom::value, w->received);
  return w;
}

std::string gang_trial(controller_actor self, const gang_worker& w) {
  auto it = self->state.gang_of.find(w.actor);
  return it == self->state.gang_of.end() ? std::string{} : it->second.trial;
}

void gang_joined(controller_actor self, const std::string& trial, gang_worker* w) {
  auto g = self->state.gangs.find(trial);
  if (g == self->state.gangs.end()) return;
  if (w) w->joined = true;
  else g->second.leader_joined = true;
}

void gang_worker_ended(controller_actor self, gang_worker& w, const wire::wire_trial_end& e) {
  auto trial = gang_trial(self, w);
  auto it = self->state.gangs.find(trial);
  if (it == self->state.gangs.end()) return;
  w.ended = true;
  if (!e.ok && !it->second.stopping && !it->second.released)
    fail(self, trial, it->second, who(w) + ": " + (e.error.empty() ? "ended" : e.error), e.stderr_tail);
  release(self, trial, it->second);
}

bool gang_hold_end(controller_actor self, const std::string& trial, wire::wire_trial_end& end) {
  auto it = self->state.gangs.find(trial);
  if (it == self->state.gangs.end() || it->second.released) return false;
  auto& g = it->second;
  g.leader_end = std::move(end);
  if (!g.leader_end->ok && !g.leader_end->stopped && g.failure.empty()) {
    g.failure = "worker rank 0 (node " + g.leader_node + ", pid " + std::to_string(g.leader_pid) + "): " + g.leader_end->error;
    stop_workers(self, g, failed_grace);
  } else if (std::any_of(g.workers.begin(), g.workers.end(), running)) {
    self->delayed_send(self, ended_wait, controller_gang_atom::value, trial, g.attempt, static_cast<int32_t>(gang_timer::stop_rest), actor_handle{0});
  }
  self->delayed_send(self, ended_wait + self->state.setup.options.stop_grace + reap_margin, controller_gang_atom::value, trial,
                     g.attempt, static_cast<int32_t>(gang_timer::reap), actor_handle{0});
  release(self, trial, g);
  return true;
}

bool gang_holds_end(controller_actor self, const std::string& trial) {
  auto it = self->state.gangs.find(trial);
  return it != self->state.gangs.end() && it->second.leader_end.has_value();
}

void gang_release(controller_actor self, const std::string& trial) {
  if (auto it = self->state.gangs.find(trial); it != self->state.gangs.end()) release(self, trial, it->second);
}

void gang_stopped(controller_actor self, actor_handle leader) {
  for (auto& [trial, g] : self->state.gangs)
    if (g.leader == leader && !g.leader_end) stop_workers(self, g, self->state.setup.options.stop_grace);
}

void gang_ended(controller_actor self, const std::string& trial) {
  auto& st = self->state;
  auto it = st.gangs.find(trial);
  if (it == st.gangs.end()) return;
  for (auto& w : it->second.workers)
    if (running(w)) self->send(actor_of(self, w.actor), wire::trial_kill_atom::value);  // rank 0 was lost
  for (auto& w : it->second.workers) st.gang_of.erase(w.actor);
  st.gangs.erase(it);
}

bool gang_down(controller_actor self, actor_handle h, const std::string& why) {
  auto& st = self->state;
  auto it = st.gang_of.find(h);
  if (it == st.gang_of.end()) return false;
  self->delayed_send(self, std::chrono::seconds(2), controller_gang_atom::value, it->second.trial, it->second.attempt,
                     static_cast<int32_t>(gang_timer::lost), h);
  st.gang_lost_why[h] = why;
  return true;
}

void gang_node_dead(controller_actor self, const std::string& node, const std::string& reason) {
  for (auto& [trial, g] : self->state.gangs)
    for (auto& w : g.workers)
      if (running(w) && w.node == node) {
        self->state.gang_lost_why[w.actor] = "its node " + node + " is dead: " + reason;
        self->delayed_send(self, std::chrono::milliseconds(20), controller_gang_atom::value, trial, g.attempt,
                           static_cast<int32_t>(gang_timer::lost), w.actor);
      }
}

void gang_timer_fired(controller_actor self, const std::string& trial, uint64_t attempt, int32_t timer, actor_handle h) {
  auto what = static_cast<gang_timer>(timer);
  auto& st = self->state;
  auto* g = gang_of_trial(self, trial, attempt);
  if (st.over || !g) return;
  switch (what) {
    case gang_timer::join: {
      if (g->leader_end || !g->failure.empty()) return;
      std::string missing;
      if (!g->leader_joined) missing = "0";
      for (auto& w : g->workers)
        if (!w.joined) missing += (missing.empty() ? "" : ", ") + std::to_string(w.rank);
      if (missing.empty()) return;
      auto s = std::chrono::duration<double>(st.setup.options.join_timeout).count();
      std::ostringstream secs;
      secs << s;
      fail(self, trial, *g,
           std::string{missing.find(',') == std::string::npos ? "worker rank " : "worker ranks "} + missing +
               " did not join the others within " + secs.str() +
               " s (workers.join_timeout_s: a worker joins once its process group is made, e.g. by "
               "torch.distributed.init_process_group, or by reporting)");
      return;
    }
    case gang_timer::stop_rest: stop_workers(self, *g, st.setup.options.stop_grace); return;
    case gang_timer::reap:
      for (auto& w : g->workers)
        if (running(w)) {
          self->send(actor_of(self, w.actor), wire::trial_kill_atom::value);
          w.ended = true;
        }
      return release(self, trial, *g);
    case gang_timer::lost: {
      for (auto& w : g->workers)
        if (w.actor == h && running(w)) {
          w.ended = true;
          auto why = st.gang_lost_why.count(h) ? st.gang_lost_why[h] : std::string{"its actor is gone"};
          fail(self, trial, *g, who(w) + " was lost: " + why);
        }
      st.gang_lost_why.erase(h);
      return release(self, trial, *g);
    }
  }
}

}  // namespace tune
