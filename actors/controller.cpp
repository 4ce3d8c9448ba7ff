#include "controller.hpp"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <set>

#include "board_feed.hpp"
#include "tune/trial/paths.hpp"
#include "tune/host/detect.hpp"
#include "tune/cluster/version.hpp"
#include "tune/core/clock.hpp"
#include "tune/trial/sha256.hpp"

namespace tune {

namespace {

using clock_type = std::chrono::steady_clock;
using flush_atom = caf::atom_constant<caf::atom("ctlflush")>;
using lost_atom = caf::atom_constant<caf::atom("ctllost")>;
using reconnect_atom = caf::atom_constant<caf::atom("ctlreconn")>;

// After a head restart, how long a group made again waits for the nodes that still hold
// its bundles to join the new head (they reconnect within a few seconds).
constexpr std::chrono::milliseconds claim_wait{8000};
// How often the head's dashboard board hears what changed.
constexpr std::chrono::milliseconds board_every{500};

double thread_cpu_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A checkpoint a trial reported: where it is on its node, and who serves it there.
struct node_checkpoint {
  std::string path;
  caf::actor server;  // the node actor (none: not known, not copied)
};

// A complete copy in the experiment folder: <dir>/checkpoints/<trial>/<iteration>/,
// with its MANIFEST.json ({"iteration", "files": [{"name", "size", "sha256"}], ...}).
struct stored_checkpoint {
  std::string dir;
  nlohmann::json manifest;
};

struct live_trial {
  std::string group;
  std::string node;  // where it runs (from the start's answer)
  caf::actor actor;
  caf::actor node_actor;      // its node's, for its checkpoints (trial_node_atom)
  bool stop_pending = false;  // asked to stop or pause before its first event came
  std::map<int64_t, node_checkpoint> checkpoints;  // iteration -> on its node
  std::map<int64_t, stored_checkpoint> stored;     // iteration -> copy in the experiment folder
  bool copying = false;
  int64_t copy_next = -1;  // the newest checkpoint not copied yet (-1: none)
  // A start being carried out (group, placement, start), numbered: answers to an earlier
  // attempt are ignored (after a head restart the start is made again).
  std::optional<engine_action> starting;
  uint64_t attempt = 0;
  bool reissued = false;  // made again after a head restart: it may run already
  bool group_ready = false;  // its group was placed (a node may hold it through a head restart)
  uint64_t received = 0;  // messages from its current actor (what it resends from after a head restart)
  // Moving to another node (rebalance, drain): paused, then started again off these nodes.
  bool moving = false;
  std::vector<std::string> move_avoid;
  std::optional<clock_type::time_point> last_move;
  std::set<std::string> reported;  // the metrics its results named (what an error says it reported)
};

struct controller_state {
  controller_setup setup;
  clock_type::time_point t0 = clock_type::now();
  std::map<std::string, live_trial> live;
  std::map<caf::actor_addr, std::string> by_actor;  // trial actors, monitored
  // Trial actors declared lost (their node dead): should one speak again (its node was
  // only frozen or cut off), it is not heard but killed; its trial runs elsewhere now.
  std::set<caf::actor_addr> lost;
  std::vector<encoded_result> pending;              // results not yet stored
  int64_t ingested = 0;
  int copies = 0;   // checkpoint copies in flight (the experiment ends after them)
  double cpu0 = 0;  // the thread's CPU time when the controller started
  clock_type::time_point last_progress = clock_type::now() - std::chrono::hours(1);
  bool over = false;
  // The head's process died (a remote head): reconnecting to the same address; the
  // experiment goes on with the head started again there.
  bool head_down = false;
  clock_type::time_point head_lost_at{};
  clock_type::time_point last_rebalance_ask{};
  // The head's dashboard board: what changed, reported every board_every.
  std::optional<board_feed> feed;
  clock_type::time_point last_board{};
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

// Tells the head's board what changed (at most every board_every unless `now`).
void board_report(controller_actor self, bool now, const std::string& state = "running",
                  const std::string& error = "") {
  auto& st = self->state;
  if (!st.feed || st.head_down) return;
  if (!now && clock_type::now() - st.last_board < board_every) return;
  st.last_board = clock_type::now();
  auto r = st.feed->report(st.setup.engine->trials(), state, error, elapsed(self), st.ingested);
  if (!r.is_null()) self->send(st.setup.head, wire::board_atom::value, st.setup.token, r.dump());
}

// Ends the experiment: with an error, every trial still running is stopped (its group
// goes when this actor does).
void finish(controller_actor self, expected<experiment_summary> out) {
  auto& st = self->state;
  if (st.over) return;
  board_report(self, true, out ? "done" : "failed", out ? "" : out.error().message());
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
  if (st.copies > 0) return;  // its last checkpoints are still being copied
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
  st.live[id].starting.reset();
  give_back_group(self, st.live[id]);
  int failures_before = st.setup.engine->trials().at(id).failures;
  auto more = st.setup.engine->on_ended(id, false, why);
  if (!more) return finish(self, more.error());
  auto& t = st.setup.engine->trials().at(id);
  (void)st.setup.store->update_trial(id, t.state, t.state == "error" ? t.error : "");
  if (t.failures > failures_before)  // tried again (max_failures)
    (void)st.setup.store->add_event(id, "restart", {{"attempt", t.failures + 1}, {"after", why}});
  act(self, std::move(*more));
  advance(self);
}

// Copying a trial's checkpoints into the experiment folder, one at a time per trial,
// the newest first reported (older ones that were not copied yet are skipped), in
// chunks read from its node (never one giant message), each file hashed as it comes.
// A copy is written to <iteration>.part and renamed when complete, with its
// MANIFEST.json; the two newest copies of a trial are kept (the older one is the
// fallback should the newer one be found corrupt).
struct copy_job {
  std::string trial, path, dest, part;
  int64_t iteration = 0;
  caf::actor server;
  nlohmann::json files;
  size_t index = 0;
  uint64_t offset = 0;
  std::ofstream out;
  std::unique_ptr<sha256_stream> sha;
  nlohmann::json manifest = nlohmann::json::array();
  uint64_t bytes = 0;
  clock_type::time_point t0 = clock_type::now();
};

void advance(controller_actor self);
void copy_step(controller_actor self, std::shared_ptr<copy_job> job);
void copy_checkpoint(controller_actor self, const std::string& id);

void copy_over(controller_actor self, const std::shared_ptr<copy_job>& job, const status& outcome) {
  auto& st = self->state;
  --st.copies;
  auto& lt = st.live[job->trial];
  lt.copying = false;
  std::error_code ec;
  if (job->out.is_open()) job->out.close();
  if (!outcome) {
    std::filesystem::remove_all(job->part, ec);
    (void)st.setup.store->add_event(job->trial, "checkpoint_copy_failed",
                                    {{"iteration", job->iteration}, {"error", outcome.message()}});
  } else {
    double secs = std::chrono::duration<double>(clock_type::now() - job->t0).count();
    nlohmann::json m{{"trial", job->trial}, {"iteration", job->iteration}, {"files", job->manifest},
                     {"bytes", job->bytes},  {"seconds", secs}};
    std::ofstream manifest(job->part + "/MANIFEST.json");
    manifest << m.dump(1) << "\n";
    manifest.close();
    if (manifest) {
      std::filesystem::remove_all(job->dest, ec);
      std::filesystem::rename(job->part, job->dest, ec);
    }
    if (!manifest || ec) {
      std::filesystem::remove_all(job->part, ec);
      (void)st.setup.store->add_event(job->trial, "checkpoint_copy_failed",
                                      {{"iteration", job->iteration},
                                       {"error", std::string{"cannot write the copy's manifest or move it into place"}}});
    } else {
      lt.stored[job->iteration] = {job->dest, m};
      while (lt.stored.size() > 2) {
        std::filesystem::remove_all(lt.stored.begin()->second.dir, ec);
        lt.stored.erase(lt.stored.begin());
      }
      (void)st.setup.store->add_event(job->trial, "checkpoint_stored",
                                      {{"iteration", job->iteration}, {"bytes", job->bytes},
                                       {"files", job->manifest.size()}, {"seconds", secs}, {"dir", job->dest}});
    }
  }
  if (st.over) return;
  if (lt.copy_next > job->iteration) return copy_checkpoint(self, job->trial);
  advance(self);  // the experiment may have waited for this copy
}

void copy_checkpoint(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& lt = st.live[id];
  auto c = lt.checkpoints.find(lt.copy_next);
  if (c == lt.checkpoints.end() || !c->second.server || lt.copying) return;
  auto job = std::make_shared<copy_job>();
  job->trial = id;
  job->iteration = c->first;
  job->path = c->second.path;
  job->server = c->second.server;
  job->dest = st.setup.store->checkpoint_dir(id) + "/" + std::to_string(job->iteration);
  job->part = job->dest + ".part";
  lt.copying = true;
  ++st.copies;
  std::error_code ec;
  std::filesystem::remove_all(job->part, ec);
  std::filesystem::create_directories(job->part, ec);
  if (ec) return copy_over(self, job, status{errc::invalid_argument, "cannot create " + job->part + ": " + ec.message()});
  self->request(job->server, st.setup.request_timeout, wire::ckpt_list_atom::value, st.setup.token, id, job->path)
      .then(
          [self, job](wire::ckpt_list_atom, bool ok, const std::string& text) {
            if (!ok) return copy_over(self, job, status{errc::not_found, text});
            job->files = nlohmann::json::parse(text, nullptr, false);
            if (!job->files.is_array()) return copy_over(self, job, status{errc::invalid_argument, "a malformed file list"});
            copy_step(self, job);
          },
          [self, job](caf::error& err) {
            copy_over(self, job, status{errc::not_found, "list: " + describe(self->system(), err)});
          });
}

void copy_step(controller_actor self, std::shared_ptr<copy_job> job) {
  auto& st = self->state;
  if (job->index == job->files.size()) return copy_over(self, job, status::ok());
  auto& f = job->files[job->index];
  if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("size") || !f["size"].is_number_unsigned())
    return copy_over(self, job, status{errc::invalid_argument, "a malformed file entry"});
  std::filesystem::path name = f["name"].get<std::string>();
  if (!stays_inside(name))
    return copy_over(self, job, status{errc::invalid_argument, "a file outside the checkpoint: " + name.string()});
  uint64_t size = f["size"];
  if (!job->out.is_open()) {
    std::error_code ec;
    auto to = std::filesystem::path(job->part) / name;
    std::filesystem::create_directories(to.parent_path(), ec);
    job->out.open(to, std::ios::binary | std::ios::trunc);
    if (!job->out) return copy_over(self, job, status{errc::invalid_argument, "cannot write " + to.string()});
    job->sha = std::make_unique<sha256_stream>();
  }
  if (job->offset >= size) {
    job->out.close();
    job->manifest.push_back({{"name", name.string()}, {"size", size}, {"sha256", job->sha->hex()}});
    job->bytes += size;
    ++job->index;
    job->offset = 0;
    return copy_step(self, job);
  }
  auto length = static_cast<uint32_t>(std::min<uint64_t>(wire::max_chunk, size - job->offset));
  self->request(job->server, st.setup.request_timeout, wire::ckpt_read_atom::value, st.setup.token, job->trial,
                job->path, name.string(), job->offset, length)
      .then(
          [self, job, length](wire::ckpt_read_atom, bool ok, const std::string& bytes) {
            if (!ok) return copy_over(self, job, status{errc::not_found, bytes});
            if (bytes.size() != length)
              return copy_over(self, job, status{errc::inconsistent, "the file changed on its node while it was copied"});
            job->out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
            if (!job->out) return copy_over(self, job, status{errc::invalid_argument, "cannot write a checkpoint file"});
            job->sha->add(bytes);
            job->offset += length;
            copy_step(self, job);
          },
          [self, job](caf::error& err) {
            copy_over(self, job, status{errc::not_found, "read: " + describe(self->system(), err)});
          });
}

void send_start(controller_actor self, const engine_action& a, std::string restore, std::string files);

// The copy to restore from: the newest complete one at or before `iteration`, its files
// checked against their hashes as the program server takes them (a copy that no longer
// matches is reported and dropped, and the one before it is tried). Calls `then` with
// the copy's manifest as text, or empty when there is none.
void pick_copy(controller_actor self, std::string trial, int64_t iteration, std::function<void(std::string)> then) {
  auto& st = self->state;
  auto& stored = st.live[trial].stored;
  auto it = stored.upper_bound(iteration);
  if (it == stored.begin()) return then("");
  --it;
  auto copy = it->second;
  int64_t at = it->first;
  auto files = std::make_shared<nlohmann::json>(copy.manifest["files"]);
  auto next = std::make_shared<std::function<void(size_t)>>();
  *next = [self, trial, at, copy, files, next, then](size_t i) {
    if (i == files->size()) {
      nlohmann::json m{{"iteration", at}, {"files", *files}};
      return then(m.dump());
    }
    auto& f = (*files)[i];
    std::string path = copy.dir + "/" + f["name"].get<std::string>();
    auto corrupt = [self, trial, at, iteration = at, then](const std::string& why) {
      auto& st = self->state;
      (void)st.setup.store->add_event(trial, "checkpoint_corrupt", {{"iteration", iteration}, {"error", why}});
      st.live[trial].stored.erase(at);
      pick_copy(self, trial, at - 1, then);  // the one before it
    };
    self->request(self->state.setup.programs, self->state.setup.request_timeout, wire::program_add_atom::value, path)
        .then(
            [f, i, next, corrupt](wire::program_add_atom, bool ok, std::string& sha, uint64_t) {
              if (!ok) return corrupt(sha);
              if (sha != f["sha256"]) return corrupt(f["name"].get<std::string>() + " changed on disk (SHA-256 " + sha + ")");
              (*next)(i + 1);
            },
            [corrupt](caf::error& err) { corrupt("the program server: " + to_string(err)); });
  };
  (*next)(0);
}

// Whether an answer for trial `id`'s start attempt `attempt` is still wanted.
bool current_attempt(controller_actor self, const std::string& id, uint64_t attempt) {
  auto& st = self->state;
  if (st.over) return false;
  auto it = st.live.find(id);
  return it != st.live.end() && it->second.starting && it->second.attempt == attempt;
}

// A request about a start failed: while the head is down the start is made again once
// it is back; otherwise the trial failed to start.
void start_request_failed(controller_actor self, const std::string& id, uint64_t attempt, const std::string& why) {
  if (!current_attempt(self, id, attempt) || self->state.head_down) return;
  fail_start(self, id, why);
}

// Its first message is what lets its events through (wire.hpp, route_atom): `received`
// tells it which of its messages came here (it sends again what follows). Through the
// head, which relays it to the trial's node: a restarted head's nodes have no route to
// this process until a message from it comes through.
void greet(controller_actor self, const std::string& id) {
  auto& st = self->state;
  auto& lt = st.live[id];
  if (lt.group.empty()) return;
  self->send(st.setup.head, wire::route_atom::value, st.setup.token, lt.group, uint32_t{0}, id, lt.received);
}

void start_in_group(controller_actor self, const engine_action& a) {
  auto& st = self->state;
  uint64_t attempt = st.live[a.trial].attempt;
  if (a.restore_from.empty()) return send_start(self, a, "", "");
  // Its own node's folder when it lands there again; else (or as well) a copy from the
  // experiment folder, which any node fetches.
  std::string restore;
  auto& from = st.live[a.restore_from].checkpoints;
  if (auto c = from.find(a.restore_iteration); c != from.end()) restore = c->second.path;
  pick_copy(self, a.restore_from, a.restore_iteration, [self, a, restore, attempt](std::string files) {
    if (current_attempt(self, a.trial, attempt)) send_start(self, a, restore, std::move(files));
  });
}

void send_start(controller_actor self, const engine_action& a, std::string restore, std::string files) {
  auto& st = self->state;
  if (st.over) return;
  auto& opt = st.setup.options;
  auto& lt = st.live[a.trial];
  wire::wire_trial_spec spec{a.trial,          lt.group, 0,           opt.program.name, opt.program.sha256,
                             opt.program.size, opt.args, a.cfg.dump(), restore,          files};
  if (!opt.command.empty()) {  // a program trial: its configuration in its command line
    auto argv = render_command(opt.command, a.cfg, opt.command_args);
    if (!argv) return fail_start(self, a.trial, argv.error().message());
    spec.command = std::move(*argv);
    spec.workdir_sha256 = opt.workdir.sha256;
    spec.workdir_size = opt.workdir.size;
    spec.env = opt.env;
    spec.output_patterns = opt.output_patterns;
    spec.metric = st.setup.engine->options().metric;
  }
  auto id = a.trial;
  uint64_t attempt = lt.attempt;
  bool exploit = !a.restore_from.empty() && a.restore_from != a.trial;
  nlohmann::json exploit_info;
  if (exploit) exploit_info = {{"donor", a.restore_from}, {"config", a.cfg}};
  // Fetching the program and starting the worker take longer than a plain request.
  self->request(st.setup.head, st.setup.request_timeout * 6, wire::trial_start_atom::value, st.setup.token, spec,
                st.setup.programs)
      .then(
          [self, id, attempt, exploit, exploit_info](wire::trial_start_atom, bool ok, std::string& text, caf::actor& trial) {
            auto& st = self->state;
            if (!current_attempt(self, id, attempt)) return;
            auto& lt = st.live[id];
            if (!ok && lt.reissued && trial) {  // the node runs it already (wire.hpp's start_answer)
              // Started before the head died (its answer was lost with it): it is ours.
              lt.starting.reset();
              greet(self, id);
              return;
            }
            if (!ok) return fail_start(self, id, text);
            lt.starting.reset();
            lt.move_avoid.clear();
            if (trial) self->send(trial, wire::route_atom::value, lt.received);  // its events come after this
            auto info = nlohmann::json::parse(text, nullptr, false);
            nlohmann::json keep = nlohmann::json::object();
            if (info.is_object())
              for (auto key : {"pid", "node", "gpus", "trial_dir"})
                if (info.contains(key)) keep[key] = info[key];
            if (keep.contains("node") && keep["node"].is_string()) lt.node = keep["node"];
            if (st.feed) {
              auto where = keep;
              where["group"] = lt.group;
              st.feed->where(id, where);
            }
            // What it started from: its node's own folder, or a copy fetched from here.
            if (info.is_object() && info.contains("restore_dir")) keep["restored_from"] = info["restore_dir"];
            if (exploit) (void)st.setup.store->add_event(id, "exploit", exploit_info);  // PBT: a donor's state
            // The trial may have ended already (its events can overtake this answer):
            // the store keeps the engine's state, whatever it is now.
            auto& t = st.setup.engine->trials().at(id);
            if (auto s = st.setup.store->update_trial(id, t.state, t.error, keep); !s) finish(self, s);
          },
          [self, id, attempt](caf::error& err) {
            start_request_failed(self, id, attempt, "start trial " + id + ": " + describe(self->system(), err));
          });
}

void place(controller_actor self, const engine_action& a);

// The placement group every trial of the experiment asks for, with this id (empty: the
// head names it).
wire::wire_group_spec group_spec(controller_actor self, const std::string& id) {
  auto& opt = self->state.setup.options;
  wire::wire_group_spec spec;
  spec.id = id;
  spec.strategy = std::string{to_string(opt.strat)};
  for (auto& b : opt.bundles) spec.bundles.push_back(wire::to_wire_request(b));
  return spec;
}

// A moved trial that found no room off the nodes it left: placed anywhere after all.
void move_anywhere(controller_actor self, const engine_action& a) {
  auto& st = self->state;
  auto& lt = st.live[a.trial];
  (void)st.setup.store->add_event(a.trial, "move_fallback", {{"avoided", lt.move_avoid}});
  lt.move_avoid.clear();
  give_back_group(self, lt);
  ++lt.attempt;
  place(self, a);
}

// A group for the start (a new one, or again the one it had: after a head restart its
// bundles are adopted as they are held), then the trial in it.
void place(controller_actor self, const engine_action& a) {
  auto& st = self->state;
  auto& lt = st.live[a.trial];
  uint64_t attempt = lt.attempt;
  auto spec = group_spec(self, lt.group);
  if (lt.reissued && lt.group_ready) spec.claim_wait_ms = claim_wait.count();  // its node may hold it still
  spec.avoid = lt.move_avoid;
  bool avoiding = !spec.avoid.empty();
  auto wait_ms = int64_t{st.setup.options.group_timeout.count()};
  auto timeout = st.setup.request_timeout;
  self->request(st.setup.head, timeout, wire::pg_create_atom::value, st.setup.token, version(), spec)
      .then(
          [self, a, attempt, wait_ms, timeout, avoiding](wire::pg_create_atom, bool ok, std::string& group,
                                                         std::string& state, std::string& reason) {
            auto& st = self->state;
            if (!current_attempt(self, a.trial, attempt)) return;
            // Made again after a head restart, it may exist still (the head had not yet
            // noticed this program's old connection was gone): wait for it as it is.
            bool again = !ok && state == "exists" && !st.live[a.trial].group.empty();
            if (!ok && !again) return finish(self, status{errc::invalid_argument, reason});  // a bad request: every trial's
            if (again) group = st.live[a.trial].group;
            st.live[a.trial].group = group;
            if (avoiding && state == "infeasible") return move_anywhere(self, a);
            self->request(st.setup.head, std::chrono::milliseconds(wait_ms) + timeout, wire::pg_wait_atom::value,
                          st.setup.token, group, wait_ms)
                .then(
                    [self, a, attempt, group, avoiding](wire::pg_wait_atom, bool ready, const std::string& state,
                                                        const std::string& why) {
                      if (!current_attempt(self, a.trial, attempt)) return;
                      if (ready) {
                        self->state.live[a.trial].group_ready = true;
                        return start_in_group(self, a);
                      }
                      if (avoiding) return move_anywhere(self, a);
                      fail_start(self, a.trial, "placement group " + group + " is " + state + (why.empty() ? "" : ": " + why));
                    },
                    [self, a, attempt, group](caf::error& err) {
                      start_request_failed(self, a.trial, attempt, "wait for " + group + ": " + describe(self->system(), err));
                    });
          },
          [self, a, attempt](caf::error& err) {
            start_request_failed(self, a.trial, attempt, "create placement group: " + describe(self->system(), err));
          });
}

void act(controller_actor self, std::vector<engine_action> actions) {
  auto& st = self->state;
  for (auto& a : actions) {
    if (st.over) return;
    auto& lt = st.live[a.trial];
    if (a.what != engine_action::kind::start) {
      if (lt.actor && !st.head_down) self->send(lt.actor, wire::trial_stop_atom::value, int64_t{st.setup.options.stop_grace.count()});
      else lt.stop_pending = true;  // stopped as soon as it says it runs (again)
      (void)st.setup.store->add_event(a.trial, a.what == engine_action::kind::stop ? "stop" : "pause",
                                      {{"reason", a.reason}});
      continue;
    }
    if (auto s = st.setup.store->add_trial(a.trial, a.cfg, "pending"); !s && s.code() != errc::already_exists)
      return finish(self, s);
    lt.starting = a;
    ++lt.attempt;
    lt.reissued = false;
    lt.group_ready = false;
    lt.received = 0;  // counts what its next actor sends
    if (st.head_down) continue;  // made when the head is back
    if (!lt.group.empty()) {
      start_in_group(self, a);
      continue;
    }
    place(self, a);
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
  if (sender && st.lost.count(sender.address())) {
    self->send(sender, wire::trial_kill_atom::value);
    return nullptr;
  }
  if (lt.actor && sender && sender != lt.actor && sender != caf::actor_cast<caf::actor>(self)) return nullptr;
  if (!lt.actor && sender && !ended) {
    lt.actor = sender;
    lt.received = 0;
    st.by_actor[sender.address()] = id;
    self->monitor(sender);
  }
  if (lt.actor && sender == lt.actor && ++lt.received % wire::ack_every == 0)
    self->send(lt.actor, wire::trial_ack_atom::value, lt.received);  // flow control (wire.hpp)
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
  auto& reported = st.live[id].reported;
  for (size_t i = 0; i < k; ++i) {
    if (reported.size() < 64) reported.insert(r.names[i]);
    if (r.names[i] == st.setup.engine->options().metric) col = i;
    keys.push_back(nlohmann::json(r.names[i]).dump() + ":");
  }
  double now = wall_seconds();
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
    if (st.feed) {
      if (col) st.feed->point(id, it, r.value(row * k + *col));
      if (row + 1 == r.rows()) st.feed->last_result(id, text);
    }
    st.pending.push_back({id, it, now, std::move(text)});
    if (!more) return finish(self, more.error());
    act(self, std::move(*more));
    if (st.over) return;
  }
  if (st.pending.size() >= 8192) flush(self);
}

// The trial's actor has ended: no longer watched or spoken to.
void forget_actor(controller_actor self, live_trial& lt) {
  if (lt.actor) {
    self->demonitor(lt.actor);
    self->state.by_actor.erase(lt.actor.address());
  }
  lt.actor = nullptr;
  lt.stop_pending = false;
}

// What a trial that ended well reported, for the engine's error should it never have
// reported the experiment's metric: the metrics it did report, lines that were not
// reports, output that matched no pattern.
std::string what_it_reported(controller_actor self, const live_trial& lt, const nlohmann::json& ended) {
  std::string out;
  for (auto& m : lt.reported) out += (out.empty() ? "it reported " : ", ") + m;
  if (out.empty()) {
    out = "it reported no result";
    if (!self->state.setup.options.output_patterns.empty()) out += ": no line of its output matched the metric pattern";
  }
  if (auto n = ended.value("ignored_lines", int64_t{0}); n > 0)
    out += "; " + std::to_string(n) + " line(s) on its report channel were not reports, the first: " +
           ended.value("ignored_example", std::string{});
  return out;
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
    if (body["metrics"].is_object())
      for (auto& [name, v] : body["metrics"].items())
        if (lt.reported.size() < 64) lt.reported.insert(name);
    auto more = engine.on_result(id, it, body["metrics"]);
    auto text = body["metrics"].dump();
    if (st.feed) {
      auto& m = body["metrics"];
      auto& metric = engine.options().metric;
      if (m.is_object() && m.contains(metric) && m[metric].is_number()) st.feed->point(id, it, m[metric].get<double>());
      st.feed->last_result(id, text);
    }
    st.pending.push_back({id, it, wall_seconds(), std::move(text)});
    if (!more) return finish(self, more.error());
    act(self, std::move(*more));
    if (st.pending.size() >= 8192) flush(self);
  } else if (kind == "checkpoint") {
    auto body = nlohmann::json::parse(json, nullptr, false);
    if (!body.is_object()) return;
    int64_t it = body.value("iteration", int64_t{-1});
    lt.checkpoints[it] = {body.value("path", ""), lt.node_actor};
    engine.on_checkpoint(id, it);
    (void)st.setup.store->add_event(id, "checkpoint", body);
    if (lt.node_actor && it > lt.copy_next) {
      lt.copy_next = it;
      if (!lt.copying) copy_checkpoint(self, id);
    }
  } else if (kind == "ended" && lt.moving) {
    // Paused to move: started again off its node, from its checkpoint (not an end).
    auto body = nlohmann::json::parse(json, nullptr, false);
    if (!flush(self)) return;
    lt.moving = false;
    (void)st.setup.store->add_event(id, "moved_out", body.is_object() ? body : nlohmann::json::object());
    forget_actor(self, lt);
    give_back_group(self, lt);
    auto more = engine.on_interrupted(id);
    if (!more) return finish(self, more.error());
    act(self, std::move(*more));
    advance(self);
  } else if (kind == "ended") {
    auto body = nlohmann::json::parse(json, nullptr, false);
    if (!body.is_object()) body = nlohmann::json::object();
    if (!flush(self)) return;  // its last results before its end
    bool ok = body.value("ok", false) || body.value("stopped", false);
    int failures_before = engine.trials().at(id).failures;
    auto more = engine.on_ended(id, ok, ok ? what_it_reported(self, lt, body) : body.value("error", std::string{}));
    if (!more) return finish(self, more.error());
    auto& t = engine.trials().at(id);
    nlohmann::json info{{"exit", body.value("exit", "")},
                        {"results", body.value("results", 0)},
                        {"gpu_memory_peak", body.value("gpu_memory_peak", int64_t{0})}};
    // What its cgroup measured (tune/trial/cgroup.hpp), and what it left behind.
    nlohmann::json used = nlohmann::json::object();
    for (auto key : {"containment", "host_memory_peak", "cpu_seconds", "left_behind_count"})
      if (body.contains(key)) info[key] = used[key] = body[key];
    used["gpu_memory_peak"] = info["gpu_memory_peak"];
    if (st.feed) st.feed->where(id, used);  // the dashboard's trial page shows them
    if ((t.state == "error" || t.failures > failures_before) && body.contains("stderr_tail"))
      info["stderr_tail"] = body["stderr_tail"];
    if (t.failures > 0) info["failures"] = t.failures;
    if (auto s = st.setup.store->update_trial(id, t.state, t.error, info); !s) return finish(self, s);
    (void)st.setup.store->add_event(id, "ended", body);
    if (body.contains("left_behind_count") || body.contains("gpu_after_end")) {
      auto gpu = body.value("gpu_after_end", nlohmann::json::object());
      if (body.contains("left_behind_count") || !gpu.value("killed", nlohmann::json::array()).empty() || !gpu.value("freed", true))
        (void)st.setup.store->add_event(id, "left_behind",
                                        {{"processes", body.value("left_behind_count", 0)},
                                         {"which", body.value("left_behind", nlohmann::json::array())},
                                         {"gpu", gpu}});
    }
    if (t.failures > failures_before) {
      // Started again (max_failures): from its latest checkpoint, on any node.
      nlohmann::json why{{"attempt", t.failures + 1}, {"after", t.last_failure}, {"exit", body.value("exit", "")}};
      if (t.checkpoint >= 0) why["from_checkpoint"] = t.checkpoint;
      (void)st.setup.store->add_event(id, "restart", why);
    }
    forget_actor(self, lt);
    // Its resources go back, paused or not: a paused trial gets a new group when it
    // resumes (so paused trials never hold cards others wait for).
    give_back_group(self, lt);
    act(self, std::move(*more));
    advance(self);
  }
}

// A resumed experiment's complete checkpoint copies (<dir>/checkpoints/<trial>/<iter>/
// with a MANIFEST.json; an unfinished <iter>.part is what a dead driver left: removed).
void load_copies(controller_actor self) {
  namespace fs = std::filesystem;
  auto& st = self->state;
  std::error_code ec;
  for (auto& [id, t] : st.setup.engine->trials()) {
    auto dir = st.setup.store->checkpoint_dir(id);
    for (auto& c : fs::directory_iterator(dir, ec)) {
      if (c.path().extension() == ".part") {
        fs::remove_all(c.path(), ec);
        continue;
      }
      std::ifstream in(c.path() / "MANIFEST.json");
      auto m = nlohmann::json::parse(in, nullptr, false);
      if (!m.is_object() || !m.contains("iteration") || !m["iteration"].is_number_integer() || !m.contains("files")) continue;
      st.live[id].stored[m["iteration"].get<int64_t>()] = {c.path().string(), m};
    }
  }
}

// The head's process is gone: the experiment waits for it to be started again at the
// same address (nodes and their trials keep running meanwhile), up to head_wait.
void head_lost(controller_actor self, const std::string& why) {
  auto& st = self->state;
  if (st.over || st.head_down) return;
  st.head_down = true;
  st.head_lost_at = clock_type::now();
  std::cerr << "tune: lost the head at " << st.setup.head_host << ":" << st.setup.head_port << " (" << why
            << "); waiting for it to be back\n";
  (void)st.setup.store->add_event("", "head_lost", {{"reason", why}});
  self->delayed_send(self, std::chrono::milliseconds(250), reconnect_atom::value);
}

// The head is back (a new process): the groups are made again with their ids (the
// nodes still hold their bundles: adopted as they are), starts in progress are made
// again, and every running trial is greeted through the head so that its events, held
// since the head went away, come here (from the first one this did not get).
void head_back(controller_actor self, caf::actor head) {
  auto& st = self->state;
  st.setup.head = std::move(head);
  self->monitor(st.setup.head);
  st.head_down = false;
  if (st.feed) st.feed->resend_all();  // the new head's board knows nothing yet
  std::cerr << "tune: the head is back; continuing\n";
  (void)st.setup.store->add_event("", "head_back", {{"after_s", std::chrono::duration<double>(clock_type::now() - st.head_lost_at).count()}});
  self->send(st.setup.head, wire::subscribe_atom::value, st.setup.token);
  for (auto& [id, lt] : st.live) {
    if (lt.starting) {
      ++lt.attempt;
      lt.reissued = true;
      place(self, *lt.starting);
      continue;
    }
    if (!lt.actor || lt.group.empty()) continue;
    auto spec = group_spec(self, lt.group);
    spec.claim_wait_ms = claim_wait.count();  // until its node has joined the new head
    auto trial = id;
    self->request(st.setup.head, st.setup.request_timeout, wire::pg_create_atom::value, st.setup.token, version(), spec)
        .then(
            [self, trial](wire::pg_create_atom, bool ok, std::string&, std::string& state, std::string& reason) {
              if (!ok && state != "exists")
                (void)self->state.setup.store->add_event(trial, "group_not_taken_back", {{"error", reason}});
              greet(self, trial);
            },
            [self, trial](caf::error& err) {
              (void)self->state.setup.store->add_event(trial, "group_not_taken_back",
                                                       {{"error", describe(self->system(), err)}});
            });
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
    if (st.setup.head_port != 0 && dm.source == st.setup.head.address())
      return head_lost(self, self->system().render(dm.reason));
    auto it = st.by_actor.find(dm.source);
    if (it == st.by_actor.end()) return;
    self->delayed_send(self, std::chrono::seconds(2), lost_atom::value, it->second, dm.source,
                       self->system().render(dm.reason));
  });
  self->set_exit_handler([self](caf::exit_msg& em) {
    finish(self, status{errc::inconsistent, "the experiment was ended (" + self->system().render(em.reason) + ")"});
  });
  if (self->state.setup.resumed) load_copies(self);
  {
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
    st.feed.emplace(board_feed::experiment_id(host, dir), std::move(info));
    // A resumed experiment: its curves so far (the results the replay read from the
    // store), so that the dashboard shows them whole.
    std::map<std::string, const result_row*> latest;  // rows come by trial, then iteration
    for (auto& r : st.setup.replayed_results) {
      auto m = r.metrics.find(eo.metric);
      if (m != r.metrics.end() && m->is_number()) st.feed->point(r.trial, r.iteration, m->get<double>());
      latest[r.trial] = &r;
    }
    for (auto& [trial, r] : latest) st.feed->last_result(trial, r->metrics.dump());
    std::vector<result_row>{}.swap(st.setup.replayed_results);  // not needed any more
  }
  self->send(self, flush_atom::value);
  self->send(self->state.setup.head, wire::subscribe_atom::value, self->state.setup.token);  // node deaths
  if (self->state.setup.head_port != 0) self->monitor(self->state.setup.head);
  if (!self->state.setup.initial_actions.empty()) act(self, std::exchange(self->state.setup.initial_actions, {}));
  return {
      [self](wire::trial_event_atom, const std::string& id, const std::string& kind, const std::string& json) {
        on_event(self, id, kind, json);
      },
      [self](wire::trial_results_atom, const std::string& id, const wire::wire_results& r) { on_results(self, id, r); },
      [self](wire::trial_node_atom, const std::string& id, const caf::actor& node) {
        if (auto* lt = live_for_event(self, id, false)) lt->node_actor = node;
      },
      [](wire::pg_remove_atom, bool, const std::string&) {},  // groups given back
      // A group of a trial whose node died, placed again by the head: the trial is
      // ended as lost (and started again in a new group with max_failures); this group
      // goes back with it.
      [](wire::pg_moved_atom, const std::string&, const std::vector<uint32_t>&) {},
      [](wire::subscribe_atom, bool, const std::string&) {},
      [](wire::rebalance_atom, bool, const std::string&) {},  // the head's plan: its moves come as pg_move
      // The head asks to move the trial in `group` off `avoid` (rebalance, drain).
      [self](wire::pg_move_atom, const std::string& group, const std::vector<std::string>& avoid) {
        auto& st = self->state;
        auto from = self->current_sender();
        if (st.over || st.head_down || !from || from->node() != st.setup.head.node()) return;  // the head's process
        for (auto& [id, lt] : st.live) {
          if (lt.group != group || !lt.actor || lt.starting || lt.moving || lt.stop_pending) continue;
          auto now = clock_type::now();
          if (lt.last_move && now - *lt.last_move < st.setup.options.min_move_interval) {
            (void)st.setup.store->add_event(id, "move_refused", {{"why", "it moved less than min_move_interval ago"}});
            return;
          }
          lt.moving = true;
          lt.last_move = now;
          lt.move_avoid = avoid;
          (void)st.setup.store->add_event(id, "move", {{"avoid", avoid}, {"from", lt.node}});
          self->send(lt.actor, wire::trial_stop_atom::value, int64_t{st.setup.options.stop_grace.count()});
          return;
        }
      },
      // A node the head declared dead: its trials' actors may never say goodbye (a
      // down message for an actor reached through the head does not always come).
      [self](wire::node_event_atom, const std::string& node, const std::string& state, const std::string& reason) {
        auto& st = self->state;
        if (st.setup.options.auto_rebalance && !st.over && !st.head_down &&
            clock_type::now() - st.last_rebalance_ask > std::chrono::seconds(2)) {
          st.last_rebalance_ask = clock_type::now();
          self->delayed_send(st.setup.head, std::chrono::milliseconds(500), wire::rebalance_atom::value, st.setup.token);
        }
        if (state != "dead") return;
        // Whatever the node sent before it died came through the head before this
        // notice (the head's process forwards as it reads; one connection to here, in
        // order): a short wait for messages already being handled is enough.
        for (auto& [id, lt] : self->state.live)
          if (lt.node == node && lt.actor)
            self->delayed_send(self, std::chrono::milliseconds(200), lost_atom::value, id, lt.actor.address(),
                               "node " + node + " is dead: " + reason);
      },
      [self](lost_atom, const std::string& id, const caf::actor_addr& who, const std::string& why) {
        auto& st = self->state;
        // Not while the head is away (or just back): its trials run on and say so again.
        if (st.head_down || clock_type::now() - st.head_lost_at < std::chrono::seconds(10)) return;
        auto it = st.by_actor.find(who);
        if (it == st.by_actor.end()) return;  // it ended after all
        st.by_actor.erase(it);
        auto lit = st.live.find(id);
        if (lit == st.live.end() || !lit->second.actor || lit->second.actor.address() != who) return;
        self->demonitor(lit->second.actor);
        lit->second.actor = nullptr;
        st.lost.insert(who);
        nlohmann::json body{{"ok", false}, {"error", "its node was lost (" + why + ")"}};
        on_event(self, id, "ended", body.dump());
      },
      [self](reconnect_atom) {
        auto& st = self->state;
        if (st.over || !st.head_down) return;
        if (clock_type::now() > st.head_lost_at + st.setup.head_wait)
          return finish(self, status{errc::not_found, "the head at " + st.setup.head_host + ":" +
                                                          std::to_string(st.setup.head_port) + " did not come back within " +
                                                          std::to_string(st.setup.head_wait.count() / 1000) + " s"});
        auto mm = self->home_system().middleman().actor_handle();
        self->request(mm, st.setup.request_timeout, caf::connect_atom::value, st.setup.head_host, st.setup.head_port)
            .then(
                [self](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
                  if (ptr) return head_back(self, caf::actor_cast<caf::actor>(ptr));
                  self->delayed_send(self, std::chrono::milliseconds(500), reconnect_atom::value);
                },
                [self](caf::error&) { self->delayed_send(self, std::chrono::milliseconds(500), reconnect_atom::value); });
      },
      [self](flush_atom) {
        if (self->state.over) return;
        if (!flush(self) || !commit(self)) return;
        advance(self);
        if (self->state.over) return;
        show(self, false);
        board_report(self, false);
        self->delayed_send(self, self->state.setup.options.flush_every, flush_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_controller(caf::actor_system& sys, controller_setup setup) {
  return sys.spawn<caf::detached>(controller, std::move(setup));
}

expected<experiment_summary> run_experiment(cluster_client& client, experiment_engine& engine,
                                            experiment_store& store, const experiment_run_options& opt,
                                            resume_plan* resumed) {
  if (!client.program_server()) return status{errc::invalid_argument, "run_experiment: serve the program first"};
  auto done = std::make_shared<std::promise<expected<experiment_summary>>>();
  auto result = done->get_future();
  controller_setup setup;
  setup.head = client.head();
  setup.token = client.token();
  setup.programs = client.program_server();
  setup.request_timeout = client.request_timeout();
  setup.engine = &engine;
  setup.store = &store;
  setup.options = opt;
  setup.on_done = [done](expected<experiment_summary> out) { done->set_value(std::move(out)); };
  if (resumed) {
    setup.resumed = true;
    setup.initial_actions = resumed->actions;
    setup.replayed_results = std::move(resumed->results);
  }
  setup.head_host = client.head_host();
  setup.head_port = client.head_port();
  spawn_controller(client.system(), std::move(setup));  // it answers through `done`
  return result.get();
}

}  // namespace tune
