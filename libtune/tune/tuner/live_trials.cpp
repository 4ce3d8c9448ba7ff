#include "tune/tuner/live_trials.hpp"

namespace tune {

const char* to_string(live_state s) {
  switch (s) {
    case live_state::placing: return "placing";
    case live_state::waiting: return "waiting";
    case live_state::starting: return "starting";
    case live_state::running: return "running";
    case live_state::stopping: return "stopping";
    case live_state::moving: return "moving";
    case live_state::paused: return "paused";
    case live_state::ended: return "ended";
  }
  return "?";
}

const live_trials::trial* live_trials::find(const std::string& id) const {
  auto it = trials_.find(id);
  return it == trials_.end() ? nullptr : &it->second;
}

std::string live_trials::trial_of(actor_handle actor) const {
  auto it = by_actor_.find(actor);
  return it == by_actor_.end() ? std::string{} : it->second;
}

bool live_trials::current(const std::string& id, uint64_t attempt) const {
  auto* t = find(id);
  return t && t->start && t->attempt == attempt;
}

live_trials::trial* live_trials::current_attempt(const std::string& id, uint64_t attempt) {
  auto it = trials_.find(id);
  if (it == trials_.end() || !it->second.start || it->second.attempt != attempt) return nullptr;
  return &it->second;
}

void live_trials::act(const std::vector<engine_action>& actions) {
  for (auto& a : actions) {
    auto& t = trials_[a.trial];
    if (a.what != engine_action::kind::start) {
      t.pause_asked = a.what == engine_action::kind::pause;
      if (t.actor && head_up_) {
        out_.push_back(live::stop_actor{t.actor});
        if (t.state != live_state::moving) t.state = live_state::stopping;
      } else {
        t.stop_asked = true;  // stopped as soon as it says it runs (again)
      }
      continue;
    }
    t.start = a;
    t.pause_asked = false;
    ++t.attempt;
    t.reissued = false;
    t.group_ready = false;
    t.received = 0;  // counts what its next actor sends
    if (!head_up_) {
      t.state = live_state::placing;  // made when the head is back
      continue;
    }
    if (!t.group.empty()) {  // it holds its group still: started in it
      t.state = live_state::starting;
      out_.push_back(live::start_trial{a.trial, t.attempt, t.group, a});
      continue;
    }
    place(a.trial, t);
  }
}

// A group for the start: a new one, or again the one it had (after a head restart its
// bundles are claimed as they are held, should its node hold them still).
void live_trials::place(const std::string& id, trial& t) {
  t.state = live_state::placing;
  out_.push_back(live::create_group{id, t.attempt, t.group, t.reissued && t.group_ready, t.move_avoid});
}

// A moved trial that found no room off the nodes it left: placed anywhere after all.
void live_trials::move_anywhere(const std::string& id, trial& t) {
  out_.push_back(live::note{id, "move_fallback", {{"avoided", t.move_avoid}}});
  t.move_avoid.clear();
  give_back(t);
  ++t.attempt;
  place(id, t);
}

void live_trials::give_back(trial& t) {
  if (t.group.empty()) return;
  out_.push_back(live::remove_group{t.group});
  t.group.clear();
}

void live_trials::forget_actor(trial& t) {
  if (t.actor) {
    out_.push_back(live::unwatch{t.actor});
    by_actor_.erase(t.actor);
  }
  t.actor = 0;
  t.stop_asked = false;
}

// The start's answer names the trial's actor: known from here on (another actor's
// messages are not its).
void live_trials::adopt(const std::string& id, trial& t, actor_handle actor) {
  if (t.actor == actor) return;
  if (t.actor) {
    out_.push_back(live::unwatch{t.actor});
    by_actor_.erase(t.actor);
  }
  t.actor = actor;
  t.received = 0;
  by_actor_[actor] = id;
  out_.push_back(live::watch{actor});
}

void live_trials::fail_start(const std::string& id, trial& t, const std::string& why) {
  t.start.reset();
  t.state = live_state::ended;
  give_back(t);
  out_.push_back(live::start_failed{id, why});
}

void live_trials::on_group_created(const std::string& id, uint64_t attempt, const group_answer& a) {
  auto* t = current_attempt(id, attempt);
  if (!t) return;
  // Made again after a head restart, it may exist still (the head had not yet noticed
  // the controller's old connection was gone): waited for as it is.
  bool again = !a.ok && a.state == "exists" && !t->group.empty();
  if (!a.ok && !again) {
    out_.push_back(live::fail{a.reason});  // a bad request: every trial's
    return;
  }
  if (!again) t->group = a.group;
  if (!t->move_avoid.empty() && a.state == "infeasible") return move_anywhere(id, *t);
  t->state = live_state::waiting;
  // Already placed (the controller's create waits a while for that): started at once,
  // without a separate wait.
  if (a.ok && a.state == "created") return on_group_wait(id, attempt, true, a.state, a.reason);
  out_.push_back(live::wait_group{id, attempt, t->group});
}

void live_trials::on_group_wait(const std::string& id, uint64_t attempt, bool ready, const std::string& state,
                                const std::string& why) {
  auto* t = current_attempt(id, attempt);
  if (!t) return;
  if (ready) {
    t->group_ready = true;
    t->state = live_state::starting;
    out_.push_back(live::start_trial{id, attempt, t->group, *t->start});
    return;
  }
  if (!t->move_avoid.empty()) return move_anywhere(id, *t);
  fail_start(id, *t, "placement group " + t->group + " is " + state + (why.empty() ? "" : ": " + why));
}

void live_trials::on_start_answer(const std::string& id, uint64_t attempt, bool ok, const std::string& reason,
                                  const std::string& node, actor_handle actor) {
  auto* t = current_attempt(id, attempt);
  if (!t) return;
  if (!ok && t->reissued && actor) {  // the node runs it already (wire.hpp's start answer)
    // Started before the head died (its answer was lost with it): it is ours.
    t->start.reset();
    if (t->state == live_state::starting) t->state = live_state::running;
    adopt(id, *t, actor);
    if (!t->group.empty()) out_.push_back(live::greet{id, t->group, t->received});
    return;
  }
  if (!ok) return fail_start(id, *t, reason);
  t->start.reset();
  if (!t->move_when_started) t->move_avoid.clear();
  if (!node.empty()) t->node = node;
  // Its first message may have come already (its events can overtake this answer).
  if (t->state == live_state::starting) t->state = live_state::running;
  if (!actor) return;
  adopt(id, *t, actor);
  out_.push_back(live::route{actor, t->received});  // its events come after this
  if (t->stop_asked) {
    t->stop_asked = false;
    t->state = live_state::stopping;
    out_.push_back(live::stop_actor{actor});
  } else if (t->move_when_started) {
    auto [why, asked] = std::move(*t->move_when_started);
    t->move_when_started.reset();
    auto avoid = t->move_avoid;
    on_move(t->group, avoid, asked, why);
  }
}

void live_trials::on_request_failed(const std::string& id, uint64_t attempt, const std::string& why) {
  auto* t = current_attempt(id, attempt);
  if (!t || !head_up_) return;
  fail_start(id, *t, why);
}

void live_trials::on_start_impossible(const std::string& id, uint64_t attempt, const std::string& why) {
  if (auto* t = current_attempt(id, attempt)) fail_start(id, *t, why);
}

bool live_trials::accept(const std::string& id, actor_handle sender, bool last) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return false;
  if (sender && lost_.count(sender)) {
    out_.push_back(live::kill_actor{sender});
    return false;
  }
  auto& t = it->second;
  if (t.actor && sender != t.actor) return false;  // an earlier actor's, or not a trial's
  if (!t.actor) {
    // Only a start on its way (or one that was answered, its actor not yet heard) has
    // an actor to come: anything else is a stale actor's late message.
    bool expecting = t.start.has_value() || t.state == live_state::starting || t.state == live_state::running ||
                     t.state == live_state::stopping;
    if (!sender || !expecting) return false;
    if (last) return true;  // an end before any other message: nothing to watch
    t.actor = sender;
    t.received = 0;
    by_actor_[sender] = id;
    out_.push_back(live::watch{sender});
    if (t.state == live_state::starting && !t.start) t.state = live_state::running;
  }
  if (++t.received % opt_.ack_every == 0) out_.push_back(live::ack{t.actor, t.received});
  if (t.stop_asked && !last) {
    t.stop_asked = false;
    if (!t.start && t.state != live_state::moving) t.state = live_state::stopping;
    out_.push_back(live::stop_actor{t.actor});
  }
  return true;
}

void live_trials::on_ended(const std::string& id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return;
  auto& t = it->second;
  bool moving = t.state == live_state::moving;
  forget_actor(t);
  // Its resources go back, paused or not: a paused trial gets a new group when it
  // resumes (so paused trials never hold cards others wait for).
  give_back(t);
  t.start.reset();
  t.state = moving ? live_state::placing : t.pause_asked ? live_state::paused : live_state::ended;
  t.pause_asked = false;
  if (moving) out_.push_back(live::moved_out{id});
  else out_.push_back(live::ended{id});
}

std::optional<std::string> live_trials::on_down(actor_handle actor) const {
  auto it = by_actor_.find(actor);
  if (it == by_actor_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<std::string, actor_handle>> live_trials::on_node_dead(const std::string& node) const {
  std::vector<std::pair<std::string, actor_handle>> out;
  for (auto& [id, t] : trials_)
    if (t.node == node && t.actor) out.emplace_back(id, t.actor);
  return out;
}

bool live_trials::on_lost(const std::string& id, actor_handle actor, live_clock::time_point now) {
  // Not while the head is away (or just back): its trials run on and say so again.
  if (!head_up_ || (head_was_lost_ && now - head_back_at_ < opt_.lost_after_head_back)) return false;
  auto it = trials_.find(id);
  if (it == trials_.end() || !it->second.actor || it->second.actor != actor) return false;  // it ended after all
  lost_.insert(actor);
  on_ended(id);
  return true;
}

void live_trials::on_move(const std::string& group, const std::vector<std::string>& avoid, live_clock::time_point now,
                          const std::string& why) {
  if (!head_up_) return;
  for (auto& [id, t] : trials_) {
    if (t.group == group && (t.start || t.state == live_state::starting) && !t.stop_asked) {
      t.move_when_started = {why, now};  // its start is on its way: moved once it runs
      t.move_avoid = avoid;
      return;
    }
    if (t.group != group || !t.actor || t.start || t.state != live_state::running || t.stop_asked) continue;
    if (t.last_move && now - *t.last_move < opt_.min_move_interval) {
      out_.push_back(live::note{id, "move_refused", {{"why", "it moved less than min_move_interval ago"}}});
      return;
    }
    t.state = live_state::moving;
    t.last_move = now;
    t.move_avoid = avoid;
    nlohmann::json body{{"avoid", avoid}, {"from", t.node}};
    if (!why.empty()) body["why"] = why;
    out_.push_back(live::note{id, "move", std::move(body)});
    out_.push_back(live::stop_actor{t.actor});
    return;
  }
}

void live_trials::on_head_lost(live_clock::time_point) { head_up_ = false; }

void live_trials::on_head_back(live_clock::time_point now) {
  head_up_ = true;
  head_was_lost_ = true;
  head_back_at_ = now;
  for (auto& [id, t] : trials_) {
    if (t.start) {
      ++t.attempt;
      t.reissued = true;
      place(id, t);
      continue;
    }
    if (!t.actor || t.group.empty()) continue;
    out_.push_back(live::retake_group{id, t.group});
  }
}

void live_trials::release_all(bool stop) {
  for (auto& [id, t] : trials_) {
    if (stop && t.actor) out_.push_back(live::stop_actor{t.actor});
    give_back(t);
  }
}

}  // namespace tune
