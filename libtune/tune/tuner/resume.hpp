// Resuming an experiment whose driver (the tuning program) died: its engine is rebuilt
// from the experiment's store by replaying what happened, in the order it happened —
// the starts the engine decides again, every stored result, checkpoint and trial end —
// so that the search, the scheduler and every trial's state are as they were. Trials
// that were running when the driver died (their processes went with its placement
// groups) start again from their latest checkpoint, not counted as failures; results
// they report again up to what is stored are not counted twice.
//
// The engine must be new and made with the experiment's own settings (search, seed,
// scheduler, metric, concurrency): a trial the replay starts with a configuration other
// than the stored one is an error that says so (the program or its settings changed).
#pragma once

#include <vector>

#include "tune/tuner/engine.hpp"
#include "tune/tuner/store.hpp"

namespace tune {

struct resume_plan {
  std::vector<engine_action> actions;  // to carry out now: starts (restarts and new trials), stops
  int64_t replayed_results = 0;
  int finished_trials = 0;     // ended before the driver died
  int interrupted_trials = 0;  // were running: start again from their checkpoints
  std::vector<result_row> results;  // the stored results the replay read (by trial, iteration)
};

expected<resume_plan> replay_experiment(experiment_engine& engine, const experiment_store& store);

}  // namespace tune
