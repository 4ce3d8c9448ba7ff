// The controller and the experiment's hooks (tune/tuner/hooks.hpp): what it tells the host
// that runs the user's code (experiment and trial events, results, asks for
// configurations, preparations and explores), and what the host answers (configurations,
// decisions, a failure), taken when the host wakes it and given to the engine.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "controller_state.hpp"
#include "tune/core/clock.hpp"
#include "tune/core/json_text.hpp"

namespace tune {

namespace {

const hook::interest no_interest{};

// The engine's answer to what the hooks said: carried out, or the experiment's end.
void carry(controller_actor self, expected<std::vector<engine_action>> more) {
  if (self->state.over) return;
  if (!more) return finish(self, more.error());
  if (!more->empty()) act(self, std::move(*more));
}

// A trial that ended before it started (its preparation failed): its record, and the
// hooks' searcher told.
void ended_unstarted(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& t = st.setup.engine->trials().at(id);
  if (auto s = st.setup.store->add_trial(id, t.cfg, t.state); !s && s.code() != errc::already_exists) return finish(self, s);
  (void)st.setup.store->update_trial(id, t.state, t.error);
  (void)st.setup.store->add_event(id, "not_started", {{"error", t.error}});
  if (!t.error.empty()) std::cerr << "tune: " << id << " cannot run: " << t.error << "\n";
  hooks_trial_end(self, id, false);
}

void on_prepared(controller_actor self, hook::prepared& p) {
  auto& engine = *self->state.setup.engine;
  auto request = p.error.empty() ? trial_resources_of(p.resources, p.trial)
                                 : expected<std::optional<trial_resources>>(errc::invalid_argument, p.error);
  auto more = engine.on_prepared(p.trial, std::move(p.cfg), std::move(request));
  if (more && more->empty() && engine.trials().count(p.trial) && engine.trials().at(p.trial).state == trial_state::error)
    ended_unstarted(self, p.trial);
  carry(self, std::move(more));
}

void on_decided(controller_actor self, const hook::decided& d) {
  auto& engine = *self->state.setup.engine;
  if (!engine.trials().count(d.trial)) return;  // a trial the engine never made (a hook's mistake): nothing to do
  using k = hook::decided::kind;
  if (d.what == k::resume) return carry(self, engine.on_resume(d.trial));
  auto what = d.what == k::stop ? engine_action::kind::stop : d.what == k::pause ? engine_action::kind::pause
                                                                                 : engine_action::kind::checkpoint;
  carry(self, engine.on_decision(d.trial, what, d.reason));
}

// The hooks' state (a C++ program's searcher), kept whole: written beside, then moved.
void keep_state(controller_actor self, const std::string& state) {
  const auto& file = self->state.setup.options.hooks_state_file;
  if (file.empty()) return;
  auto temp = file + ".tmp";
  std::ofstream out(temp, std::ios::binary | std::ios::trunc);
  out.write(state.data(), static_cast<std::streamsize>(state.size()));
  out.close();
  std::error_code ec;
  if (out) std::filesystem::rename(temp, file, ec);
  if (!out || ec) (void)self->state.setup.store->add_event("", "hooks_state_not_kept", {{"file", file}});
}

void answer(controller_actor self, hook::answer& a) {
  auto& st = self->state;
  auto& engine = *st.setup.engine;
  std::visit(
      [&](auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, hook::suggestion>) {
          using k = hook::suggestion::kind;
          auto cfg = x.what == k::config ? std::optional<config>{std::move(x.cfg)} : std::nullopt;
          auto more = engine.on_suggestion(x.trial, std::move(cfg), x.what == k::finished);
          if (!more) return finish(self, status{more.error().code(), st.setup.options.hooks->name() + ": " + more.error().message()});
          carry(self, std::move(more));
        } else if constexpr (std::is_same_v<T, hook::prepared>) {
          on_prepared(self, x);
        } else if constexpr (std::is_same_v<T, hook::explored>) {
          carry(self, engine.on_explored(x.trial, std::move(x.cfg)));
        } else if constexpr (std::is_same_v<T, hook::decided>) {
          on_decided(self, x);
        } else if constexpr (std::is_same_v<T, hook::stop_all>) {
          (void)st.setup.store->add_event("", "stop_all", {{"reason", x.reason}});
          std::cerr << "tune: stopping every trial: " << x.reason << "\n";
          carry(self, expected<std::vector<engine_action>>(engine.stop_all(x.reason)));
        } else if constexpr (std::is_same_v<T, hook::failure>) {
          st.hooks_failed = true;
          auto what = hook::describe(x);
          (void)st.setup.store->add_event(x.trial, "hook_failed",
                                          {{"hook", x.hook}, {"message", x.message}, {"traceback", x.traceback}});
          finish(self, status{errc::invalid_argument, st.setup.options.hooks->name() + ": " + what});
        } else if constexpr (std::is_same_v<T, hook::saved>) {
          keep_state(self, x.state);
        }
      },
      a);
}

}  // namespace

const hook::interest& hooks_want(controller_actor self) {
  auto* h = self->state.setup.options.hooks.get();
  return h && !self->state.hooks_failed ? h->wants() : no_interest;
}

void hooks_post(controller_actor self, hook::event e) {
  if (auto& h = self->state.setup.options.hooks; h && !self->state.hooks_failed) h->post(std::move(e));
}

void open_hooks(controller_actor self) {
  auto& st = self->state;
  auto& h = st.setup.options.hooks;
  if (!h) return;
  // Woken from the host's thread: a message to itself (by its address: the host must not
  // keep the controller alive).
  auto addr = caf::actor_cast<caf::actor_addr>(self);
  if (auto s = h->start([addr] {
        if (auto a = caf::actor_cast<caf::actor>(addr)) caf::anon_send(a, controller_hooks_atom::value);
      });
      !s)
    return finish(self, status{s.code(), h->name() + ": " + s.message()});
  hook::setup setup;
  auto& eo = st.setup.engine->options();
  setup.experiment = {st.setup.options.name, st.setup.store->dir(), eo.metric, eo.direction, 0, st.setup.resumed};
  if (auto n = st.setup.store->meta("num_samples"); n && n->is_number_integer()) setup.experiment.num_samples = n->get<int>();
  for (auto& [id, t] : st.setup.engine->trials()) {
    trial_info info;
    info.id = id;
    info.cfg = t.cfg;
    info.state = t.state;
    info.iteration = t.iteration;
    info.error = t.error;
    info.checkpoint = t.checkpoint;
    setup.trials.push_back(std::move(info));
  }
  h->post(std::move(setup));
  st.last_hooks_save = now(self);
}

void take_hook_answers(controller_actor self) {
  auto& st = self->state;
  auto& h = st.setup.options.hooks;
  if (!h || st.over) return;
  for (auto& a : h->take()) {
    if (st.over) return;
    answer(self, a);
  }
  if (!st.over) advance(self);
}

void hooks_tick(controller_actor self) {
  auto& st = self->state;
  auto& h = st.setup.options.hooks;
  if (!h || st.over || st.hooks_failed) return;
  if (auto why = h->broken(); !why.empty()) {
    (void)st.setup.store->add_event("", "hooks_lost", {{"reason", why}});
    return finish(self, status{errc::not_found, h->name() + " " + why});
  }
  const auto& w = h->wants();
  if ((w.suggests || w.schedules) && now(self) - st.last_hooks_save >= st.setup.options.hooks_save_every) {
    st.last_hooks_save = now(self);
    h->post(hook::save{});
  }
}

void hooks_trial_end(controller_actor self, const std::string& id, bool recovering) {
  if (!hooks_want(self).trials) return;
  auto& t = self->state.setup.engine->trials().at(id);
  hooks_post(self, hook::trial_end{id, recovering ? trial_state::error : t.state, recovering,
                                   recovering ? t.last_failure : t.error});
}

void close_hooks(controller_actor self, bool ok) {
  auto& st = self->state;
  auto& h = st.setup.options.hooks;
  if (!h) return;
  if (ok && (hooks_want(self).suggests || hooks_want(self).schedules)) h->post(hook::save{});
  h->post(hook::end{});
  // Its on_experiment_end and last state, at most this long: the end's answer (done)
  // comes last.
  h->drain(std::chrono::seconds(30));
  for (auto& a : h->take())
    if (auto* s = std::get_if<hook::saved>(&a)) keep_state(self, s->state);
}

}  // namespace tune
