#include "trial.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "node/audit.hpp"
#include "log.hpp"
#include "launch.hpp"
#include "outbox.hpp"
#include "typed.hpp"
#include "watcher.hpp"
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


constexpr size_t max_batch_rows = 256;           // results in one message to the owner

struct trial_state {
  trial_options opt;
  std::shared_ptr<control_channel> ctl;  // to its watcher (watcher.hpp)
  std::thread watcher;
  bool holding = false;  // the watcher was told to read nothing (the owner is behind)
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
  // What goes to the owner (outbox.hpp). Nothing goes out until the owner's first
  // message (route_atom, wire.hpp) has come (or trial_greeting_wait has passed), nor
  // while held (the node lost the head) until the owner greets it again; an ended
  // trial (`over`) waits for that too (at most hold_wait).
  outbox<caf::message> out;
  bool over = false;
  bool released = false;  // its bundle was taken back: nobody waits for what it says
  int64_t ignored_lines = 0;  // lines on its report channel that were not reports
  std::string ignored_example;
  uint64_t hold_round = 0;
  static inline const char* name = "tune.trial";
  ~trial_state() {
    if (ctl) ctl->post(control_channel::kind::kill);  // the actor is gone: its worker goes too
    if (watcher.joinable()) watcher.join();
  }
};

using trial_actor = trial_iface::stateful_pointer<trial_state>;

constexpr size_t kept_messages = 4096;  // a few seconds of a fast trial; small per trial
constexpr std::chrono::seconds hold_wait{600};

// Whether the watching thread may read on: the owner is at most ack_window behind.
void pace(trial_actor self) {
  auto& st = self->state;
  if (st.out.behind() == st.holding) return;
  st.holding = !st.holding;
  // Holding waits for the thread's next turn (as it reads, not before); reading on
  // wakes it.
  st.ctl->post(control_channel::kind::hold, st.holding ? 1 : 0, !st.holding);
}

// Its outbox holds messages made by tell_owner (checked there against what an owner
// takes), sent now or again later as they are.
void send_kept(trial_actor self, caf::message msg) { caf::unsafe_send_as(self, self->state.opt.owner, std::move(msg)); }

void to_owner(trial_actor self, caf::message msg) {
  auto& st = self->state;
  if (st.out.push(msg)) send_kept(self, std::move(msg));
  pace(self);
}

// The owner can be reached and has had the first `received` messages: the rest go out,
// in order; an ended trial is done.
void greeted(trial_actor self, uint64_t received) {
  auto& st = self->state;
  bool nothing_missing = st.out.greeted() && received >= st.out.end();
  auto r = st.out.greet(received);
  if (r.lost > 0)
    log_line("trial " + st.opt.spec.trial_id + ": " + std::to_string(r.lost) +
             " message(s) to its owner were lost with the route and are no longer kept");
  for (auto& m : r.again) send_kept(self, std::move(m));
  pace(self);
  if (st.over && !nothing_missing) self->quit();
}

// A message to its owner about the trial: (atom, trial_id, what).
template <class Atom, class... What>
void tell_owner(trial_actor self, Atom atom, What... what) {
  static_assert(caf::response_type_unbox<caf::signatures_of_t<trial_events_iface>,
                                         caf::detail::type_list<Atom, std::string, What...>>::valid,
                "an owner does not take this message (wire_ifaces.hpp)");
  to_owner(self, caf::make_message(atom, self->state.opt.spec.trial_id, std::move(what)...));
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
  tell_owner(self, wire::trial_checkpoint_atom::value, wire::wire_checkpoint{j["iteration"].get<int64_t>(), bytes, files, dir.string()});
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
    tell_owner(self, wire::trial_ended_atom::value, std::move(end));
    if (st.watcher.joinable()) st.watcher.join();
    st.over = true;
    if (st.out.greeted() || st.released) self->quit();
  };
  // A kept worker is still on its cards, on purpose: no final look (it would kill it);
  // the audit forgets the trial at once (its processes are the next trial's).
  if (st.opt.audit && end.worker_kept) self->send(st.opt.audit, audit_forget_atom::value, st.opt.spec.trial_id);
  if (!st.opt.audit || !st.started_ok || end.worker_kept) return finish(std::move(end));
  self->request(st.opt.audit, std::chrono::seconds(10), audit_end_atom::value, st.opt.spec.trial_id)
      .then(
          [finish, end](wire::wire_gpu_after& after) mutable {
            end.gpu_after_end = std::move(after);
            finish(std::move(end));
          },
          [finish, end](caf::error&) mutable { finish(std::move(end)); });
}

// The worker runs (pid > 0) or could not start (the error): the start's answer, and the
// GPU audit told which processes and cgroup are the trial's.
void on_started(trial_actor self, int pid, int group, const std::string& error, const std::string& cgroup) {
  auto& st = self->state;
  if (pid == 0) {
    log_line("trial " + st.opt.spec.trial_id + " could not start: " + error);
    st.opt.started.deliver(wire::start_refusal(error));
    self->quit();
    return;
  }
  wire::wire_trial_started info{st.opt.spec.trial_id, st.opt.node_id, st.opt.trial_dir, st.opt.spec.restore_dir, pid,
                                trial_cards(st.opt), st.opt.spec.gang};
  log_line("trial " + st.opt.spec.trial_id + " started, pid " + std::to_string(pid));
  st.started_ok = true;
  trace_step("worker_running", st.opt.spec.trial_id);
  st.opt.started.deliver(wire::start_answer(info, caf::actor_cast<caf::actor>(self)));
  if (st.opt.node)
    tell_owner(self, wire::trial_node_atom::value, caf::actor_cast<caf::actor>(st.opt.node), st.opt.access);
  tell_owner(self, wire::trial_started_atom::value, std::move(info));
  if (!st.opt.audit) return;
  std::vector<wire::wire_count> quota;
  for (size_t i = 0; i < st.opt.cards.size(); ++i)
    if (shared_card(st.opt.cards[i])) quota.push_back({st.opt.cards[i].uuid, st.opt.grants[i].memory});
  self->send(st.opt.audit, audit_add_atom::value, st.opt.spec.trial_id, pid, group, cgroup, std::move(quota),
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
    tell_owner(self, wire::trial_result_atom::value,
               wire::wire_result{iteration, json_text(j["metrics"]), st.gpu_memory, st.gpu_memory_peak, st.gpu_util});
  } else if (type == "checkpoint") {
    flush();
    checkpoint(self, j);
  } else if (type == "joined") {  // a gang's worker made its process group
    flush();
    tell_owner(self, wire::trial_joined_atom::value);
  } else if (type == "done") {
    flush();
    tell_owner(self, wire::trial_done_atom::value,
               j.contains("message") && j["message"].is_string() ? j["message"].get<std::string>() : std::string{});
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
  st.ctl->lines_handled(static_cast<int64_t>(lines.size()));
  wire::wire_results batch;
  plain_result row;
  auto flush = [&] {
    if (batch.rows() == 0) return;
    batch.gpu_memory = st.gpu_memory;
    batch.gpu_memory_peak = st.gpu_memory_peak;
    batch.gpu_util = st.gpu_util;
    tell_owner(self, wire::trial_results_atom::value, std::move(batch));
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
  if (st.out.greeted() || round != st.hold_round) return;
  if (round == 0) {  // the first greeting never came: sent anyway
    log_line("trial " + st.opt.spec.trial_id + ": its owner has not written within " +
             std::to_string(wire::trial_greeting_wait.count()) + " s; sending its events anyway");
    return greeted(self, 0);
  }
  if (st.over) {
    log_line("trial " + st.opt.spec.trial_id + ": its owner did not come back within " + std::to_string(hold_wait.count()) +
             " s; its last " + std::to_string(st.out.since_hold()) + " message(s) are dropped");
    self->quit();
  }
}

// What its owner says (only its owner is heard).
trial_from_owner_iface::behavior_type owner_handlers(trial_actor self) {
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
        self->state.out.ack(received);
        pace(self);
      },
      [self, from_owner](wire::trial_stop_atom, int64_t grace_ms) {
        if (!from_owner()) return;
        auto& st = self->state;
        st.stopped = true;
        auto grace = grace_ms < 0 ? st.opt.default_grace.count() : std::min<int64_t>(grace_ms, 3'600'000);
        st.ctl->post(control_channel::kind::stop, grace);
      },
      [self, from_owner](wire::trial_kill_atom) {
        if (!from_owner()) return;
        self->state.killed = true;
        self->state.ctl->post(control_channel::kind::kill);
      },
      [self, from_owner](wire::trial_pause_atom) {
        if (from_owner()) self->state.ctl->post(control_channel::kind::pause);
      },
      [self, from_owner](wire::trial_save_atom) {
        if (from_owner()) self->state.ctl->post(control_channel::kind::save);
      },
      [self, from_owner](wire::trial_resume_atom) {
        if (from_owner()) self->state.ctl->post(control_channel::kind::resume);
      },
      [self](trial_greet_wait_atom, uint64_t round) { greet_wait(self, round); },
  };
}

// Its worker's thread, its node and the node's GPU audit.
trial_from_node_iface::behavior_type node_handlers(trial_actor self) {
  return {
      [self](worker_started_atom, int pid, int group, const std::string& error, const std::string& cgroup) {
        on_started(self, pid, group, error, cgroup);
      },
      [self](worker_lines_atom, const std::vector<std::string>& lines) { on_lines(self, lines); },
      [self](worker_output_atom, std::vector<std::string>& lines) {
        tell_owner(self, wire::trial_output_atom::value, std::move(lines));
      },
      [self](worker_host_atom, const host_usage& usage) {  // its cgroup's usage, for the node's report
        auto& st = self->state;
        if (st.opt.node) self->send(st.opt.node, trial_host_atom::value, st.opt.spec.trial_id, usage);
      },
      [self](worker_ended_atom, bool exited, int code, const std::string& how, const std::string& stderr_tail, int64_t overlong,
             wire::wire_trial_end& end) { ended(self, exited, code, how, stderr_tail, overlong, std::move(end)); },
      [self](trial_hold_atom) {  // the node lost the head: what it reports waits for its owner's greeting
        auto& st = self->state;
        if (!st.opt.node || self->current_sender() != st.opt.node.address() || !st.out.hold()) return;
        self->delayed_send(self, hold_wait, trial_greet_wait_atom::value, ++st.hold_round);
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
        st.ctl->post(control_channel::kind::kill);
      },
      // Another program appeared on one of its cards (not ours: left alone): its owner
      // notes it in the trial's record.
      [self](audit_foreign_atom, wire::wire_beside& beside) {
        if (self->current_sender() == self->state.opt.audit.address())
          tell_owner(self, wire::trial_beside_atom::value, std::move(beside));
      },
      [self](trial_release_atom, const std::string& why) {
        auto& st = self->state;
        if (!st.opt.node || self->current_sender() != st.opt.node.address() || !st.violation.empty()) return;
        st.violation = why;
        st.released = true;
        if (st.over) self->quit();  // ended already, waiting to be heard
        st.ctl->post(control_channel::kind::kill);
      },
  };
}

trial_iface::behavior_type trial(trial_actor self, trial_options opt) {
  auto& st = self->state;
  st.opt = std::move(opt);
  auto channel = control_channel::make();
  if (!channel) {
    auto why = "node " + st.opt.node_id + ": " + channel.error().message();
    log_line("trial " + st.opt.spec.trial_id + " could not start: " + why);
    st.opt.started.deliver(wire::start_refusal(why));
    self->quit();
    return trial_iface::behavior_type::make_empty_behavior();
  }
  st.ctl = std::move(*channel);
  st.watcher = std::thread(watch, caf::actor_cast<trial_iface>(self), make_launch(st.opt), st.ctl, st.opt.workers);
  st.out = outbox<caf::message>{kept_messages, wire::ack_window, static_cast<bool>(st.opt.owner)};
  if (st.opt.owner) self->delayed_send(self, wire::trial_greeting_wait, trial_greet_wait_atom::value, uint64_t{0});
  return typed_union<trial_iface>(owner_handlers(self), node_handlers(self));
}

}  // namespace

trial_iface spawn_trial(caf::local_actor* parent, trial_options opt) {
  return parent->spawn<caf::linked>(trial, std::move(opt));
}

}  // namespace tune
