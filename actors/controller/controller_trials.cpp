// What the controller records of each trial — the engine told, the store written, the
// dashboard's feed, its starts sent (from the checkpoint copy controller_checkpoints.cpp
// picks) — as the live trials' table (tune/tuner/live_trials.hpp) moves it along.
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "controller_state.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/trace.hpp"
#include "tune/core/clock.hpp"
#include "tune/host/detect.hpp"
#include "tune/trial/command.hpp"

namespace tune {

namespace {

// How often the head's dashboard board hears what changed.
constexpr std::chrono::milliseconds board_every{500};

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

// A running trial is asked for a checkpoint now (a callback's should_checkpoint): its
// actor signals the worker, which makes one after its current step if it can.
void ask_checkpoint(controller_actor self, const std::string& id, const std::string& reason) {
  auto& st = self->state;
  auto* t = st.table.find(id);
  if (!t || t->state != live_state::running || !t->actor) return;
  if (auto a = actor_of(self, t->actor)) self->send(a, wire::trial_save_atom::value);
  (void)st.setup.store->add_event(id, "checkpoint_asked", {{"reason", reason}});
}

nlohmann::json request_json(const trial_resources& r) {
  auto bundles = nlohmann::json::array();
  for (auto& b : r.bundles) bundles.push_back(nlohmann::json::parse(b.to_json()));
  return {{"bundles", bundles}, {"strategy", std::string{to_string(r.strat)}}};
}

std::string result_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A result as one line (show_results): "trial-00001 at 3: acc=0.91, loss=0.2".
void show_result(controller_actor self, const std::string& id, int64_t it, const std::string& text) {
  auto& o = self->state.setup.options;
  if (!o.show_results || !o.on_output) return;
  std::string line = id + " at " + std::to_string(it) + ":";
  auto m = nlohmann::json::parse(text, nullptr, false);
  if (m.is_object())
    for (auto& [k, v] : m.items()) line += " " + k + "=" + (v.is_number_float() ? result_number(v.get<double>()) : json_text(v));
  o.on_output(line);
}

// The checkpoint score attribute's value in a result (checkpoint_keep.hpp ranks the
// trial's checkpoints by it); only iterations that have a checkpoint, or may still get
// one, are remembered.
void note_score(controller_actor self, const std::string& id, int64_t it, const std::string& text) {
  auto& attr = self->state.setup.options.checkpoints.score_attribute;
  if (attr.empty()) return;
  auto m = nlohmann::json::parse(text, nullptr, false);
  auto v = m.is_object() ? m.find(attr) : m.end();
  if (!m.is_object() || v == m.end() || !v->is_number()) return;
  auto& r = self->state.records[id];
  r.scores[it] = v->get<double>();
  if (r.stored.count(it)) keep_by_rule(self, id);  // stored before its score came
  for (auto k = r.scores.begin(); k != r.scores.end() && k->first < it - 64;)
    k = r.checkpoints.count(k->first) ? std::next(k) : r.scores.erase(k);
}

// One result the engine has heard: to the dashboard's feed, to the store with the next
// flush, to the hooks (`fresh`: one that counts, not a replay); then what the engine
// wants now.
// `seen`: its numbers (and its parsed metrics, when they hold more), for the sinks.
void recorded(controller_actor self, const std::string& id, int64_t it, std::optional<double> value, std::string text,
              expected<std::vector<engine_action>> more, bool last, logged_result seen, bool fresh) {
  auto& st = self->state;
  ++st.ingested;
  show_result(self, id, it, text);
  note_score(self, id, it, text);
  if (st.feed) {
    if (value) st.feed->point(id, it, *value);
    if (last) st.feed->last_result(id, text);
  }
  auto now = wall_seconds();
  if (!st.sinks.empty()) {
    seen.iteration = it;
    seen.time = now;
    seen.metrics_json = text;
    sinks_result(self, id, seen);
  }
  if (fresh) hooks_post(self, hook::result{id, it, now, text});
  st.pending.push_back({id, it, now, std::move(text)});
  if (!more) return finish(self, more.error());
  if (!more->empty()) act(self, std::move(*more));
}

// What a trial that ended well reported, for the engine's error should it never have
// reported the experiment's metric: the metrics it did report, lines that were not
// reports, output that matched no pattern.
std::string what_it_reported(controller_actor self, const trial_record& r, const wire::wire_trial_end& end) {
  std::string out;
  for (auto& m : r.reported) out += (out.empty() ? "it reported " : ", ") + m;
  if (out.empty()) {
    out = "it reported no result";
    if (!self->state.setup.options.output_patterns.empty()) out += ": no line of its output matched the metric pattern";
  }
  if (end.ignored_lines > 0)
    out += "; " + std::to_string(end.ignored_lines) + " line(s) on its report channel were not reports, the first: " +
           end.ignored_example;
  return out;
}

// The end of a failed trial's standard error, byte for byte, in the experiment folder
// (the store's stderr_path): what the end of the experiment points to. The latest
// failure's; one that cannot be written is an event, the experiment goes on.
void keep_stderr(controller_actor self, const std::string& id, const std::string& tail) {
  namespace fs = std::filesystem;
  if (tail.empty()) return;
  auto path = fs::path(self->state.setup.store->stderr_path(id));
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(tail.data(), static_cast<std::streamsize>(tail.size()));
  if (!out)
    (void)self->state.setup.store->add_event(id, "stderr_not_kept",
                                              {{"path", path.string()}, {"error", std::strerror(errno)}});
}

// The store's record of a trial's end: its state and what it used; events for what it
// left behind and for a restart.
void store_end(controller_actor self, const std::string& id, const wire::wire_trial_end& end, int failures_before) {
  auto& st = self->state;
  auto& t = st.setup.engine->trials().at(id);
  // What its cgroup measured (tune/trial/cgroup.hpp), and what it left behind.
  nlohmann::json used{{"gpu_memory_peak", end.gpu_memory_peak}};
  if (!end.containment.empty()) used["containment"] = end.containment;
  if (end.host_memory_peak >= 0) used["host_memory_peak"] = end.host_memory_peak;
  if (end.cpu_seconds >= 0) used["cpu_seconds"] = end.cpu_seconds;
  if (end.left_behind_count > 0) used["left_behind_count"] = end.left_behind_count;
  if (st.feed) st.feed->where(id, used);  // the dashboard's trial page shows them
  auto info = used;
  info["exit"] = end.exit;
  info["results"] = end.results;
  if (t.state == trial_state::error || t.failures > failures_before) {
    info["stderr_tail"] = end.stderr_tail;
    keep_stderr(self, id, end.stderr_tail);
  }
  if (t.failures > 0) info["failures"] = t.failures;
  if (auto r = st.records.find(id); r != st.records.end() && !r->second.notes.empty()) info["notes"] = r->second.notes;
  if (auto s = st.setup.store->update_trial(id, t.state, t.error, info); !s) return finish(self, s);
  sinks_ended(self, id);
  auto body = wire::to_json(end);
  (void)st.setup.store->add_event(id, "ended", body);
  auto gpu = body.value("gpu_after_end", nlohmann::json::object());
  if (end.left_behind_count > 0 || !gpu.value("killed", nlohmann::json::array()).empty() || !gpu.value("freed", true))
    (void)st.setup.store->add_event(
        id, "left_behind", {{"processes", end.left_behind_count}, {"which", end.left_behind}, {"gpu", gpu}});
  if (t.failures > failures_before) {
    // Started again (max_failures): from its latest checkpoint, on any node.
    nlohmann::json why{{"attempt", t.failures + 1}, {"after", t.last_failure}, {"exit", end.exit}};
    if (t.checkpoint >= 0) why["from_checkpoint"] = t.checkpoint;
    (void)st.setup.store->add_event(id, "restart", why);
  }
  if (t.state == trial_state::terminated || t.state == trial_state::error) drop_standby(self, id);
}

// What the start's answer says: where it runs (the store's record, the feed), what it
// started from.
void started(controller_actor self, const std::string& id, const wire::wire_trial_started& started,
             const engine_action& a) {
  auto& st = self->state;
  auto info = wire::to_json(started);
  st.records[id].pid = started.pid;
  if (auto& r = st.records[id]; !r.standby_node.empty() && started.node == r.standby_node) {
    drop_standby(self, id);  // it runs where its standby copy was: one elsewhere
    r.standby_tried = -1;
    stage_checkpoint(self, id);
  }
  nlohmann::json keep = nlohmann::json::object();
  for (auto key : {"pid", "node", "gpus", "trial_dir"}) keep[key] = info[key];
  if (st.feed) {
    auto where = keep;
    if (auto* t = st.table.find(id)) where["group"] = t->group;
    st.feed->where(id, where);
  }
  // What it started from: its node's own folder, or a copy fetched from here.
  if (!started.restore_dir.empty()) keep["restored_from"] = started.restore_dir;
  // When and where each start ran (the run's timeline: bench/timeline.py).
  (void)st.setup.store->add_event(id, "started", keep);
  if (!a.restore_from.empty() && a.restore_from != a.trial)  // PBT: a donor's state
    (void)st.setup.store->add_event(id, "exploit", {{"donor", a.restore_from}, {"config", a.cfg}});
  // The trial may have ended already (its events can overtake this answer): the store
  // keeps the engine's state, whatever it is now.
  auto& t = st.setup.engine->trials().at(id);
  if (auto s = st.setup.store->update_trial(id, t.state, t.error, keep); !s) finish(self, s);
}

// A start's answer: it runs (ok), or why not (with its actor when it runs
// already where it was started before).
void start_answered(controller_actor self, const live::start_trial& c, int64_t pinned_at, bool ok,
                    const std::string& why, const wire::wire_trial_started& running, const caf::actor& trial) {
  if (step_tracing()) trace_step("start_answered", self->state.on_wire(c.trial));
  auto& st = self->state;
  pin(self, c.action.restore_from, pinned_at, -1);
  auto* t = st.table.find(c.trial);
  if (st.over || !t || t->attempt != c.attempt) return;  // an earlier attempt's
  // Its end may have overtaken this answer: then only what it says is recorded.
  if (st.setup.options.world_size > 0) {  // a gang: its other workers start now, at rank 0's rendezvous
    if (ok) gang_leader_started(self, c.trial, c.attempt, running, trial ? handle_of(self, trial) : 0);
    else gang_start_failed(self, c.trial, c.attempt);
  }
  if (st.table.current(c.trial, c.attempt)) {
    st.table.on_start_answer(c.trial, c.attempt, ok, why, running.node, trial ? handle_of(self, trial) : 0);
    drain(self);
  }
  if (ok && !st.over) started(self, c.trial, running, c.action);
}

void send_start(controller_actor self, const live::start_trial& c, std::string restore, std::string files,
                int64_t pinned_at = -1) {
  auto& st = self->state;
  if (st.over) return;
  auto& opt = st.setup.options;
  auto& a = c.action;
  wire::wire_trial_spec spec{st.on_wire(a.trial), c.group,  0,           opt.program.name, opt.program.sha256,
                             opt.program.size, opt.args, json_text(a.cfg), restore,          files};
  spec.reuse_worker = opt.reuse_workers;
  spec.forward_output = opt.log_to_driver && opt.on_output != nullptr;
  if (!opt.command.empty()) {  // a program trial: its configuration in its command line
    auto argv = render_command(opt.command, a.cfg, opt.command_args);
    if (!argv) {
      pin(self, a.restore_from, pinned_at, -1);
      st.table.on_start_impossible(a.trial, c.attempt, argv.error().message());
      return drain(self);
    }
    spec.command = std::move(*argv);
    spec.workdir_sha256 = opt.workdir.sha256;
    spec.workdir_size = opt.workdir.size;
    spec.workdir_path = opt.workdir_path;
    spec.env = opt.env;
    spec.output_patterns = opt.output_patterns;
    spec.metric = st.setup.engine->options().metric;
  }
  if (opt.world_size > 0) {  // rank 0 of a gang (controller_gang.cpp): its node gives the rendezvous
    spec.gang.world_size = opt.world_size;
    spec.reuse_worker = false;
    gang_sent(self, c, spec);
  }
  // Fetching the program and starting the worker take longer than a plain request.
  trace_step("start_sent", spec.trial_id);
  self->request(st.setup.head, st.setup.request_timeout * 6, wire::trial_start_atom::value, st.setup.token, spec,
                st.setup.programs)
      .then(
          [self, c, pinned_at](wire::trial_start_atom, wire::wire_trial_started& running, caf::actor& trial) {
            start_answered(self, c, pinned_at, true, {}, running, trial);
          },
          [self, c, pinned_at](caf::error& err) {
            if (wire::is_refusal(err))  // not started, or it runs already (its actor is in the refusal)
              return start_answered(self, c, pinned_at, false, wire::refusal_reason(err), {}, wire::refusal_running(err));
            pin(self, c.action.restore_from, pinned_at, -1);
            self->state.table.on_request_failed(c.trial, c.attempt,
                                                "start trial " + c.trial + ": " + describe(self->system(), err));
            drain(self);
          });
}

}  // namespace

// What the hooks are asked (a configuration, a preparation, an explore) and what a
// running trial is asked besides its way (a checkpoint now): not the table's.
bool asked_of_hooks(controller_actor self, engine_action& a) {
  using k = engine_action::kind;
  switch (a.what) {
    case k::suggest: hooks_post(self, hook::suggest{a.trial}); return true;
    case k::prepare: hooks_post(self, hook::prepare{a.trial, std::move(a.cfg)}); return true;
    case k::explore:
      hooks_post(self, hook::explore{a.trial, a.restore_from, std::move(a.cfg), std::move(a.resample)});
      return true;
    case k::checkpoint: ask_checkpoint(self, a.trial, a.reason); return true;
    default: return false;
  }
}

void act(controller_actor self, std::vector<engine_action> actions) {
  auto& st = self->state;
  std::vector<engine_action> way;  // the trials' way: the live table's
  way.reserve(actions.size());
  for (auto& a : actions) {
    if (st.over) return;
    if (asked_of_hooks(self, a)) continue;
    if (a.what == engine_action::kind::start) {
      if (auto s = st.setup.store->add_trial(a.trial, a.cfg, trial_state::pending); !s && s.code() != errc::already_exists)
        return finish(self, s);
      if (a.request) {
        auto& r = st.records[a.trial];
        if (!r.request) (void)st.setup.store->add_event(a.trial, "resources", request_json(*a.request));
        r.request = a.request;
      }
      sinks_started(self, a.trial, a.cfg);
      if (hooks_want(self).trials) hooks_post(self, hook::trial_start{a.trial, a.cfg, a.restore_from.empty() ? -1 : a.restore_iteration});
    } else {
      (void)st.setup.store->add_event(a.trial, a.what == engine_action::kind::stop ? "stop" : "pause", {{"reason", a.reason}});
    }
    way.push_back(std::move(a));
  }
  st.table.act(way);
  drain(self);
}

// Results as columns (wire_results): each to the engine, then to the store with the
// next flush, its metrics written as JSON text without building a document.
void ingest_results(controller_actor self, const std::string& id, const wire::wire_results& r) {
  auto& st = self->state;
  size_t k = r.names.size();
  std::optional<size_t> col;  // the experiment's metric
  std::vector<std::string> keys;
  auto& reported = st.records[id].reported;
  const auto& eo = st.setup.engine->options();
  // The columns of what the engine watches besides its metric (other objectives,
  // constraints, what its stop rules read), when it watches anything.
  std::vector<std::optional<size_t>> other_cols;
  for (const auto& n : st.setup.engine->watched()) {
    other_cols.emplace_back();
    for (size_t i = 0; i < k; ++i)
      if (r.names[i] == n) other_cols.back() = i;
  }
  const bool results_wanted = hooks_want(self).results;
  for (size_t i = 0; i < k; ++i) {
    if (reported.size() < 64) reported.insert(r.names[i]);
    if (r.names[i] == eo.metric) col = i;
    keys.push_back(json_text(nlohmann::json(r.names[i])) + ":");
  }
  for (size_t row = 0; row < r.rows() && !st.over; ++row) {
    std::string text = "{";
    for (size_t i = 0; i < k; ++i) {
      if (i) text += ',';
      text += keys[i];
      append_number(text, r.value(row * k + i));
    }
    text += '}';
    int64_t it = r.iterations[row];
    auto value = col ? std::optional<double>{r.value(row * k + *col)} : std::nullopt;
    st.row.resize(st.sinks.empty() ? 0 : k);
    for (size_t i = 0; i < st.row.size(); ++i) st.row[i] = r.value(row * k + i);
    logged_result seen;
    seen.names = r.names;
    seen.values = st.row;
    bool fresh = results_wanted && st.setup.engine->counts(id, it);
    if (other_cols.empty()) {
      recorded(self, id, it, value, std::move(text), st.setup.engine->on_metric(id, it, value), row + 1 == r.rows(), seen,
               fresh);
      continue;
    }
    std::vector<std::optional<double>> others;
    for (auto c : other_cols) others.push_back(c ? std::optional<double>{r.value(row * k + *c)} : std::nullopt);
    recorded(self, id, it, value, std::move(text), st.setup.engine->on_metric(id, it, value, others), row + 1 == r.rows(),
             seen, fresh);
  }
  if (st.packing && !st.over) packing_measured(self, id, r.gpu_memory_peak, r.gpu_util, r.rows());
  if (st.pending.size() >= 8192) flush(self);
}

// One result with a metric that is not a number: its metrics as the worker wrote them.
void ingest_result(controller_actor self, const std::string& id, const wire::wire_result& r) {
  auto& st = self->state;
  auto metrics = nlohmann::json::parse(r.metrics_json, nullptr, false);
  if (!metrics.is_object()) return;
  auto& reported = st.records[id].reported;
  for (auto& [name, v] : metrics.items())
    if (reported.size() < 64) reported.insert(name);
  auto& metric = st.setup.engine->options().metric;
  std::optional<double> value;
  if (auto m = metrics.find(metric); m != metrics.end() && m->is_number()) value = m->get<double>();
  std::vector<std::string> names;
  if (!st.sinks.empty()) numbers_of(metrics, names, st.row);
  logged_result seen;
  seen.names = names;
  seen.values = st.row;
  seen.parsed = &metrics;
  bool fresh = hooks_want(self).results && st.setup.engine->counts(id, r.iteration);
  recorded(self, id, r.iteration, value, r.metrics_json, st.setup.engine->on_result(id, r.iteration, metrics), true, seen,
           fresh);
  if (st.packing && !st.over) packing_measured(self, id, r.gpu_memory_peak, r.gpu_util, 1);
  if (st.pending.size() >= 8192) flush(self);
}

void on_foreign(controller_actor self, const std::string& id, const wire::wire_beside& beside) {
  auto& st = self->state;
  auto what = beside.what.empty() ? std::string{"another program"} : beside.what;
  auto card = "GPU " + std::to_string(beside.gpu) + " (" + beside.uuid + ")";
  auto note = "another program appeared on its " + card + ": " + what + " (not this cluster's: left alone)";
  (void)st.setup.store->add_event(id, "foreign_process", wire::to_json(beside));
  auto& r = st.records[id];
  if (r.notes.size() < 16) r.notes.push_back(note);
  std::cerr << "tune: " << id << ": " << note << "\n";
}

void on_output(controller_actor self, const std::string& id, const std::vector<std::string>& lines, int64_t rank,
               int64_t pid) {
  auto& o = self->state.setup.options;
  if (!o.log_to_driver || !o.on_output) return;
  if (rank < 0) pid = self->state.records[id].pid;
  auto prefix = "(" + id + (rank >= 0 ? " rank=" + std::to_string(rank) : std::string{}) +
                (pid > 0 ? " pid=" + std::to_string(pid) : std::string{}) + ") ";
  for (auto& line : lines) o.on_output(prefix + line);
}

void on_waiting(controller_actor self, const std::string& id, const std::string& reason) {
  auto& st = self->state;
  auto& r = st.records[id];
  if (reason.empty() || reason == r.waiting) return;
  r.waiting = reason;
  (void)st.setup.store->add_event(id, "waiting", {{"reason", reason}});
  if (st.waits_said.size() < 64 && st.waits_said.insert(reason).second)
    std::cerr << "tune: " << id << " waits for its placement: " << reason << "\n";
}

// A trial that could not start: it ends with the reason (its group went back).
void start_failed(controller_actor self, const std::string& id, const std::string& why) {
  auto& st = self->state;
  if (st.over) return;
  int failures_before = st.setup.engine->trials().at(id).failures;
  auto more = st.setup.engine->on_ended(id, false, why);
  if (!more) return finish(self, more.error());
  auto& t = st.setup.engine->trials().at(id);
  (void)st.setup.store->update_trial(id, t.state, t.state == trial_state::error ? t.error : "");
  sinks_ended(self, id);
  if (t.failures > failures_before)  // tried again (max_failures)
    (void)st.setup.store->add_event(id, "restart", {{"attempt", t.failures + 1}, {"after", why}});
  hooks_trial_end(self, id, t.failures > failures_before);
  act(self, std::move(*more));
  advance(self);
}

// Its process ended (its record's end); moved: paused to move, started again off its
// node from its checkpoint (not an end).
void trial_ended(controller_actor self, const std::string& id, bool moved) {
  auto& st = self->state;
  auto& r = st.records[id];
  auto end = r.end ? std::move(*r.end) : wire::wire_trial_end{};
  r.end.reset();
  if (st.over || !flush(self)) return;  // its last results before its end
  auto& engine = *st.setup.engine;
  // Auto-packing: a trial that outgrew its share starts again on a bigger one, from its
  // checkpoint, as a move does (not a failure).
  if (!moved && st.packing && packing_ended(self, id, end)) {
    if (st.over) return;
    (void)st.setup.store->add_event(id, "moved_out", wire::to_json(end));
    auto more = engine.on_interrupted(id);
    if (!more) return finish(self, more.error());
    sinks_ended(self, id);  // its files closed until it starts again
    act(self, std::move(*more));
    return advance(self);
  }
  if (moved) {
    (void)st.setup.store->add_event(id, "moved_out", wire::to_json(end));
    auto more = engine.on_interrupted(id);
    if (!more) return finish(self, more.error());
    sinks_ended(self, id);  // its files closed until it starts again
    act(self, std::move(*more));
    return advance(self);
  }
  bool ok = end.ok || end.stopped;
  int failures_before = engine.trials().at(id).failures;
  auto more = engine.on_ended(id, ok, ok ? what_it_reported(self, r, end) : end.error);
  if (more && !r.lost_all.empty()) (void)engine.fail_ended(id, r.lost_all);  // none of its checkpoints stored
  if (!more) return finish(self, more.error());
  store_end(self, id, end, failures_before);
  if (st.over) return;
  hooks_trial_end(self, id, engine.trials().at(id).failures > failures_before);
  act(self, std::move(*more));
  advance(self);
}

void start_trial(controller_actor self, const live::start_trial& c) {
  auto& st = self->state;
  auto& a = c.action;
  if (a.restore_from.empty()) return send_start(self, c, "", "");
  // Its own node's folder when it lands there again; else (or as well) a copy from the
  // experiment folder, which any node fetches.
  std::string restore;
  auto& from = st.records[a.restore_from].checkpoints;
  // A gang's checkpoint is whole only in the experiment folder (its shards come from
  // every rank's node): every rank fetches that copy.
  if (auto k = from.find(a.restore_iteration); k != from.end() && st.setup.options.world_size == 0) restore = k->second.path;
  pick_copy(self, a.restore_from, a.restore_iteration, [self, c, restore](std::string files, int64_t at) {
    if (self->state.over || !self->state.table.current(c.trial, c.attempt)) return pin(self, c.action.restore_from, at, -1);
    send_start(self, c, restore, std::move(files), at);
  });
}


void show(controller_actor self, bool force) {
  auto& st = self->state;
  auto& opt = st.setup.options;
  if (!opt.on_progress || (!force && now(self) - st.last_progress < opt.progress_every)) return;
  progress_snapshot s;
  s.experiment = opt.name;
  s.metric = st.setup.engine->options().metric;
  s.direction = st.setup.engine->options().direction;
  s.elapsed_s = elapsed(self);
  for (auto& [id, t] : st.setup.engine->trials()) {
    // Its configuration not final yet (the hooks prepare it: sample_from): shown once it is.
    if (st.setup.engine->preparing(id)) continue;
    std::string state{to_string(t.state)};
    // Started by the engine, but its group not placed yet: it waits (and said why).
    if (auto* live = st.table.find(id); live && (live->state == live_state::placing || live->state == live_state::waiting))
      state = "pending";
    s.trials.push_back({id, state, t.iteration, t.value, t.cfg, t.error, st.setup.engine->meets_constraints(t)});
  }
  st.last_progress = now(self);
  opt.on_progress(s);
}

void board_report(controller_actor self, bool at_once, const std::string& state, const std::string& error) {
  auto& st = self->state;
  if (!st.feed || st.head_down) return;
  if (!at_once && now(self) - st.last_board < board_every) return;
  st.last_board = now(self);
  auto r = st.feed->report(st.setup.engine->trials(), state, error, elapsed(self), st.ingested);
  if (!r.is_null()) self->send(st.setup.head, wire::board_atom::value, st.setup.token, json_text(r));
}

// The dashboard's feed of this experiment; a resumed one's curves so far (the results
// the replay read from the store), so that the dashboard shows them whole.
void open_feed(controller_actor self) {
  auto& st = self->state;
  auto dir = std::filesystem::absolute(st.setup.store->dir()).lexically_normal().string();
  auto host = hostname();
  auto& eo = st.setup.engine->options();
  nlohmann::json info{{"name", st.setup.options.name},
                      {"metric", eo.metric},
                      {"mode", eo.direction == mode::max ? "max" : "min"},
                      {"dir", dir},
                      {"host", host},
                      {"pid", static_cast<int64_t>(::getpid())},
                      {"started", wall_seconds()}};
  if (!eo.other_objectives.empty() || !eo.constraints.empty()) {  // the dashboard's Pareto front
    auto objectives = nlohmann::json::array({{{"name", eo.metric}, {"mode", info["mode"]}}});
    for (std::size_t i = 0; i < eo.other_objectives.size(); ++i)
      objectives.push_back({{"name", eo.other_objectives[i]},
                            {"mode", i < eo.other_directions.size() && eo.other_directions[i] == mode::min ? "min" : "max"}});
    info["objectives"] = std::move(objectives);
    info["constraints"] = eo.constraints;
  }
  st.feed.emplace(board_feed::experiment_id(host, dir), std::move(info));
  std::map<std::string, const result_row*> latest;  // rows come by trial, then iteration
  for (auto& r : st.setup.replayed_results) {
    auto m = r.metrics.find(eo.metric);
    if (m != r.metrics.end() && m->is_number()) st.feed->point(r.trial, r.iteration, m->get<double>());
    latest[r.trial] = &r;
  }
  for (auto& [trial, r] : latest) st.feed->last_result(trial, json_text(r->metrics));
  std::vector<result_row>{}.swap(st.setup.replayed_results);  // not needed any more
}

}  // namespace tune
