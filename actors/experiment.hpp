// Runs one experiment on a cluster: carries out what the experiment engine
// (tune/tuner/engine.hpp) decides — a placement group and a trial per start; stop and
// pause both end the process and give the group back (a paused trial gets a new group
// when it resumes, from its checkpoint: on the same node only until checkpoints move
// between nodes, issue 7) — feeds it the trials' events, writes everything to the
// experiment store, and reports progress. Synchronous: it returns when the engine says
// the experiment is finished.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "client.hpp"
#include "tune/tuner/engine.hpp"
#include "tune/tuner/progress.hpp"
#include "tune/tuner/store.hpp"

namespace tune {

struct experiment_run_options {
  std::string name = "experiment";
  program_ref program;                 // the trainable, served by the client
  std::vector<resource_set> bundles;   // what each trial needs (its placement group)
  strategy strat = strategy::pack;
  std::chrono::milliseconds stop_grace{10000};
  std::chrono::milliseconds group_timeout{60000};  // for a trial's group to be placed
  // Called with a snapshot whenever something changed (at most every `progress_every`).
  std::function<void(const progress_snapshot&)> on_progress;
  std::chrono::milliseconds progress_every{500};
};

struct experiment_summary {
  double wall_s = 0;
  int trials = 0, terminated = 0, errored = 0;
  int64_t results = 0;  // stored
};

expected<experiment_summary> run_experiment(cluster_client& client, experiment_engine& engine,
                                            experiment_store& store, const experiment_run_options& opt);

}  // namespace tune
