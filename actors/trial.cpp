#include "trial.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "audit.hpp"
#include "log.hpp"
#include "tune/core/json_text.hpp"
#include "tune/core/utf8.hpp"
#include "tune/core/trace.hpp"
#include "tune/trial/paths.hpp"
#include "tune/trial/command.hpp"
#include "tune/trial/error_headline.hpp"
#include "tune/trial/mps.hpp"
#include "tune/trial/output_metrics.hpp"
#include "tune/trial/process.hpp"
#include "tune/core/quantity.hpp"

namespace tune {

namespace {

using started_atom = caf::atom_constant<caf::atom("tstarted")>;
using line_atom = caf::atom_constant<caf::atom("tline")>;
using ended_atom = caf::atom_constant<caf::atom("tended")>;
using greet_wait_atom = caf::atom_constant<caf::atom("tgreetw")>;
using host_atom = caf::atom_constant<caf::atom("thost")>;

// What the actor asks of the watching thread; the thread acts on it between polls.
struct control {
  std::atomic<int> stop_after_ms{-1};  // >= 0: SIGTERM now, SIGKILL after that long
  std::atomic<bool> kill{false}, pause{false}, resume{false};
  // Flow control: the owner is behind (too many messages unacknowledged), or the actor is
  // (lines sent to it not handled yet): the thread stops reading the worker's pipes.
  std::atomic<bool> hold_reading{false};
  std::atomic<int64_t> lines_in_flight{0};
};
constexpr int64_t max_lines_in_flight = 8192;  // lines read from the worker, not yet handled by the actor
constexpr int last_word_rounds = 64;  // reads of its pipes after its end, each at most worker_process::max_read_per_poll
constexpr size_t max_batch_rows = 256;           // results in one message to the owner

// How the watching thread starts the worker: for a program trial it first makes the
// trial's own copy of the working directory and finds the command's program (off the
// node actor's thread: a large folder takes a while to copy).
struct launch {
  process_spec spec;
  std::string node_id;
  std::shared_ptr<const workdir_manifest> workdir;
  std::string blobs;
  bool find_program = false;
  std::vector<std::string> patterns;  // metrics in its standard output
  std::string metric;
  std::shared_ptr<python_spawners> pythons;  // a warm interpreter for a Python command
  std::shared_ptr<program_spawners> programs;  // a warm libtune program for its own worker
  std::string trial_id;
  std::shared_ptr<containment> contain;  // its cgroup comes from here (none: not contained)
  host_limits limits;
  unix_account account;  // who it runs as
  // Reused workers (tune/trial/reuse.hpp): the node's pool; whether this trial may run in
  // an idle worker and leave its own; what must match; its cards (UUIDs).
  std::shared_ptr<reuse::idle_pool> idle;
  bool reuse = false;
  std::string reuse_key, reuse_root;
  std::set<std::string> cards;
};

nlohmann::json usage_json(const host_usage& u) {
  nlohmann::json j = nlohmann::json::object();
  if (u.memory >= 0) j["memory"] = u.memory;
  if (u.memory_peak >= 0) j["memory_peak"] = u.memory_peak;
  if (u.cpu_seconds >= 0) j["cpu_seconds"] = u.cpu_seconds;
  if (u.pids >= 0) j["pids"] = u.pids;
  return j;
}

struct trial_state {
  trial_options opt;
  std::shared_ptr<control> ctl = std::make_shared<control>();
  std::thread watcher;
  int64_t results = 0;
  bool stopped = false, killed = false;
  std::string violation;  // the GPU audit's finding, when it killed the trial
  struct {
    int64_t iteration = -1, bytes = 0, files = 0;  // iteration -1: none reported
    std::string path;
  } last_checkpoint;  // the latest one reported
  int64_t gpu_memory = 0, gpu_memory_peak = 0;
  int32_t gpu_util = -1;    // the audit's mean SM utilisation of its processes (-1: not known)
  bool over_quota = false;  // the audit's finding was its memory quota
  bool started_ok = false;  // its worker ran
  // What goes to the owner, numbered from 0: those it has not acknowledged, at most the
  // latest `kept_messages` (all of them while held), so that what a broken route lost
  // can be sent again. Nothing goes out
  // until the owner's first message (route_atom, wire.hpp) has come (or
  // trial_greeting_wait has passed), nor while held (the node lost the head) until the
  // owner greets it again; an ended trial waits for that too (at most hold_wait).
  bool greeted = false, over = false;
  bool released = false;  // its bundle was taken back: nobody waits for what it says
  std::deque<caf::message> sent;
  uint64_t first = 0;  // the number of sent.front()
  uint64_t acked = 0;  // how many the owner said it received (flow control)
  int64_t ignored_lines = 0;  // lines on its report channel that were not reports
  std::string ignored_example;
  uint64_t held_since = 0;  // messages from this number on were not sent (while not greeted)
  uint64_t hold_round = 0;
  static inline const char* name = "tune.trial";
  ~trial_state() {
    ctl->kill = true;  // the actor is gone: its worker goes too
    if (watcher.joinable()) watcher.join();
  }
};

using trial_actor = caf::stateful_actor<trial_state>*;

nlohmann::json gpus_json(const trial_options& opt) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < opt.cards.size(); ++i) {
    auto& c = opt.cards[i];
    auto& g = opt.grants[i];
    list.push_back({{"local", i},
                    {"index", c.index},
                    {"uuid", c.uuid},
                    {"pci_bus_id", c.pci_bus_id},
                    {"share", g.share.to_double()},
                    {"memory_quota", g.memory},
                    {"logical", c.logical}});
  }
  return list;
}

// The watching thread: starts the worker, reads it, acts on the controls, reaps it.
// What a trial needs whether a new worker starts it or an idle one is handed it: the
// output patterns compiled, a fresh copy of its working directory, its program found.
status prepare_files(launch& l, std::optional<output_metrics>& metrics) {
  if (!l.patterns.empty()) {
    auto m = output_metrics::make(l.patterns, l.metric);
    if (!m) return m.error();
    metrics = std::move(*m);
  }
  {  // in its folder as its account: a link an earlier run left there leads nowhere it could not write
    as_account as(l.account);
    if (l.workdir) {  // a fresh copy on every start: what an earlier run changed is gone
      std::error_code ec;
      std::filesystem::remove_all(l.spec.cwd, ec);
      if (auto s = materialize_workdir(*l.workdir, l.blobs, l.spec.cwd); !s)
        return status{s.code(), "its working directory: " + s.message()};
    }
    if (l.find_program) {
      auto path = l.spec.env.count("PATH") ? l.spec.env.at("PATH") : std::string{};
      auto program = resolve_program(l.spec.argv[0], l.spec.cwd, path);
      if (!program) return program.error();
      l.spec.argv[0] = *program;
    }
  }
  return status::ok();
}

// What a new worker needs besides: its cgroup made (with its host limits, which its
// keeper joins before the worker starts). The cgroup, or why not.
expected<std::unique_ptr<trial_cgroup>> prepare(launch& l, std::optional<output_metrics>& metrics) {
  if (auto s = prepare_files(l, metrics); !s) return s;
  std::unique_ptr<trial_cgroup> cg;
  if (l.contain) {
    auto made = l.contain->make(l.trial_id, l.limits);
    if (!made) return made.error();
    cg = std::move(*made);
    l.spec.contain = cg->spec();
  }
  return cg;
}

// What the actor asked (stop after a grace, kill, pause, resume), carried out.
void apply_controls(control& ctl, worker_process& w, trial_cgroup* cg,
                    std::optional<std::chrono::steady_clock::time_point>& kill_at) {
  if (int grace = ctl.stop_after_ms.exchange(-1); grace >= 0) {
    w.terminate();
    kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace);
  }
  if (ctl.kill || (kill_at && std::chrono::steady_clock::now() >= *kill_at)) w.kill();
  // Paused: its process group stopped and, in a cgroup, everything in it frozen.
  if (ctl.pause.exchange(false)) {
    w.pause();
    if (cg) cg->freeze(true);
  }
  if (ctl.resume.exchange(false)) {
    if (cg) cg->freeze(false);
    w.resume();
  }
}

// The end of the trial is the end of all it started: its cgroup is killed, waited for
// until empty and removed (as a subreaper, the keeper has killed what was left). What
// its cgroup measured, and what it left behind.
// What its cgroup measured for this trial: what it counts since `before` (a reused
// worker's cgroup counted its earlier trials too; its memory peak is the worker's).
host_usage cgroup_usage(const launch& l, trial_cgroup& cg, const host_usage& before, wire::wire_trial_end& host) {
  auto u = cg.usage();
  host.host_memory = u.memory;
  host.host_memory_peak = u.memory_peak;
  host.cpu_seconds = u.cpu_seconds >= 0 && before.cpu_seconds >= 0 ? u.cpu_seconds - before.cpu_seconds : u.cpu_seconds;
  host.pids = u.pids;
  host.containment = l.contain->caps().kind();
  host.oom_kills = std::max<int64_t>(u.oom_kills - std::max<int64_t>(before.oom_kills, 0), 0);
  host.pids_refused = std::max<int64_t>(u.pids_refused - std::max<int64_t>(before.pids_refused, 0), 0);
  return u;
}

wire::wire_trial_end end_cgroup(const launch& l, trial_cgroup* cg, worker_process& w, const host_usage& before) {
  wire::wire_trial_end host;
  if (!cg) return host;
  cgroup_usage(l, *cg, before, host);
  auto escaped = cg->end(w.group());
  if (escaped) host.left_behind = *escaped;
  else host.containment_error = escaped.error().message();
  host.left_behind_count = host.left_behind.empty() ? static_cast<int64_t>(w.left_behind())
                                                    : static_cast<int64_t>(host.left_behind.size());
  return host;
}

// Takes `line` out of `lines` if it is there (with `and_after`, what followed it too).
bool take_line(std::vector<std::string>& lines, const char* line, bool and_after = false) {
  auto it = std::find(lines.begin(), lines.end(), line);
  if (it == lines.end()) return false;
  lines.erase(it, and_after ? lines.end() : it + 1);
  return true;
}

// The worker's side of the hand-over protocol in its environment.
void reuse_environment(process_spec& spec, const std::string& dir, std::chrono::milliseconds linger) {
  spec.env["TUNE_REUSE_DIR"] = dir;
  spec.env["TUNE_REUSE_WAIT_MS"] = std::to_string(linger.count() + 1000);  // the node ends it first
}

// A fresh worker's hand-over folder: <root>/<trial>, the worker's account's, 0700.
// Empty (and said in the log) when it cannot be made: the worker is then not reused.
std::string hand_over_folder(const launch& l) {
  auto dir = l.reuse_root + "/" + l.trial_id;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (!ec && ::chmod(dir.c_str(), 0700) == 0 &&
      (l.spec.run_as.uid < 0 ||
       ::chown(dir.c_str(), static_cast<uid_t>(l.spec.run_as.uid), static_cast<gid_t>(l.spec.run_as.gid)) == 0))
    return dir;
  log_line("trial " + l.trial_id + ": no hand-over folder for its worker (" + dir + "): not reused");
  std::filesystem::remove_all(dir, ec);
  return "";
}

// An idle worker of the experiment's on the trial's cards takes the trial: it is handed
// the trial's environment and folder and says it took them (at most 3 s). False (and
// the worker and its cgroup ended) when it did not; `lines`: what it reported right after.
bool adopt(reuse::idle_worker& w, const process_spec& spec, const unix_account& account, std::vector<std::string>& lines) {
  status handed = status::ok();
  {
    as_account as(account);  // in its account's folder: as that account
    handed = reuse::hand_over(w, spec);
  }
  if (auto& s = handed; !s) {
    log_line("trial " + w.trial_id + "'s worker could not be handed the next trial: " + s.message());
    reuse::idle_pool::end(w);
    return false;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    bool open = w.process->poll(std::chrono::milliseconds(20), lines);
    if (take_line(lines, reuse::adopted_line)) return true;
    if (!open || w.process->try_wait()) break;
  }
  log_line("trial " + w.trial_id + "'s worker did not take the next trial: started anew");
  reuse::idle_pool::end(w);
  lines.clear();
  return false;
}

// The worker's thread: starts it (or has an idle worker of the experiment's take the
// trial), reads what it reports and writes, carries out the actor's controls, and tells
// the actor of its end (or, its trial done and its worker reusable, keeps the worker).
void watch(caf::actor self, launch l, std::shared_ptr<control> ctl, std::shared_ptr<spawner> via) {
  std::optional<output_metrics> metrics;
  std::unique_ptr<worker_process> owned;
  std::unique_ptr<trial_cgroup> cg;
  std::vector<std::string> lines, output;
  host_usage before;
  std::string reuse_dir;  // its hand-over folder (empty: not reusable)
  bool reused = false;
  if (l.idle) {
    if (l.reuse)
      if (auto w = l.idle->take(l.reuse_key)) {
        if (auto s = prepare_files(l, metrics); !s) {
          reuse::idle_pool::end(*w);
          caf::anon_send(self, started_atom::value, 0, 0, "node " + l.node_id + ": " + s.message(), std::string{});
          return;
        }
        auto spec = l.spec;
        reuse_environment(spec, w->dir, l.idle->linger());
        trace_step("hand_over", l.trial_id);
        if (adopt(*w, spec, l.account, lines)) {
          trace_step("handed_over", l.trial_id);
          owned = std::move(w->process);
          cg = std::move(w->cgroup);
          reuse_dir = w->dir;
          before = w->used;
          reused = true;
          owned->clear_tails();
        }
      }
    // Idle workers of anything else on its cards end before it starts.
    if (!owned) l.idle->evict(l.reuse ? l.reuse_key : std::string{}, l.cards);
  }
  if (!owned) {
    before = {};
    trace_step("prepare", l.trial_id);
    auto prepared = prepare(l, metrics);
    trace_step("prepared", l.trial_id);
    if (!prepared) {
      caf::anon_send(self, started_atom::value, 0, 0, "node " + l.node_id + ": " + prepared.error().message(), std::string{});
      return;
    }
    cg = std::move(*prepared);
    // A Python command starts as a fork of a warm interpreter (no start-up of its own).
    auto warm = l.find_program && l.pythons ? l.pythons->for_program(l.spec.argv[0]) : nullptr;
    // A libtune program's own worker starts as a fork of that program, started once.
    if (!warm && !l.find_program && l.programs) warm = l.programs->for_spec(l.spec);
    if (warm && warm->gone()) warm = nullptr;
    spawner* from = warm ? warm.get() : via.get();
    // Reusable: in a cgroup, and its keeper not a child of this thread (which ends with
    // the trial).
    if (l.reuse && l.idle && cg && from) {
      reuse_dir = hand_over_folder(l);
      if (!reuse_dir.empty()) reuse_environment(l.spec, reuse_dir, l.idle->linger());
    }
    auto p = worker_process::start(l.spec, from);
    trace_step("spawned", l.trial_id);
    if (!p) {
      if (!reuse_dir.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(reuse_dir, ec);
      }
      caf::anon_send(self, started_atom::value, 0, 0, p.error().message(), std::string{});
      return;
    }
    owned = std::move(*p);
  }
  auto& w = *owned;
  caf::anon_send(self, started_atom::value, w.pid(), w.group(), std::string{}, cg ? cg->path() : std::string{});
  auto next_sample = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  auto* output_lines = metrics ? &output : nullptr;
  auto hand_over = [&] {
    for (auto& o : output)
      if (auto r = metrics->report_line(o)) lines.push_back(std::move(*r));
    output.clear();
    if (lines.empty()) return;
    ctl->lines_in_flight += static_cast<int64_t>(lines.size());
    caf::anon_send(self, line_atom::value, std::move(lines));  // one message per read
    lines.clear();
  };
  std::optional<exit_info> done;
  int idle_ms = 1;
  while (!done) {
    // poll() returns at once when the worker has closed its output and report channel
    // (it may still run): then this thread waits for the keeper's news of its end
    // instead of spinning (the end is seen the moment it comes), 1 ms first, then twice
    // as long each time up to 50 ms, between looks at the controls. While the owner or
    // the actor is behind, it reads nothing (the worker's writes block once the pipes
    // are full).
    if (ctl->hold_reading || ctl->lines_in_flight > max_lines_in_flight) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } else if (!w.poll(std::chrono::milliseconds(50), lines, output_lines)) {
      w.wait_for_end(std::chrono::milliseconds(idle_ms));  // wakes at the worker's end
      idle_ms = std::min(idle_ms * 2, 50);
    }
    // Its trial done, the worker waits for the next one (nothing comes after "idle"
    // until the next trial is handed over); not kept, its folder goes (reuse_dir empty).
    bool idle_now = !reuse_dir.empty() && take_line(lines, reuse::idle_line, true);
    hand_over();
    if (idle_now) {
      // Kept when nothing else is in its cgroup and nobody asked for it to be killed;
      // else its hand-over folder goes and it exits (0) by itself.
      auto pids = cg ? cg->pids() : std::vector<int>{};
      std::vector<int> own{w.group(), w.pid()};
      std::sort(pids.begin(), pids.end());
      std::sort(own.begin(), own.end());
      if (!ctl->kill && pids == own && !w.try_wait()) {
        wire::wire_trial_end end;
        auto used = cgroup_usage(l, *cg, before, end);
        end.worker_reused = reused;
        end.worker_kept = true;
        auto tail = w.stderr_tail();
        auto overlong = static_cast<int64_t>(w.overlong_lines());
        reuse::idle_worker keep;
        keep.key = l.reuse_key;
        keep.cards = l.cards;
        keep.dir = reuse_dir;
        keep.trial_id = l.trial_id;
        keep.used = used;
        keep.process = std::move(owned);
        keep.cgroup = std::move(cg);
        trace_step("went_idle", l.trial_id);
        l.idle->keep(std::move(keep));
        caf::anon_send(self, ended_atom::value, true, 0, exit_info{true, 0}.describe(), tail, overlong, std::move(end));
        return;
      }
      std::error_code ec;
      std::filesystem::remove_all(reuse_dir, ec);
      reuse_dir.clear();
    }
    apply_controls(*ctl, w, cg.get(), kill_at);
    done = w.try_wait();
    // What its cgroup uses (host memory, CPU), about once a second.
    if (cg && !cg->path().empty() && std::chrono::steady_clock::now() >= next_sample) {
      next_sample = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      caf::anon_send(self, host_atom::value, json_text(usage_json(cg->usage())));
    }
  }
  // The last words: what is left in its pipes, read in bounded rounds (a helper it left
  // behind may still be writing: at most last_word_rounds of them, then its end goes on).
  for (int round = 0; round < last_word_rounds; ++round) {
    bool open = w.poll(std::chrono::milliseconds(0), lines, output_lines);
    bool got = !lines.empty() || !output.empty();
    if (!reuse_dir.empty()) take_line(lines, reuse::idle_line);
    hand_over();
    if (!open || !got) break;
  }
  if (!reuse_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(reuse_dir, ec);
  }
  trace_step("exited", l.trial_id);
  auto host = end_cgroup(l, cg.get(), w, before);
  trace_step("cgroup_ended", l.trial_id);
  host.worker_reused = reused;
  caf::anon_send(self, ended_atom::value, done->exited, done->code, done->describe(), w.stderr_tail(),
                 static_cast<int64_t>(w.overlong_lines()), std::move(host));
}

constexpr size_t kept_messages = 4096;  // a few seconds of a fast trial; small per trial
constexpr std::chrono::seconds hold_wait{600};

// Whether the watching thread may read on: the owner is at most ack_window behind.
// What the owner acknowledged is not kept: a message can hold a batch of hundreds of
// results, and keeping the latest kept_messages of them whatever was acknowledged held
// hundreds of MiB in a report flood when the owner was slow.
void pace(trial_actor self) {
  auto& st = self->state;
  while (st.greeted && !st.sent.empty() && st.first < st.acked) {
    st.sent.pop_front();
    ++st.first;
  }
  uint64_t end = st.first + st.sent.size();
  st.ctl->hold_reading = st.opt.owner && end > st.acked + wire::ack_window;
}

void to_owner(trial_actor self, caf::message msg) {
  auto& st = self->state;
  if (!st.opt.owner) return;
  if (st.greeted) self->send(st.opt.owner, msg);
  st.sent.push_back(std::move(msg));
  while (st.greeted && st.sent.size() > kept_messages) {
    st.sent.pop_front();
    ++st.first;
  }
  pace(self);
}

// The owner can be reached and has had the first `received` messages: the rest go out,
// in order; an ended trial is done.
void greeted(trial_actor self, uint64_t received) {
  auto& st = self->state;
  st.acked = std::max(st.acked, received);
  uint64_t end = st.first + st.sent.size();
  if (st.greeted && received >= end) return pace(self);  // nothing missing
  if (received < st.first)
    log_line("trial " + st.opt.spec.trial_id + ": " + std::to_string(st.first - received) +
             " message(s) to its owner were lost with the route and are no longer kept");
  for (uint64_t i = std::max(received, st.first); i < end; ++i) self->send(st.opt.owner, st.sent[i - st.first]);
  st.greeted = true;
  while (st.sent.size() > kept_messages) {
    st.sent.pop_front();
    ++st.first;
  }
  pace(self);
  if (st.over) self->quit();
}

void event(trial_actor self, const std::string& kind, const nlohmann::json& body) {
  to_owner(self, caf::make_message(wire::trial_event_atom::value, self->state.opt.spec.trial_id, kind, json_text(body)));
}

// A checkpoint the worker reports: a folder of its own trial folder (no absolute path,
// no "..", no symbolic link out of it). Relayed with its size; anything else is
// logged and ignored (the worker is the user's code).
void checkpoint(trial_actor self, const nlohmann::json& j) {
  auto& st = self->state;
  namespace fs = std::filesystem;
  if (!j.contains("iteration") || !j["iteration"].is_number_integer() || !j.contains("dir") || !j["dir"].is_string())
    return;
  auto rel = fs::path(j["dir"].get<std::string>());
  auto dir = rel.is_absolute() ? fs::path{} : folder_inside(st.opt.trial_dir, fs::path(st.opt.trial_dir) / rel);
  std::error_code ec;
  if (dir.empty()) {
    log_line("trial " + st.opt.spec.trial_id + ": ignored a checkpoint outside its folder: " + rel.string());
    return;
  }
  int64_t bytes = 0, files = 0;
  as_account as(st.opt.account);  // its sizes as its account sees them (a link leads nowhere else)
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
    if (it->is_regular_file(ec)) {
      bytes += static_cast<int64_t>(it->file_size(ec));
      ++files;
    }
  st.last_checkpoint = {j["iteration"].get<int64_t>(), bytes, files, dir.string()};
  event(self, "checkpoint", {{"iteration", j["iteration"]}, {"path", dir.string()}, {"bytes", bytes}, {"files", files}});
}

// The common report, {"type": "result", "iteration": N, "metrics": {name: number, ...}}
// (keys in any order, iteration optional), read without building a JSON document.
// parse() says false for anything else (another type, a metric that is not a number, a
// key it does not know, a repeated name, malformed text): such a line takes the general
// path. The buffers are reused from line to line.
class plain_result {
 public:
  std::vector<std::string> names;
  std::vector<double> values;
  std::optional<int64_t> iteration;

  bool parse(const std::string& line) {
    names.clear();
    values.clear();
    iteration.reset();
    depth_ = 0;
    where_ = slot::none;
    typed_ = false;
    metrics_seen_ = false;
    return nlohmann::json::sax_parse(line, this, nlohmann::json::input_format_t::json, true) && typed_ &&
           metrics_seen_;
  }

  // The SAX interface (nlohmann::json_sax): returning false stops the parse.
  bool null() { return false; }
  bool boolean(bool) { return false; }
  bool number_integer(int64_t v) { return number(static_cast<double>(v), v); }
  bool number_unsigned(uint64_t v) {
    return number(static_cast<double>(v), v <= static_cast<uint64_t>(INT64_MAX) ? std::optional<int64_t>{static_cast<int64_t>(v)}
                                                                               : std::nullopt);
  }
  bool number_float(double v, const std::string&) { return number(v, std::nullopt); }
  bool string(std::string& v) {
    if (depth_ != 1 || where_ != slot::type || v != "result") return false;
    typed_ = true;
    return true;
  }
  bool binary(nlohmann::json::binary_t&) { return false; }
  bool start_object(std::size_t) {
    if (depth_ == 0) return ++depth_, true;
    if (depth_ != 1 || where_ != slot::metrics || metrics_seen_) return false;
    metrics_seen_ = true;
    return ++depth_, true;
  }
  bool end_object() { return --depth_, true; }
  bool start_array(std::size_t) { return false; }
  bool end_array() { return false; }
  bool key(std::string& k) {
    if (depth_ == 2) {
      for (auto& n : names)
        if (n == k) return false;
      names.push_back(k);
      return true;
    }
    where_ = k == "type" ? slot::type : k == "iteration" ? slot::iteration : k == "metrics" ? slot::metrics : slot::none;
    return where_ != slot::none;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  enum class slot { none, type, iteration, metrics };
  int depth_ = 0;
  slot where_ = slot::none;
  bool typed_ = false, metrics_seen_ = false;

  bool number(double v, std::optional<int64_t> integer) {
    if (depth_ == 2) {
      if (!std::isfinite(v)) return false;
      values.push_back(v);
      return true;
    }
    if (depth_ != 1 || where_ != slot::iteration || !integer || iteration) return false;
    iteration = integer;
    return true;
  }
};

// Whether a program's error output says a file it wanted was not there.
bool missing_file(const std::string& text) {
  for (auto sign : {"No such file or directory", "FileNotFoundError", "Dataset not found", "does not exist",
                    "cannot find the file", "Error downloading"})
    if (text.find(sign) != std::string::npos) return true;
  return false;
}

// Why a trial's process ended as it did: empty when it ended well (exit 0, or a clean
// stop: SIGTERM's default action or its exit status 143, as Python's libtune module and
// shells end on it).
std::string end_error(trial_actor self, bool exited, int code, const std::string& how, const std::string& stderr_tail,
                      const wire::wire_trial_end& host, bool& ok) {
  auto& st = self->state;
  ok = (exited && code == 0) || (st.stopped && ((!exited && code == SIGTERM) || (exited && code == 128 + SIGTERM)));
  if (!st.violation.empty()) return ok = false, st.violation;
  if (st.killed) return ok = false, "killed on request";
  if (!ok && host.oom_kills > 0 && st.opt.limits.memory > 0)  // the kernel's OOM killer ended it at its memory.max
    return "killed by the kernel's OOM killer: it used all of its " + format_bytes(st.opt.limits.memory) +
           " of host memory (its memory request; peak " +
           format_bytes(host.host_memory_peak >= 0 ? host.host_memory_peak : st.opt.limits.memory) +
           "). Ask for more memory in its resources, or make it use less";
  if (st.stopped && !exited && code == SIGKILL) return "did not stop within the grace period: killed";
  if (ok) return "";
  std::string error = std::string{process_ended} + how + (st.stopped ? " after the stop request" : "");
  if (auto cause = error_headline(stderr_tail); !cause.empty()) error += ": " + cause;
  if (host.pids_refused > 0)
    error += " (" + std::to_string(host.pids_refused) + " process starts were refused at its limit of " +
             std::to_string(st.opt.limits.pids) + " processes and threads, pids.max)";
  if (st.opt.workdir && missing_file(stderr_tail))
    error += " (it ran in a copy of the working directory: a path outside that folder, such as ../data, is not there; "
             "run trials in the folder itself with --in-place (in_place: true in the experiment file), or give the "
             "path absolute)";
  return error;
}

// The worker has ended (and its cgroup with it): its end to the owner, once the GPU
// audit has made sure its memory is back (it kills what of it is still on a card).
void ended(trial_actor self, bool exited, int code, const std::string& how, const std::string& stderr_tail,
           int64_t overlong, wire::wire_trial_end end) {
  auto& st = self->state;
  end.error = end_error(self, exited, code, how, stderr_tail, end, end.ok);
  if (overlong > 0) {
    if (st.ignored_lines == 0) st.ignored_example = "(a line longer than 1 MiB)";
    st.ignored_lines += overlong;
  }
  end.exit = how;
  end.stderr_tail = stderr_tail;
  end.results = st.results;
  end.stopped = st.stopped;
  end.killed = st.killed;
  end.gpu_audited = static_cast<bool>(st.opt.audit);
  end.checkpoint = st.last_checkpoint.iteration;
  end.checkpoint_path = st.last_checkpoint.path;
  end.checkpoint_bytes = st.last_checkpoint.bytes;
  end.checkpoint_files = st.last_checkpoint.files;
  end.gpu_memory_peak = st.gpu_memory_peak;
  end.gpu_util = st.gpu_util;
  end.over_quota = st.over_quota;
  for (auto& g : st.opt.grants) end.gpu_memory_quota = std::max(end.gpu_memory_quota, g.memory);
  end.ignored_lines = st.ignored_lines;
  end.ignored_example = st.ignored_example;
  if (end.left_behind_count > 0)
    log_line("trial " + st.opt.spec.trial_id + ": " + std::to_string(end.left_behind_count) +
             " process(es) it started had left its process group and were still running at its end: killed" +
             (end.left_behind.empty() ? "" : " (" + json_text(nlohmann::json(end.left_behind)) + ")"));
  log_line("trial " + st.opt.spec.trial_id + " ended: " + how);
  auto finish = [self](wire::wire_trial_end end) {
    auto& st = self->state;
    trace_step("end_sent", st.opt.spec.trial_id);
    to_owner(self, caf::make_message(wire::trial_ended_atom::value, st.opt.spec.trial_id, std::move(end)));
    if (st.watcher.joinable()) st.watcher.join();
    st.over = true;
    if (st.greeted || st.released) self->quit();
  };
  // A kept worker is still on its cards, on purpose: no final look (it would kill it);
  // the audit forgets the trial at once (its processes are the next trial's).
  if (st.opt.audit && end.worker_kept) self->send(st.opt.audit, audit_forget_atom::value, st.opt.spec.trial_id);
  if (!st.opt.audit || !st.started_ok || end.worker_kept) return finish(std::move(end));
  self->request(st.opt.audit, std::chrono::seconds(10), audit_end_atom::value, st.opt.spec.trial_id)
      .then(
          [finish, end](const std::string& after) mutable {
            end.gpu_after_end_json = after;
            finish(std::move(end));
          },
          [finish, end](caf::error&) mutable { finish(std::move(end)); });
}

// How to start the worker: its command (a program trial's, in its working copy; or the
// trainable's executable and arguments), environment, limits.
launch make_launch(const trial_options& opt) {
  launch l;
  l.node_id = opt.node_id;
  l.trial_id = opt.spec.trial_id;
  l.contain = opt.contain;
  l.limits = opt.limits;
  l.account = opt.account;
  if (opt.account.switches)
    l.spec.run_as = {opt.account.uid, opt.account.gid, {opt.account.groups.begin(), opt.account.groups.end()}};
  l.spec.env = trial_environment(opt);
  l.spec.cwd = opt.trial_dir;
  l.programs = opt.programs;
  if (!opt.spec.command.empty()) {  // a program trial: its command, in its working copy
    l.spec.argv = opt.spec.command;
    l.find_program = true;
    l.pythons = opt.pythons;
    l.patterns = opt.spec.output_patterns;
    l.metric = opt.spec.metric;
    if (opt.workdir) {
      l.workdir = opt.workdir;
      l.blobs = opt.workdir_blobs;
      l.spec.cwd = opt.trial_dir + "/work";
    } else if (!opt.spec.workdir_path.empty()) {  // in place: the folder itself, no copy
      l.spec.cwd = opt.spec.workdir_path;
    }
  } else {
    l.spec.argv = {opt.program};
    l.spec.argv.insert(l.spec.argv.end(), opt.spec.args.begin(), opt.spec.args.end());
  }
  l.idle = opt.idle;
  for (auto& c : opt.cards) l.cards.insert(c.uuid);
  // A tuner's trial (its id names its experiment: <id>@<run key>). Its worker is kept
  // only if it speaks the hand-over protocol (a C++ trainable's, a Python script run by
  // the warm interpreter); any other program ignores TUNE_REUSE_DIR and ends as usual.
  auto at = opt.spec.trial_id.rfind('@');
  l.reuse = opt.spec.reuse_worker && opt.idle && at != std::string::npos && !opt.reuse_root.empty();
  if (l.reuse) {
    l.reuse_key = reuse::key_of(l.spec, opt.spec.trial_id.substr(at + 1), l.limits);
    l.reuse_root = opt.reuse_root;
  }
  return l;
}

// The worker runs (pid > 0) or could not start (the error): the start's answer, and the
// GPU audit told which processes and cgroup are the trial's.
void on_started(trial_actor self, int pid, int group, const std::string& error, const std::string& cgroup) {
  auto& st = self->state;
  if (pid == 0) {
    log_line("trial " + st.opt.spec.trial_id + " could not start: " + error);
    st.opt.started.deliver(wire::start_answer(false, error));
    self->quit();
    return;
  }
  nlohmann::json info{{"trial_id", st.opt.spec.trial_id},
                      {"pid", pid},
                      {"node", st.opt.node_id},
                      {"gpus", gpus_json(st.opt)},
                      {"trial_dir", st.opt.trial_dir}};
  if (!st.opt.spec.restore_dir.empty()) info["restore_dir"] = st.opt.spec.restore_dir;
  log_line("trial " + st.opt.spec.trial_id + " started, pid " + std::to_string(pid));
  st.started_ok = true;
  trace_step("worker_running", st.opt.spec.trial_id);
  st.opt.started.deliver(wire::start_answer(true, json_text(info), caf::actor_cast<caf::actor>(self)));
  if (st.opt.node)
    to_owner(self, caf::make_message(wire::trial_node_atom::value, st.opt.spec.trial_id, st.opt.node, st.opt.access));
  event(self, "started", info);
  if (!st.opt.audit) return;
  nlohmann::json quota = nlohmann::json::object();
  for (size_t i = 0; i < st.opt.cards.size(); ++i)
    if (shared_card(st.opt.cards[i])) quota[st.opt.cards[i].uuid] = st.opt.grants[i].memory;
  self->send(st.opt.audit, audit_add_atom::value, st.opt.spec.trial_id, pid, group, cgroup, json_text(quota),
             caf::actor_cast<caf::actor>(self));
}

void ignore_line(trial_actor self, const std::string& line) {
  auto& st = self->state;
  if (st.ignored_lines++ > 0) return;
  st.ignored_example = line.size() > 200 ? shown_utf8(utf8_prefix(line, 197)) + "..." : shown_utf8(line);
  log_line("trial " + st.opt.spec.trial_id + ": ignored a line on its report channel that is not a report: " +
           st.ignored_example);
}

// A line that is not a plain result: a result with a metric that is not a number, a
// checkpoint, "done", or not a report (ignored). `flush` sends the results before it.
template <class Flush>
void general_line(trial_actor self, const std::string& line, Flush& flush) {
  auto& st = self->state;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) return ignore_line(self, line);
  auto type = j["type"].get<std::string>();
  if (type == "result" && j.contains("metrics") && j["metrics"].is_object()) {
    ++st.results;
    auto iteration = j.contains("iteration") && j["iteration"].is_number_integer() ? j["iteration"].get<int64_t>()
                                                                                    : st.results;
    flush();
    to_owner(self, caf::make_message(wire::trial_result_atom::value, st.opt.spec.trial_id,
                                     wire::wire_result{iteration, json_text(j["metrics"]), st.gpu_memory,
                                                                      st.gpu_memory_peak, st.gpu_util}));
  } else if (type == "checkpoint") {
    flush();
    checkpoint(self, j);
  } else if (type == "done") {
    flush();
    event(self, "done", {{"message", j.contains("message") && j["message"].is_string() ? j["message"] : ""}});
  } else {
    ignore_line(self, line);
  }
}

// Lines from the worker (all that one read gave): whatever they are, they must not hurt
// the node (a worker is the user's code), so anything but a well-formed report is
// ignored. Results whose metrics are all numbers go to the owner as columns (one
// message for those that came together and name the same metrics); any other result as
// a wire_result; all in the order the worker wrote them.
void on_lines(trial_actor self, const std::vector<std::string>& lines) {
  auto& st = self->state;
  st.ctl->lines_in_flight -= static_cast<int64_t>(lines.size());
  wire::wire_results batch;
  plain_result row;
  auto flush = [&] {
    if (batch.rows() == 0) return;
    batch.gpu_memory = st.gpu_memory;
    batch.gpu_memory_peak = st.gpu_memory_peak;
    batch.gpu_util = st.gpu_util;
    to_owner(self, caf::make_message(wire::trial_results_atom::value, st.opt.spec.trial_id, std::move(batch)));
    batch = {};
  };
  for (auto& line : lines) {
    if (!row.parse(line)) {
      general_line(self, line, flush);
      continue;
    }
    ++st.results;
    if (batch.names != row.names) {
      flush();
      batch.names = row.names;
    }
    batch.iterations.push_back(row.iteration ? *row.iteration : st.results);
    for (double v : row.values) batch.add(v);
    // At most max_batch_rows a message: the flow-control window counts messages, so
    // what is in flight stays bounded however many lines one read gave (a report flood
    // on a loaded machine read thousands at once, and 512 of those held 300 MiB).
    if (batch.iterations.size() >= max_batch_rows) flush();
  }
  flush();
}

// No greeting from its owner in time: at first its events go out anyway; after a
// hold (the head was lost), an ended trial's last messages are given up.
void greet_wait(trial_actor self, uint64_t round) {
  auto& st = self->state;
  if (st.greeted || round != st.hold_round) return;
  if (round == 0) {  // the first greeting never came: sent anyway
    log_line("trial " + st.opt.spec.trial_id + ": its owner has not written within " +
             std::to_string(wire::trial_greeting_wait.count()) + " s; sending its events anyway");
    return greeted(self, 0);
  }
  if (st.over) {
    log_line("trial " + st.opt.spec.trial_id + ": its owner did not come back within " + std::to_string(hold_wait.count()) +
             " s; its last " + std::to_string(st.first + st.sent.size() - st.held_since) + " message(s) are dropped");
    self->quit();
  }
}

// What its owner says (only its owner is heard).
caf::message_handler owner_handlers(trial_actor self) {
  auto from_owner = [self] {
    auto& st = self->state;
    return st.opt.owner && self->current_sender() == st.opt.owner.address();
  };
  return {
      [self, from_owner](wire::route_atom, uint64_t received) {
        if (from_owner()) greeted(self, received);
      },
      [self, from_owner](wire::trial_ack_atom, uint64_t received) {
        if (!from_owner()) return;
        self->state.acked = std::max(self->state.acked, received);
        pace(self);
      },
      [self, from_owner](wire::trial_stop_atom, int64_t grace_ms) {
        if (!from_owner()) return;
        auto& st = self->state;
        st.stopped = true;
        auto grace = grace_ms < 0 ? st.opt.default_grace.count() : std::min<int64_t>(grace_ms, 3'600'000);
        st.ctl->stop_after_ms = static_cast<int>(grace);
      },
      [self, from_owner](wire::trial_kill_atom) {
        if (!from_owner()) return;
        self->state.killed = true;
        self->state.ctl->kill = true;
      },
      [self, from_owner](wire::trial_pause_atom) {
        if (from_owner()) self->state.ctl->pause = true;
      },
      [self, from_owner](wire::trial_resume_atom) {
        if (from_owner()) self->state.ctl->resume = true;
      },
      [self](greet_wait_atom, uint64_t round) { greet_wait(self, round); },
  };
}

// Its worker's thread, its node and the node's GPU audit.
caf::message_handler node_handlers(trial_actor self) {
  return {
      [self](started_atom, int pid, int group, const std::string& error, const std::string& cgroup) {
        on_started(self, pid, group, error, cgroup);
      },
      [self](line_atom, const std::vector<std::string>& lines) { on_lines(self, lines); },
      [self](host_atom, const std::string& usage) {  // its cgroup's usage, for the node's report
        auto& st = self->state;
        if (st.opt.node) self->send(st.opt.node, trial_host_atom::value, st.opt.spec.trial_id, usage);
      },
      [self](ended_atom, bool exited, int code, const std::string& how, const std::string& stderr_tail, int64_t overlong,
             wire::wire_trial_end& end) { ended(self, exited, code, how, stderr_tail, overlong, std::move(end)); },
      [self](trial_hold_atom) {  // the node lost the head: what it reports waits for its owner's greeting
        auto& st = self->state;
        if (!st.opt.node || self->current_sender() != st.opt.node.address() || !st.greeted) return;
        st.greeted = false;
        st.held_since = st.first + st.sent.size();
        self->delayed_send(self, hold_wait, greet_wait_atom::value, ++st.hold_round);
      },
      // The node's GPU audit: what the trial uses, and a rule it broke (it dies at once:
      // a trial over its quota must not take its neighbours' memory while it stops).
      [self](audit_usage_atom, int64_t now, int64_t peak, int32_t util) {
        if (self->current_sender() != self->state.opt.audit.address()) return;
        self->state.gpu_memory = now;
        self->state.gpu_memory_peak = std::max(self->state.gpu_memory_peak, peak);
        self->state.gpu_util = util;
      },
      [self](audit_violation_atom, const std::string& why, bool over_quota) {
        auto& st = self->state;
        if (self->current_sender() != st.opt.audit.address() || !st.violation.empty()) return;
        st.violation = why;
        st.over_quota = over_quota;
        st.ctl->kill = true;
      },
      // Another program appeared on one of its cards (not ours: left alone): its owner
      // notes it in the trial's record.
      [self](audit_foreign_atom, const std::string& note) {
        auto& st = self->state;
        if (self->current_sender() != st.opt.audit.address()) return;
        auto j = nlohmann::json::parse(note, nullptr, false);
        if (j.is_object()) event(self, "foreign", j);
      },
      [self](trial_release_atom, const std::string& why) {
        auto& st = self->state;
        if (!st.opt.node || self->current_sender() != st.opt.node.address() || !st.violation.empty()) return;
        st.violation = why;
        st.released = true;
        if (st.over) self->quit();  // ended already, waiting to be heard
        st.ctl->kill = true;
      },
  };
}

caf::behavior trial(trial_actor self, trial_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  st.watcher = std::thread(watch, caf::actor_cast<caf::actor>(self), make_launch(st.opt), st.ctl, st.opt.workers);
  if (!st.opt.owner) st.greeted = true;
  else self->delayed_send(self, wire::trial_greeting_wait, greet_wait_atom::value, uint64_t{0});
  return caf::behavior{owner_handlers(self).or_else(node_handlers(self))};
}

}  // namespace

std::map<std::string, std::string> trial_environment(const trial_options& opt) {
  auto env = opt.base_env;
  // What the experiment adds (its names checked by the node: none of those set below).
  for (auto& kv : opt.spec.env)
    if (auto eq = kv.find('='); eq != std::string::npos && eq > 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  std::string visible;
  for (auto& c : opt.cards) visible += (visible.empty() ? "" : ",") + c.uuid;
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  env["CUDA_VISIBLE_DEVICES"] = visible;  // empty: no card at all
  // The id its experiment knows it by: a tuner's trial ids travel as <id>@<run key>
  // (unique in the cluster: its folder's name), the program sees <id>.
  env["TUNE_TRIAL_ID"] = opt.spec.trial_id.substr(0, opt.spec.trial_id.rfind('@'));
  env["TUNE_NODE_ID"] = opt.node_id;
  env["TUNE_TRIAL_DIR"] = opt.trial_dir;
  // Another account than the node's: its own home when it has one it can write, else its
  // folder (caches go somewhere it may write, never the node's home).
  if (opt.account.switches) {
    struct stat h {};
    bool own_home = !opt.account.home.empty() && ::stat(opt.account.home.c_str(), &h) == 0 && S_ISDIR(h.st_mode) &&
                    h.st_uid == opt.account.uid;
    env["HOME"] = own_home ? opt.account.home : opt.trial_dir;
    env["USER"] = env["LOGNAME"] = opt.account.name;
  }
  env["TUNE_TRIAL_CONFIG"] = opt.spec.config_json.empty() ? "{}" : opt.spec.config_json;
  env["TUNE_TRIAL_GPUS"] = json_text(gpus_json(opt));
  env["TUNE_REPORT_FD"] = std::to_string(worker_process::report_fd);
  // The node's Python module first on PYTHONPATH (`import libtune` needs nothing installed).
  if (!opt.python_path.empty())
    env["PYTHONPATH"] = opt.python_path + (env.count("PYTHONPATH") && !env["PYTHONPATH"].empty() ? ":" + env["PYTHONPATH"] : "");
  if (!opt.spec.restore_dir.empty()) env["TUNE_RESTORE_DIR"] = opt.spec.restore_dir;
  // Thread pools (OpenMP, OpenBLAS, MKL) sized to the CPUs the trial holds, not to the
  // machine's, unless the node's own environment says otherwise.
  if (opt.cpu_threads > 0)
    for (auto name : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"})
      if (!env.count(name)) env[name] = std::to_string(opt.cpu_threads);
  if (!opt.grants.empty()) env["TUNE_GPU_MEMORY_QUOTA"] = std::to_string(opt.grants[0].memory);
  // Under the node's MPS daemon the driver enforces each card's quota at allocation.
  if (env.count("CUDA_MPS_PIPE_DIRECTORY") && !opt.cards.empty() && !opt.cards[0].logical) {
    std::vector<int64_t> quotas;
    for (auto& g : opt.grants) quotas.push_back(g.memory);
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = mps_daemon::memory_limits(quotas);
  }
  return env;
}

caf::actor spawn_trial(caf::local_actor* parent, trial_options opt) {
  return parent->spawn<caf::linked>(trial, std::move(opt));
}

}  // namespace tune
