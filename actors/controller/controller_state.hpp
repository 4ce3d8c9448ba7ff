// The controller's state and its parts, shared by controller.cpp (the actor: messages
// in, the live trials' commands out to the cluster), controller_groups.cpp (its
// placement groups), controller_trials.cpp (what it records of each trial: the engine,
// the store, the dashboard's feed, its starts) and controller_checkpoints.cpp (its
// checkpoints' copies, standby copies, and the copy a restart restores from).
// Internal to tune_controller.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "board_feed.hpp"
#include "controller.hpp"
#include "tune/tuner/live_trials.hpp"
#include "wire.hpp"

namespace tune {

// A checkpoint a trial reported: where it is on its node, and who serves it there.
struct node_checkpoint {
  std::string path;
  caf::actor server;   // the node actor (none: not known, not copied)
  std::string access;  // the trial's secret for reading it there
};

// A complete copy in the experiment folder: <dir>/checkpoints/<trial>/<iteration>/,
// with its MANIFEST.json ({"iteration", "files": [{"name", "size", "sha256"}], ...}).
struct stored_checkpoint {
  std::string dir;
  nlohmann::json manifest;
};

// What the controller keeps of a trial beside its live state (live_trials).
struct trial_record {
  caf::actor node_actor;                           // its node's, for its checkpoints (trial_node_atom)
  std::string access;                              // and its secret for reading them there
  std::map<int64_t, node_checkpoint> checkpoints;  // iteration -> on its node
  std::map<int64_t, stored_checkpoint> stored;     // iteration -> copy in the experiment folder
  std::map<int64_t, int> pinned;                   // copies starts on their way restore from: how many
  bool copying = false;
  std::set<int64_t> to_copy;       // reported, not copied yet: copied in order, none skipped
  std::map<int64_t, double> scores;  // the checkpoint score attribute's value at each iteration
  std::string store_failed;        // why its latest copy could not be stored (empty: it was)
  std::string lost_all;            // why no copy of its could be stored: its error at its end
  // Its standby copy (wire.hpp, stage_atom): the node that holds it and its iteration;
  // one staging at a time; why the last one failed (said once), and the newest copy
  // that failed to be staged (tried again only with a newer one, or once it restarted).
  bool staging = false;
  std::string standby_node, standby_why;
  int64_t standby_iteration = -1, standby_tried = -1;
  std::set<std::string> reported;  // the metrics its results named (what an error says it reported)
  std::optional<wire::wire_trial_end> end;  // its end, while it is being handled
  std::optional<trial_resources> request;     // its own resources (the hooks' resources_fn)
  // What happened beside it that its record should say (another program appeared on
  // one of its cards), and why its group waits (the head's latest reason).
  std::vector<std::string> notes;
  std::string waiting;
  int64_t pid = 0;  // its worker's, once started (what its forwarded output is prefixed with)
};

// A trial of several workers (controller_gang.cpp): ranks 1.. beside rank 0, which is
// the trial as the live table knows it.
struct gang_worker {
  uint32_t rank = 0;
  actor_handle actor = 0;  // its trial actor, once its start is answered (or it spoke)
  bool starting = false, joined = false, ended = false;
  std::string node, trial_dir;
  int64_t pid = 0;
  std::vector<wire::wire_trial_card> gpus;
  uint64_t received = 0;  // its messages (flow control)
  caf::actor node_actor;  // its node's, for its checkpoint shards (trial_node_atom)
  std::string access;     // and its secret for reading them there
  std::map<int64_t, std::string> checkpoints;  // iteration -> its shard's folder on its node
};

enum class gang_timer : int32_t { join, stop_rest, reap, lost };

struct gang_state {
  uint64_t attempt = 0;
  wire::wire_trial_spec spec;  // rank 0's, which the others' are made from
  live_clock::time_point sent_at{};
  actor_handle leader = 0;     // rank 0's actor
  std::string leader_node;
  int64_t leader_pid = 0;
  bool leader_joined = false;
  wire::wire_gang rendezvous;  // as rank 0 was started (its node's address and port)
  std::vector<gang_worker> workers;  // ranks 1..world_size-1
  bool stopping = false;  // the others were told to stop: their ends are no failure
  std::string failure, failure_tail;  // the first worker's failure: the trial's error
  std::optional<wire::wire_trial_end> leader_end;  // rank 0's end, held until the others ended
  bool released = false;  // rank 0's end went on
};

struct gang_ref {
  std::string trial;
  uint64_t attempt = 0;
  uint32_t rank = 0;
};

struct controller_state {
  controller_setup setup;
  live_trials table;
  std::map<std::string, trial_record> records;
  // Actors are handles in the table: assigned here to each trial actor that speaks
  // (kept weak: an actor that is gone is not kept alive by this).
  std::map<actor_handle, caf::actor_addr> actors;
  std::map<caf::actor_addr, actor_handle> handles;
  actor_handle next_handle = 1;
  copier_iface copier;  // the checkpoint copier (checkpoint_copy.hpp)
  live_clock::time_point t0{};
  std::vector<encoded_result> pending;  // results not yet stored
  int64_t ingested = 0;
  int copies = 0;   // checkpoint copies in flight (the experiment ends after them)
  double cpu0 = 0;  // the thread's CPU time when the controller started
  live_clock::time_point last_progress{}, last_board{}, last_rebalance_ask{}, head_lost_at{};
  bool over = false;
  std::set<std::string> waits_said;  // why trials wait, each said once on standard error
  // The head's process died (a remote head): reconnecting to the same address; the
  // experiment goes on with the head started again there.
  bool head_down = false;
  std::optional<board_feed> feed;  // the head's dashboard board: what changed
  std::optional<auto_share> packing;  // auto-packing's share (options.auto_packing)
  std::vector<std::shared_ptr<trial_sink>> sinks;  // trial files, trackers (controller_sinks.cpp)
  std::vector<double> row;  // one result's values, for the sinks
  // The hooks (controller_hooks.cpp): one failed (the experiment ends); when their state
  // was last saved.
  bool hooks_failed = false;
  live_clock::time_point last_hooks_save{};
  // Trial ids on the wire are `<id>@<run key>`: unique in the cluster, so that two
  // experiments' trial-00001 on one node are two trials with two folders.
  std::string run_key;
  std::string on_wire(const std::string& id) const { return id + "@" + run_key; }
  // The trial of a wire id of this run (empty: not this run's).
  std::string from_wire(const std::string& wire_id) const {
    auto at = wire_id.rfind('@');
    return at != std::string::npos && wire_id.compare(at + 1, std::string::npos, run_key) == 0 ? wire_id.substr(0, at) : "";
  }
  // Trials of several workers, by trial; their workers' actors (ranks 1..).
  std::map<std::string, gang_state> gangs;
  std::map<actor_handle, gang_ref> gang_of;
  std::map<actor_handle, std::string> gang_lost_why;
  static inline const char* name = "tune.controller";
};

using controller_actor = controller_iface::stateful_pointer<controller_state>;

// controller.cpp
live_clock::time_point now(controller_actor self);
double elapsed(controller_actor self);
void finish(controller_actor self, expected<experiment_summary> out);
bool flush(controller_actor self);
void advance(controller_actor self);
// Carries out what the live trials' table said, until it says nothing more.
void drain(controller_actor self);
trial_from_owner_iface actor_of(controller_actor self, actor_handle h);
// The handle of a trial actor (a new one the first time it is seen).
actor_handle handle_of(controller_actor self, const caf::actor& a);

// controller_groups.cpp: the head's answers go to the table
void create_group(controller_actor self, const live::create_group& c);
void wait_group(controller_actor self, const live::wait_group& c);
void greet(controller_actor self, const std::string& trial, const std::string& group, uint64_t received);
void retake_group(controller_actor self, const live::retake_group& c);

// controller_packing.cpp (with options.auto_packing only)
// The GPU share of the trial's group: auto-packing's for a new start (again: the same
// as its last, for a group made again after a head restart).
quantity packing_share(controller_actor self, const std::string& trial, bool again);
// The audit's figures that came with `results` results of the trial.
void packing_measured(controller_actor self, const std::string& trial, int64_t peak, int util, size_t results);
// Its process ended: whether it outgrew its share (then it is started again from its
// checkpoint on a bigger one, not counted as a failure).
bool packing_ended(controller_actor self, const std::string& trial, const wire::wire_trial_end& end);

// controller_trials.cpp
void act(controller_actor self, std::vector<engine_action> actions);
void ingest_results(controller_actor self, const std::string& id, const wire::wire_results& r);
void ingest_result(controller_actor self, const std::string& id, const wire::wire_result& r);
// Another program appeared on one of the trial's cards (the node's GPU audit): an event,
// a note in its record, a line on standard error. Nothing is done to it (not ours).
void on_foreign(controller_actor self, const std::string& id, const wire::wire_beside& beside);
// Lines of its output (log_to_driver): to the program's standard error, prefixed "(trial pid=N) ".
// A gang's worker's (rank >= 0): prefixed "(trial rank=R pid=N) ".
void on_output(controller_actor self, const std::string& id, const std::vector<std::string>& lines, int64_t rank = -1,
               int64_t pid = 0);
// Why a trial's group waits (the head's reason): an event, said once on standard error.
void on_waiting(controller_actor self, const std::string& id, const std::string& reason);
void start_failed(controller_actor self, const std::string& id, const std::string& why);
void trial_ended(controller_actor self, const std::string& id, bool moved);
void start_trial(controller_actor self, const live::start_trial& c);
void open_feed(controller_actor self);
void show(controller_actor self, bool force);
void board_report(controller_actor self, bool now, const std::string& state = "running", const std::string& error = "");

// controller_sinks.cpp: the sinks' starts, results, ends, flushes and close
void open_sinks(controller_actor self);
void sinks_started(controller_actor self, const std::string& trial, const nlohmann::json& config);
void sinks_result(controller_actor self, const std::string& trial, const logged_result& r);
void sinks_ended(controller_actor self, const std::string& trial);
void sinks_flush(controller_actor self);  // and their warnings into the store and on standard error
void close_sinks(controller_actor self);

// controller_hooks.cpp: the host of the user's code (options.hooks): events to it, its
// answers to the engine.
void open_hooks(controller_actor self);
const hook::interest& hooks_want(controller_actor self);  // nothing when there is no host
void hooks_post(controller_actor self, hook::event e);
void take_hook_answers(controller_actor self);
void hooks_tick(controller_actor self);  // its state saved now and then; a host that is gone ends it
// The trial ended (terminated, error or paused), or failed and starts again (recovering).
void hooks_trial_end(controller_actor self, const std::string& id, bool recovering);
void close_hooks(controller_actor self, bool ok);

// controller_gang.cpp: trials of several workers (options.world_size)
void end_of(controller_actor self, const std::string& id, wire::wire_trial_end end);  // controller.cpp
void gang_sent(controller_actor self, const live::start_trial& c, const wire::wire_trial_spec& spec);
void gang_leader_started(controller_actor self, const std::string& trial, uint64_t attempt,
                         const wire::wire_trial_started& running0, actor_handle leader);
void gang_start_failed(controller_actor self, const std::string& trial, uint64_t attempt);
// A message from a worker of rank > 0 (its wire id <trial>~w<rank>): the worker, counted
// for flow control; null when it is no current worker's (a stale one is killed).
gang_worker* gang_worker_heard(controller_actor self, const std::string& wire_id);
std::string gang_trial(controller_actor self, const gang_worker& w);
void gang_joined(controller_actor self, const std::string& trial, gang_worker* w);  // null: rank 0
void gang_worker_ended(controller_actor self, gang_worker& w, const wire::wire_trial_end& e);
// Rank 0's end: held (true) while the others still run; passed on to end_of once they ended.
bool gang_hold_end(controller_actor self, const std::string& trial, wire::wire_trial_end& end);
bool gang_holds_end(controller_actor self, const std::string& trial);
void gang_release(controller_actor self, const std::string& trial);
void gang_stopped(controller_actor self, actor_handle leader);  // the engine stops rank 0: all
void gang_ended(controller_actor self, const std::string& trial);  // the trial's end was handled
bool gang_down(controller_actor self, actor_handle h, const std::string& why);
void gang_node_dead(controller_actor self, const std::string& node, const std::string& reason);
void gang_timer_fired(controller_actor self, const std::string& trial, uint64_t attempt, int32_t timer, actor_handle h);

// controller_checkpoints.cpp
// A checkpoint the trial reported: recorded, told to the engine, copied into the
// experiment folder (the newest one not copied yet).
void on_checkpoint(controller_actor self, const std::string& id, const wire::wire_checkpoint& c);
// Stages a standby copy of the trial's newest copy on another node (standby_copies), one
// at a time, unless that one is staged already or failed to be.
void stage_checkpoint(controller_actor self, const std::string& id);
// The experiment's checkpoint rule (checkpoint_keep.hpp) applied to the trial's copies:
// those it removes go from the experiment folder.
void keep_by_rule(controller_actor self, const std::string& id);
// Asks the node that holds the trial's standby copy to drop it (no answer awaited).
void drop_standby(controller_actor self, const std::string& id);
// A copy a start restores from is kept until the start is answered: `by` +1 when a
// start takes copy `at` of `trial`, -1 when it is done with it (at < 0: no copy).
void pin(controller_actor self, const std::string& trial, int64_t at, int by);
// The copy to restore from: the newest complete one at or before `iteration`, its files
// checked against their hashes (a copy that no longer matches is reported and dropped,
// and the one before it is tried). Calls `then` with the copy's manifest as text and
// its iteration, or empty and -1 when there is none.
void pick_copy(controller_actor self, std::string trial, int64_t iteration,
               std::function<void(std::string, int64_t)> then);
// A resumed experiment's complete checkpoint copies (<dir>/checkpoints/<trial>/<iter>/
// with a MANIFEST.json; an unfinished <iter>.part is what a dead driver left: removed).
void load_copies(controller_actor self);

}  // namespace tune
