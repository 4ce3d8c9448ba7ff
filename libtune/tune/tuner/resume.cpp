#include "tune/tuner/resume.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "tune/core/json_text.hpp"

namespace tune {

namespace {

// One thing that happened, in the order it happened (by time; at the same time, a
// trial's results before its checkpoint before its end).
struct happening {
  double time = 0;
  int order = 0;  // 0 result, 1 checkpoint, 2 ended, 3 stop, 4 pause (decided)
  int64_t seq = 0;
  std::string trial;
  int64_t iteration = 0;
  const nlohmann::json* body = nullptr;  // metrics (result) or the event's body
};

}  // namespace

expected<resume_plan> replay_experiment(experiment_engine& engine, const experiment_store& store) {
  auto trials = store.trials();
  if (!trials) return trials.error();
  if (trials->empty()) return status{errc::not_found, "the experiment in " + store.dir() + " has no trials: nothing to resume"};
  auto results = store.results();
  if (!results) return results.error();
  auto events = store.events();
  if (!events) return events.error();
  std::map<std::string, const trial_row*> stored;
  double t0 = trials->front().created;
  for (auto& t : *trials) {
    stored[t.id] = &t;
    t0 = std::min(t0, t.created);
  }
  std::vector<happening> timeline;
  timeline.reserve(results->size() + events->size());
  for (auto& r : *results) timeline.push_back({r.time, 0, 0, r.trial, r.iteration, &r.metrics});
  for (auto& e : *events) {
    if (e.trial.empty()) continue;
    if (e.kind == "checkpoint" && e.body.contains("iteration") && e.body["iteration"].is_number_integer())
      timeline.push_back({e.time, 1, e.seq, e.trial, e.body["iteration"].get<int64_t>(), &e.body});
    else if (e.kind == "ended")
      timeline.push_back({e.time, 2, e.seq, e.trial, 0, &e.body});
    else if (e.kind == "stop" || e.kind == "pause")  // a decision: the hooks' are not made again
      timeline.push_back({e.time, e.kind == "stop" ? 3 : 4, e.seq, e.trial, 0, &e.body});
  }
  std::stable_sort(timeline.begin(), timeline.end(), [](const happening& a, const happening& b) {
    if (a.time != b.time) return a.time < b.time;
    if (a.trial == b.trial && a.order != b.order) return (a.order >= 3 ? 1 : a.order) < (b.order >= 3 ? 1 : b.order);
    return a.seq < b.seq;
  });

  // What the hooks answered for the stored trials, from the store: a trial's own
  // resources (its "resources" event), PBT's explored configurations (its "exploit"
  // events, in order).
  std::map<std::string, nlohmann::json> requests;
  std::map<std::string, std::vector<config>> explored;
  for (auto& e : *events) {
    if (e.kind == "resources") requests[e.trial] = e.body;
    if (e.kind == "exploit" && e.body.contains("config")) explored[e.trial].push_back(e.body["config"]);
  }
  std::map<std::string, size_t> explores_taken;
  // A hook's ask about a stored trial, answered as the hooks answered it then (the
  // hooks' own state is theirs to restore); about another, asked again after the replay.
  auto answered = [&](const engine_action& a) -> expected<std::vector<engine_action>> {
    auto s = stored.find(a.trial);
    using k = engine_action::kind;
    if (a.what == k::suggest) return engine.on_suggestion(a.trial, s->second->config);
    if (a.what == k::prepare) {
      std::optional<trial_resources> r;
      if (auto q = requests.find(a.trial); q != requests.end()) {
        trial_resources req;
        for (auto& b : q->second.value("bundles", nlohmann::json::array()))
          if (auto set = resource_set::from_json(json_text(b))) req.bundles.push_back(*set);
        if (auto st = parse_strategy(q->second.value("strategy", std::string{"pack"}))) req.strat = *st;
        r = std::move(req);
      }
      return engine.on_prepared(a.trial, s->second->config, std::move(r));
    }
    auto& taken = explores_taken[a.trial];
    auto& list = explored[a.trial];
    return engine.on_explored(a.trial, taken < list.size() ? list[taken++] : a.cfg);
  };

  resume_plan plan;
  std::set<std::string> begun;  // stored trials the replay has started
  std::function<status(expected<std::vector<engine_action>>)> take = [&](expected<std::vector<engine_action>> acts) -> status {
    if (!acts) return acts.error();
    for (auto& a : *acts) {
      using k = engine_action::kind;
      if (a.what == k::suggest || a.what == k::prepare || a.what == k::explore) {
        if (!stored.count(a.trial)) {
          plan.actions.push_back(a);  // asked of the hooks again once the experiment runs
          continue;
        }
        if (auto st = take(answered(a)); !st) return st;
        continue;
      }
      if (a.what != engine_action::kind::start) continue;  // its end is in the history (or it was interrupted)
      auto s = stored.find(a.trial);
      if (s == stored.end()) {
        plan.actions.push_back(a);  // decided but never carried out: now
        continue;
      }
      // As stored: a configuration's bytes that are not UTF-8 are kept as U+FFFD (json_text).
      if (begun.insert(a.trial).second && a.cfg != s->second->config && json_text(a.cfg) != json_text(s->second->config))
        return status{errc::inconsistent,
                      "cannot resume " + store.dir() + ": this program's search gives " + a.trial + " the configuration " +
                          json_text(a.cfg) + ", the experiment ran it with " + json_text(s->second->config) +
                          " (were the search space, the seed or the settings changed?)"};
    }
    return status::ok();
  };
  if (auto s = take(engine.step(0)); !s) return s;
  for (auto& h : timeline) {
    if (!engine.trials().count(h.trial)) continue;  // not (yet) one the engine knows: its history cannot count
    if (auto s = take(engine.step(std::max(0.0, h.time - t0))); !s) return s;
    if (h.order == 0) {
      ++plan.replayed_results;
      if (auto s = take(engine.on_result(h.trial, h.iteration, *h.body)); !s) return s;
    } else if (h.order == 1) {
      engine.on_checkpoint(h.trial, h.iteration);
    } else if (h.order >= 3) {  // what the engine decided itself it has decided again: nothing changes
      auto what = h.order == 3 ? engine_action::kind::stop : engine_action::kind::pause;
      if (auto s = take(engine.on_decision(h.trial, what, h.body->value("reason", std::string{}))); !s) return s;
    } else {
      bool ok = h.body->value("ok", false) || h.body->value("stopped", false);
      if (auto s = take(engine.on_ended(h.trial, ok, h.body->value("error", std::string{}))); !s) return s;
    }
  }
  // What ran when the driver died starts again; what it had decided and not yet done,
  // now.
  std::vector<std::string> running;
  for (auto& [id, t] : engine.trials())
    if (t.state == trial_state::running && stored.count(id)) running.push_back(id);
  for (auto& id : running) {
    auto acts = engine.on_interrupted(id);
    if (!acts) return acts.error();
    ++plan.interrupted_trials;
    for (auto& a : *acts) plan.actions.push_back(a);
  }
  for (auto& [id, t] : engine.trials()) plan.finished_trials += finished(t.state);
  plan.results = std::move(*results);  // the controller shows them (its dashboard curves): not read twice
  return plan;
}

}  // namespace tune
