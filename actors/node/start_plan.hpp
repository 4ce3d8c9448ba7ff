// How a node starts a trial, apart from actors, messages, files and clocks (so every
// edge is tested step by step: start_plan_test.cpp). The node actor (node.hpp) feeds it
// what happened — a start from the head, what it fetched or copied, a trial's actor
// ending, a bundle the head took back — and carries out the commands it gives back, in
// order. It decides; it never waits. It also keeps the trials running on the node.
//
//   begin (checked)        fetched               every checkpoint file in place
//   ──────────────► fetching ────────► (again) ──────────────────────────────► spawning
//        │                               │  ▲  │                                  │
//        │ nothing to fetch              │  │  │ one file more                    │ its actor
//        └──────────────────────────────►│  │  └──► restoring ──┐ restored        ▼
//                                        │  └───────────────────┘           (running here)
//                                        │ an earlier process of the trial is ending
//                                        └──► waiting ──► (again) once it has ended
//
// "again": each time a start goes on after a wait (a fetch, a copy, an earlier process's
// end), its bundle is checked once more — its group may have been removed meanwhile, or
// the trial started through another start. Failure edges, each the start's end with its
// refusal: a check that fails at the beginning (not logged: nothing was done); a fetch or
// a copy that fails, a bundle released meanwhile, the trial running here already (each
// logged "trial X not started: why").
//
// A trial whose bundle the head takes back is killed (`release`) and stays `ending`
// until its actor has ended: a start of the same trial waits for that, so that two
// processes of one trial never share its folder.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tune/cluster/reservations.hpp"
#include "tune/core/status.hpp"
#include "wire.hpp"

namespace tune {

// A checkpoint copy to start from (wire_trial_spec::restore_files, and a standby copy's
// manifest): {"iteration", "files": [{"name", "size", "sha256"}]}, every name inside the
// folder and every hash well-formed.
struct restore_file {
  std::string name, sha256;
  uint64_t size = 0;
};
struct restore_set {
  int64_t iteration = -1;
  std::vector<restore_file> files;
};
expected<restore_set> parse_restore_set(const std::string& text);

enum class start_step { fetching, waiting, restoring, spawning };
const char* to_string(start_step s);

using start_id = uint64_t;       // numbers the starts of one node, from 1
using trial_handle = uint64_t;   // a trial's actor, as the node numbers them (0: none)

namespace starting {
struct fetch_program { start_id start; };  // the trainable's program into the node's cache, then on_fetched
struct fetch_workdir { start_id start; };  // the working directory's manifest and files, then on_fetched
// A checkpoint file into the trial's `dir` (<work dir>/trials/<id>/restore/<iteration>:
// its standby copy, else fetched), then on_restored. The trial starts from `dir`.
struct restore { start_id start; std::string dir; restore_file file; };
// The trial's process, in the bundle it holds; then on_spawned (its actor answers the
// start when the process runs) or on_failed.
struct spawn { start_id start; };
// The start's answer: not started, why (the whole answer), and the actor of the trial
// when it runs here (the head's start after a restart finds its trial so).
struct refuse { start_id start; std::string answer; trial_handle running = 0; };
// The head took the trial's bundle back: its process is killed, why.
struct release { trial_handle trial; std::string why; };
struct say { std::string line; };  // a line of the node's log
}  // namespace starting

using start_command = std::variant<starting::fetch_program, starting::fetch_workdir, starting::restore,
                                   starting::spawn, starting::refuse, starting::release, starting::say>;

// What the node knows about a start that the plan cannot see (its accounts and disk),
// found before begin().
struct start_facts {
  bool from_head = false;      // it came through the head this node joined
  bool has_work_dir = false;   // the node runs trials (it has a work folder)
  status account;              // who it would run as can be used (the whole answer when not)
  status in_place;             // its working directory run in place: a folder here it can reach (reason)
  bool restore_local = false;  // restore_dir is a checkpoint folder of a trial of this node
  bool has_server = false;     // a program server came with it
};

class start_plan {
 public:
  struct start {
    wire::wire_trial_spec spec;  // as it starts (restore_dir: where its checkpoint is)
    bundle_key key;
    start_step step = start_step::fetching;
    restore_set restore;         // the checkpoint files still to copy
    std::string fetched;         // what it waited for, for a refusal ("its program", ...)
  };
  struct running {
    trial_handle actor = 0;
    bundle_key key;
    bool ending = false;  // its bundle was taken back; being killed
  };

  // `work_dir`: the node's work folder (trials/<id> are the trials' folders).
  start_plan(std::string node_id, std::string work_dir, const reservation_table& table)
      : node_(std::move(node_id)), work_dir_(std::move(work_dir)), table_(table) {}

  // A start from the head, in bundle `key`: its id, and its first commands (a fetch, a
  // copy, the spawn, or its refusal).
  start_id begin(const wire::wire_trial_spec& spec, const bundle_key& key, const start_facts& facts);
  // What the start fetched (its program or working directory) is in the node's cache,
  // or the whole answer of why not.
  void on_fetched(start_id id, const status& got);
  // Its checkpoint file (the last restore) is in place, or the whole answer of why not.
  void on_restored(start_id id, const status& got);
  // Its process was started by `actor` (which answers the start), or not: the whole answer.
  void on_spawned(start_id id, trial_handle actor);
  void on_failed(start_id id, const std::string& answer);
  // The head took bundle `key` back: the trials in it are killed.
  void on_released(const bundle_key& key);
  // A trial's actor ended: the trial it ran (none: not a trial of this node); a start of
  // the same trial that waited for it goes on.
  std::optional<std::string> on_ended(trial_handle actor);

  std::vector<start_command> take() { return std::exchange(out_, {}); }
  const start* find(start_id id) const;
  const std::map<std::string, running>& trials() const { return trials_; }
  const running* trial(const std::string& id) const;
  const std::map<start_id, start>& starts() const { return starts_; }

 private:
  std::string check(const wire::wire_trial_spec& spec, const bundle_key& key, const start_facts& facts,
                    trial_handle& running) const;
  void go_on(start_id id, start& s);
  void refuse(start_id id, const std::string& answer, trial_handle running, bool logged);
  std::string node_says(const std::string& why) const { return "node " + node_ + ": " + why; }

  bool starting_elsewhere(start_id id, const std::string& trial) const;

  std::string node_, work_dir_;
  const reservation_table& table_;
  start_id next_ = 0;
  std::map<start_id, start> starts_;
  std::map<std::string, running> trials_;
  std::vector<start_command> out_;
};

}  // namespace tune
