// Trackers: each trial of an experiment as a run of MLflow and/or Weights & Biases
// (docs/tracking.md). One implementation for tune run, the Python API and the C++ API:
// the engine starts the trackers' bridge, `python -m libtune.integrations._bridge` (the
// Python package built into libtune, written to <experiment>/trackers/python), with the
// interpreter that has mlflow or wandb installed, and writes it every trial's start,
// results, checkpoints and end as JSON lines; the bridge calls the trackers' own clients.
//
// Nothing here can fail or slow the experiment: lines are queued for a writer thread
// (the controller never waits for Python); a Python, a package or a server that is not
// there is a warning naming it; the bridge's own log is <experiment>/trackers/bridge.log.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/tuner/trial_logs.hpp"

namespace tune {

struct tracker_setup {
  std::string python = "python3";     // the interpreter (tune_config::tracker_python)
  nlohmann::json mlflow, wandb;       // each tracker's options (null: not used)
  std::string experiment;             // its name (the trackers' default experiment/project)
  std::string experiment_dir;
  std::string run_key;                // unique to this experiment (W&B's run ids)
  double close_timeout_s = 120;       // for the trackers to finish writing at the end
};

// The trackers a setup names ("MLflow, Weights & Biases"), for messages.
std::string tracker_names(const tracker_setup& s);

class tracker_sink final : public trial_sink {
 public:
  // Starts the bridge. One that cannot start is a warning (take_warnings), and the sink
  // then does nothing.
  static std::shared_ptr<tracker_sink> start(tracker_setup setup);
  ~tracker_sink() override;
  tracker_sink(const tracker_sink&) = delete;
  tracker_sink& operator=(const tracker_sink&) = delete;

  void started(const std::string& trial, const nlohmann::json& config, double time) override;
  void result(const std::string& trial, const logged_result& r) override;
  void ended(const std::string& trial, trial_state state, const std::string& error, double time) override;
  void checkpoint(const std::string& trial, int64_t iteration, const std::string& folder) override;
  void flush() override;
  // Tags the best trial, closes the bridge and waits for it (at most close_timeout_s).
  void experiment_ended(const std::string& best, double time) override;
  std::vector<trial_link> take_links() override;

 private:
  explicit tracker_sink(tracker_setup s) : setup_(std::move(s)) {}
  void send(std::string line, bool droppable = false);
  void write_loop();
  void read_loop();
  void stop_child();

  tracker_setup setup_;
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;  // the bridge's standard input (we write), output (we read)
  std::thread writer_, reader_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool closing_ = false, dropped_ = false;
  std::vector<std::string> heard_;   // warnings from the bridge, for the controller's thread
  std::vector<trial_link> links_;    // runs it made
  std::map<std::string, std::string> ids_;  // trial -> its id as JSON text
};

}  // namespace tune
