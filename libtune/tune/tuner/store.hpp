// The experiment store: one experiment directory with an SQLite database
// (`experiment.db`: the experiment's settings, its trials with their configurations,
// states and errors, every reported result, and events) and checkpoints as files
// (`checkpoints/<trial>/`). Writes are transactions, so a process killed at any point
// leaves a consistent database; a result whose add returned is on disk (WAL,
// synchronous=FULL). Results are keyed by (trial, iteration): the same result
// delivered twice is stored once.
//
// One process writes an experiment at a time (the driver); others may read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/status.hpp"
#include "tune/tuner/trial_state.hpp"

struct sqlite3;

namespace tune {

struct trial_row {
  std::string id;
  nlohmann::json config;
  trial_state state = trial_state::pending;
  std::string error;  // why it failed (state error)
  nlohmann::json info = nlohmann::json::object();  // node, pid, GPUs, peak memory, ...
  double created = 0, updated = 0;                 // seconds since the epoch
};

struct result_row {
  std::string trial;
  int64_t iteration = 0;
  double time = 0;  // when it was reported, seconds since the epoch
  nlohmann::json metrics;
};

// A result whose metrics are already JSON text (an object): what the controller writes.
struct encoded_result {
  std::string trial;
  int64_t iteration = 0;
  double time = 0;
  std::string metrics;
};

struct event_row {
  int64_t seq = 0;
  double time = 0;
  std::string trial;  // empty: about the experiment
  std::string kind;
  nlohmann::json body;
};

class experiment_store {
 public:
  // Opens the experiment in `dir` (created, with its database, when new). Errors say
  // what is wrong with the directory or the database and what to do.
  static expected<std::unique_ptr<experiment_store>> open(const std::string& dir);
  ~experiment_store();
  experiment_store(const experiment_store&) = delete;
  experiment_store& operator=(const experiment_store&) = delete;

  const std::string& dir() const { return dir_; }
  std::string database_path() const { return dir_ + "/experiment.db"; }
  // <dir>/checkpoints/<trial> (not created).
  std::string checkpoint_dir(const std::string& trial) const;
  // <dir>/trials/<trial>/stderr: the end of a failed trial's standard error, as it
  // wrote it (not created; the controller writes it when the trial fails).
  std::string stderr_path(const std::string& trial) const { return dir_ + "/trials/" + trial + "/stderr"; }

  // Settings of the experiment (metric, mode, search space, ...), by key.
  status set_meta(const std::string& key, const nlohmann::json& value);
  expected<nlohmann::json> meta(const std::string& key) const;  // null when absent

  status add_trial(const std::string& id, const nlohmann::json& config, trial_state state = trial_state::pending);
  // A new state; the error for state error; `info` merged into the trial's info.
  status update_trial(const std::string& id, trial_state state, const std::string& error = {},
                      const nlohmann::json& info = nlohmann::json::object());
  // The same with the state by its name (from outside: a tool, a test): an unknown name
  // is refused.
  status add_trial(const std::string& id, const nlohmann::json& config, std::string_view state);
  status update_trial(const std::string& id, std::string_view state, const std::string& error = {},
                      const nlohmann::json& info = nlohmann::json::object());
  // All in one transaction, or none. How many were new (a (trial, iteration) already
  // stored is left as it is). Results of unknown trials are an error (nothing stored).
  expected<size_t> add_results(const std::vector<result_row>& rows);
  expected<size_t> add_results(const std::vector<encoded_result>& rows);
  status add_event(const std::string& trial, const std::string& kind, const nlohmann::json& body);

  // A batch: every write from begin_batch to end_batch is one transaction (one sync to
  // disk instead of one per write; a crash keeps all of it or none). add_results stays
  // all or none inside it. The controller commits one every 50 ms.
  status begin_batch();
  status end_batch();
  bool in_batch() const { return batch_; }

  expected<std::vector<trial_row>> trials() const;
  expected<trial_row> trial(const std::string& id) const;
  expected<std::vector<result_row>> results(const std::string& trial = {}) const;  // by trial, iteration
  // The same one row at a time (a trial with millions of results is never all in memory).
  status for_each_result(const std::function<void(const result_row&)>& f, const std::string& trial = {}) const;
  expected<std::vector<event_row>> events(const std::string& trial = {}) const;
  expected<int64_t> result_count() const;

  static constexpr int schema_version = 1;

 private:
  experiment_store() = default;
  status exec(const std::string& sql) const;
  status fail(const std::string& what) const;

  std::string dir_;
  sqlite3* db_ = nullptr;
  bool batch_ = false;
};

}  // namespace tune
