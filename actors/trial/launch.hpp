// How a trial's worker is started (the watcher's half of the trial actor, watcher.hpp):
// what trial_options become (its command, environment, limits, account, cgroup,
// working copy) and the steps around a worker that are not the watching itself
// (its files made, its cgroup measured and ended, an idle worker handed the trial).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trial.hpp"
#include "tune/trial/output_metrics.hpp"

namespace tune {

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
  bool forward_output = false;  // its output's lines to the owner (Ray's log_to_driver)
};

// How to start the worker: its command (a program trial's, in its working copy; or the
// trainable's executable and arguments), environment, limits.
launch make_launch(const trial_options& opt);

// The cards as the trial's "started" message and TUNE_TRIAL_GPUS (JSON) name them.
std::vector<wire::wire_trial_card> trial_cards(const trial_options& opt);
nlohmann::json gpus_json(const trial_options& opt);

// What a trial needs whether a new worker starts it or an idle one is handed it: the
// output patterns compiled, a fresh copy of its working directory, its program found.
status prepare_files(launch& l, std::optional<output_metrics>& metrics);
// What a new worker needs besides: its cgroup made (with its host limits, which its
// keeper joins before the worker starts). The cgroup, or why not.
expected<std::unique_ptr<trial_cgroup>> prepare(launch& l, std::optional<output_metrics>& metrics);

// What its cgroup measured for this trial: what it counts since `before` (a reused
// worker's cgroup counted its earlier trials too; its memory peak is the worker's).
host_usage cgroup_usage(const launch& l, trial_cgroup& cg, const host_usage& before, wire::wire_trial_end& host);
// The end of the trial is the end of all it started: its cgroup is killed, waited for
// until empty and removed (as a subreaper, the keeper has killed what was left). What
// its cgroup measured, and what it left behind.
wire::wire_trial_end end_cgroup(const launch& l, trial_cgroup* cg, worker_process& w, const host_usage& before);

// Takes `line` out of `lines` if it is there (with `and_after`, what followed it too).
bool take_line(std::vector<std::string>& lines, const char* line, bool and_after = false);
// The worker's side of the hand-over protocol in its environment.
void reuse_environment(process_spec& spec, const std::string& dir, std::chrono::milliseconds linger);
// A fresh worker's hand-over folder: <root>/<trial>, the worker's account's, 0700.
// Empty (and said in the log) when it cannot be made: the worker is then not reused.
std::string hand_over_folder(const launch& l);
// An idle worker of the experiment's on the trial's cards takes the trial: it is handed
// the trial's environment and folder and says it took them (at most 3 s). False (and
// the worker and its cgroup ended) when it did not; `lines`: what it reported right after.
bool adopt(reuse::idle_worker& w, const process_spec& spec, const unix_account& account, std::vector<std::string>& lines);

}  // namespace tune
