// The controller's sinks (tune/tuner/trial_logs.hpp): each trial's files (TensorBoard,
// progress.csv, result.json) and the trackers, told every start, result and end, and
// flushed with the store's batches. What a sink could not do is an event of the store
// and a line on standard error; the experiment goes on.
#include <iostream>

#include "controller_state.hpp"
#include "tune/core/clock.hpp"

namespace tune {

void open_sinks(controller_actor self) {
  auto& st = self->state;
  const auto& o = st.setup.options;
  // The files are written on a thread of their own: the controller only copies.
  if (o.trial_files)
    st.sinks.push_back(std::make_shared<background_sink>(std::make_unique<trial_files>(st.setup.store->dir())));
  for (auto& s : o.sinks) st.sinks.push_back(s);
}

void sinks_started(controller_actor self, const std::string& trial, const nlohmann::json& config) {
  auto now = wall_seconds();
  for (auto& s : self->state.sinks) s->started(trial, config, now);
}

void sinks_result(controller_actor self, const std::string& trial, const logged_result& r) {
  for (auto& s : self->state.sinks) s->result(trial, r);
}

void sinks_ended(controller_actor self, const std::string& trial) {
  auto& st = self->state;
  if (st.sinks.empty()) return;
  auto& t = st.setup.engine->trials().at(trial);
  auto now = wall_seconds();
  for (auto& s : st.sinks) s->ended(trial, t.state, t.error, now);
}

void sinks_flush(controller_actor self) {
  auto& st = self->state;
  for (auto& s : st.sinks) {
    s->flush();
    // The dashboard's links: a trial's TensorBoard folder, its tracker runs.
    for (auto& l : s->take_links()) {
      if (!st.feed) continue;
      if (l.kind == "tensorboard")
        st.feed->where(l.trial, {{"tensorboard_dir", l.url}});
      else
        st.feed->where(l.trial, {{l.kind + "_run", {{"id", l.id}, {"url", l.url}}}});
    }
    for (auto& w : s->take_warnings()) {
      (void)st.setup.store->add_event("", "sink_warning", {{"warning", w}});
      std::cerr << "tune: warning: " << w << "\n";
    }
  }
}

// The best trial of those that ended well (by the metric's latest value; one that breaks
// a constraint is not), for the trackers' tag.
std::string best_trial(controller_actor self) {
  const auto& engine = *self->state.setup.engine;
  const auto& eo = engine.options();
  std::string best;
  double best_value = 0;
  for (auto& [id, t] : engine.trials()) {
    if (t.state != trial_state::terminated || !t.value) continue;
    bool feasible = true;
    for (size_t i = 0; i < eo.constraints.size(); ++i) {
      auto at = eo.other_objectives.size() + i;
      if (at >= t.others.size() || !t.others[at] || *t.others[at] > 0) feasible = false;
    }
    if (!feasible) continue;
    if (best.empty() || (eo.direction == mode::max ? *t.value > best_value : *t.value < best_value)) {
      best = id;
      best_value = *t.value;
    }
  }
  return best;
}

void close_sinks(controller_actor self) {
  auto& st = self->state;
  if (st.sinks.empty()) return;
  auto best = best_trial(self);
  auto now = wall_seconds();
  for (auto& s : st.sinks) s->experiment_ended(best, now);
  sinks_flush(self);
  st.sinks.clear();
}

}  // namespace tune
