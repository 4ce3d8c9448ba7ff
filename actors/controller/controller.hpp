// The controller: the actor that runs one experiment. It carries out what the
// experiment engine (tune/tuner/engine.hpp) decides, asynchronously — for every start
// a placement group (created, waited for) and then the trial in it, many trials in
// flight at once, so a trial whose group waits for room never delays decisions on the
// others — feeds the engine every trial event the moment it arrives, writes results,
// trials' states, checkpoints and events to the experiment store, and reports
// progress. Writes are committed together every `flush_every` (one transaction, one
// sync to disk: a crash keeps a consistent experiment that lacks at most the last
// `flush_every`); a trial's results are written before its end.
//
// Stop and pause both end the trial's process and give its group back; a paused trial
// gets a new group when it resumes, from its checkpoint (on the checkpoint's node only
// until checkpoints move between nodes, issue 7).
//
// It talks to the head itself (its requests carry the cluster token) and owns the
// groups and trials it starts: trial events come to it, and the head removes its
// groups if it dies. It runs on its own thread (the store's writes block).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "client/client.hpp"
#include "tune/trial/command.hpp"
#include "tune/tuner/auto_share.hpp"
#include "tune/tuner/engine.hpp"
#include "tune/tuner/hooks.hpp"
#include "tune/tuner/plan.hpp"
#include "tune/tuner/progress.hpp"
#include "tune/tuner/resume.hpp"
#include "tune/tuner/store.hpp"
#include "tune/tuner/trial_logs.hpp"

namespace tune {

struct experiment_run_options {
  std::string name = "experiment";
  program_ref program;                 // the trainable, served by the program server
  std::vector<std::string> args;       // the program's command-line arguments
  // A program trial (docs/programs.md) instead of `program` and `args`: its command,
  // whose ${name} placeholders (and, with command_args, appended --key value pairs) take
  // each trial's configuration; its working directory's manifest, served by the program
  // server (no sha256: none); NAME=VALUE environment additions; patterns that read
  // metrics from its standard output.
  std::vector<std::string> command;
  config_args command_args = config_args::none;
  program_ref workdir;
  std::string workdir_path;  // run in this folder itself, on this machine (program::in_place)
  std::vector<std::string> env;
  std::vector<std::string> output_patterns;
  std::vector<resource_set> bundles;   // what each trial needs (its placement group)
  strategy strat = strategy::pack;
  // A gang per trial (docs/workers.md): a worker process in each of its bundles
  // (bundles.size() of them), started, stopped and ended together; 0: one process, in
  // the first bundle. join_timeout: for all of them to have joined (0: no limit).
  uint32_t world_size = 0;
  std::chrono::milliseconds join_timeout{0};
  std::chrono::milliseconds stop_grace{10000};
  std::chrono::milliseconds group_timeout{60000};  // for a trial's group to be placed
  // Called with a snapshot whenever something changed (at most every `progress_every`),
  // on the controller's thread.
  std::function<void(const progress_snapshot&)> on_progress;
  std::chrono::milliseconds progress_every{500};
  std::chrono::milliseconds flush_every{50};  // writes wait at most this long to be committed
  // Rebalancing: ask the head to even the load whenever a node joins or leaves (its moves
  // come back as pg_move_atom); a trial moves at most once per min_move_interval.
  bool auto_rebalance = false;
  std::chrono::milliseconds min_move_interval{60000};
  // Each trial's newest checkpoint copy staged on another node (wire.hpp, stage_atom).
  bool standby_copies = true;
  // A C++ trainable's workers run the next trial on their cards (tune/trial/reuse.hpp).
  bool reuse_workers = false;
  // Auto-packing (tune/tuner/auto_share.hpp): bundles[0]'s GPU share is each trial's
  // from the measurements; card_memory is the smallest card's; max_concurrent the
  // user's cap on trials at once (0: what the cluster holds at the share).
  std::optional<auto_share_options> auto_packing;
  int64_t card_memory = 0;
  int max_concurrent = 0;
  // Each trial's folder gets its results as TensorBoard's events, progress.csv and
  // result.json (tune/tuner/trial_logs.hpp); and these sinks (trackers) get them too.
  bool trial_files = true;
  std::vector<std::shared_ptr<trial_sink>> sinks;
  // User code in the decisions (tune/tuner/hooks.hpp, controller_hooks.cpp): the host that
  // runs it (none: no user code). The engine's hooks_* options say what it answers.
  std::shared_ptr<hook_host> hooks;
  // Where a C++ program's searcher keeps its state (the hooks' save), for a resume.
  std::string hooks_state_file;
  std::chrono::milliseconds hooks_save_every{10000};
  // Which checkpoint copies of each trial the experiment folder keeps.
  checkpoint_rules checkpoints;
  // Lines for the program's standard error beside the progress (trials' output with
  // log_to_driver, each result with show_results), on the controller's thread.
  std::function<void(const std::string&)> on_output;
  bool log_to_driver = false;
  bool show_results = false;
};

struct experiment_summary {
  double wall_s = 0;
  int trials = 0, terminated = 0, errored = 0;
  int64_t results = 0;    // stored
  int64_t ingested = 0;   // result events the controller handled
  double controller_cpu_s = 0;  // CPU time of the controller's own thread
};

struct controller_setup {
  head_iface head;
  std::string token;
  caf::actor programs;                         // serves opt.program to nodes
  std::chrono::milliseconds request_timeout{10000};
  experiment_engine* engine = nullptr;         // both outlive the controller
  experiment_store* store = nullptr;
  experiment_run_options options;
  // Called once, from the controller's thread, when the experiment is over (or failed).
  std::function<void(expected<experiment_summary>)> on_done;
  // A resumed experiment (tune/tuner/resume.hpp): the engine has replayed the store;
  // these are carried out first, and the checkpoint copies already in the experiment
  // folder are used for restarts.
  bool resumed = false;
  std::vector<engine_action> initial_actions;
  std::vector<result_row> replayed_results;  // what the store held (the dashboard's curves so far)
  // A head in another process: where to find it again should it die (0: in this one).
  std::string head_host;
  uint16_t head_port = 0;
  std::chrono::milliseconds head_wait{300000};
  // On a thread of its own (the store's writes block); false: on the actor system's
  // scheduler (its tests, on CAF's deterministic one).
  bool own_thread = true;
};

// Starts the controller; it begins at once and quits when done. Sending it an exit
// message (or it failing) stops the trials it runs.
caf::actor spawn_controller(caf::actor_system& sys, controller_setup setup);

// Runs one experiment to its end through `client`'s head (a controller, waited for).
expected<experiment_summary> run_experiment(cluster_client& client, experiment_engine& engine,
                                            experiment_store& store, const experiment_run_options& opt,
                                            resume_plan* resumed = nullptr);

// Ends the experiments run_experiment runs in this process, and refuses the ones asked
// for after (tune run's SIGINT or SIGTERM): each controller gets an exit message, so
// that its trials stop and its run_experiment returns an error (`why`); the store keeps
// the trials that ran as interrupted, for a resume. From any thread, not from a signal
// handler.
void interrupt_experiments(const std::string& why);

}  // namespace tune
