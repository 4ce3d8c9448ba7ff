// Where a trial's results go besides the store: its folder's files, which TensorBoard and
// the tools that read Ray Tune's files open (trial_files, on by default), and trackers
// (MLflow, Weights & Biases: tracker_sink in trackers.hpp). The controller hands every
// sink each trial's start, results and end, and flushes them with the store's batches.
//
// A sink never fails an experiment: what it cannot do becomes a warning (take_warnings)
// that the controller records as an event and says on standard error; the store holds
// every result whatever the sinks did.
#pragma once

#include <cstdint>
#include <cstdio>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/status.hpp"
#include "tune/tuner/tb_events.hpp"
#include "tune/tuner/trial_state.hpp"

namespace tune {

// One result as the sinks see it: its metrics as JSON text (an object), and its numbers
// by name (nested objects' numbers as "outer/inner"; booleans and text are not numbers).
// `parsed`, when given, is the same object parsed (a result with values that are not
// numbers), so that the files can show its text too.
struct logged_result {
  int64_t iteration = 0;
  double time = 0;  // when it was received, seconds since the epoch
  std::string_view metrics_json;
  std::span<const std::string> names;
  std::span<const double> values;
  const nlohmann::json* parsed = nullptr;
};

// The numbers of a metrics object, flattened ("a": {"b": 1} is "a/b"), for logged_result.
void numbers_of(const nlohmann::json& metrics, std::vector<std::string>& names, std::vector<double>& values);

// Where a trial can be seen besides libtune: its TensorBoard folder, its tracker's run
// (the dashboard links to them).
struct trial_link {
  std::string trial;
  std::string kind;  // "tensorboard", "mlflow", "wandb"
  std::string id;    // the tracker's run id (empty for a folder)
  std::string url;   // the run's page, or the folder / store it is in
};

class trial_sink {
 public:
  virtual ~trial_sink() = default;
  // The trial starts (again, after a pause, a move or a failure: the same trial).
  virtual void started(const std::string& trial, const nlohmann::json& config, double time) = 0;
  virtual void result(const std::string& trial, const logged_result& r) = 0;
  // Its process ended: `state` is where it stands now (terminated or error: for good).
  virtual void ended(const std::string& trial, trial_state state, const std::string& error, double time) = 0;
  // A copy of its checkpoint is complete in the experiment folder.
  virtual void checkpoint(const std::string&, int64_t, const std::string&) {}
  // Writes out what is buffered (the controller calls it with each batch of the store).
  virtual void flush() = 0;
  // The experiment is over; `best`: its best trial (empty: none).
  virtual void experiment_ended(const std::string& best, double time) = 0;
  // Links made since the last call.
  virtual std::vector<trial_link> take_links() { return {}; }
  // What went wrong since the last call, each said once.
  std::vector<std::string> take_warnings() { return std::exchange(warnings_, {}); }

 protected:
  void warn(std::string what) { warnings_.push_back(std::move(what)); }

 private:
  std::vector<std::string> warnings_;
};

// Each trial's folder <experiment>/trials/<trial>/ (beside its stderr file), as Ray Tune
// writes its trials' folders:
//   params.json          its configuration
//   progress.csv         one row per result: its metrics (the first result's names are
//                        the columns), timestamp, training_iteration, trial_id
//   result.json          one JSON object per line per result: its metrics, the same three
//   events.out.tfevents.*  TensorBoard's: each numeric metric a scalar at its iteration,
//                        and the HParams view's session (the configuration as its
//                        hyperparameters, how it ended), so `tensorboard --logdir
//                        <experiment>` shows every trial's curves and the table
// A trial's files are open from its first result to its process's end; one that starts
// again appends to its CSV and JSON lines and writes a new event file beside its last.
// One that ends for good without a result still gets its folder and HParams session.
class trial_files final : public trial_sink {
 public:
  explicit trial_files(std::string experiment_dir);
  ~trial_files() override;
  static std::string folder(const std::string& experiment_dir, const std::string& trial) {
    return experiment_dir + "/trials/" + trial;
  }

  void started(const std::string& trial, const nlohmann::json& config, double time) override;
  void result(const std::string& trial, const logged_result& r) override;
  void ended(const std::string& trial, trial_state state, const std::string& error, double time) override;
  void flush() override;
  void experiment_ended(const std::string&, double) override { flush(); }
  size_t open_trials() const { return open_.size(); }
  std::vector<trial_link> take_links() override { return std::exchange(links_, {}); }

 private:
  struct open_trial;
  open_trial* open(const std::string& trial, double time);
  status open_files(open_trial& t, const std::string& trial, const nlohmann::json* config, double time);
  void broken(const std::string& trial, const std::string& what);
  void layout_for(open_trial& t, const logged_result& r);
  void start_csv(open_trial& t, const logged_result& r);
  void close(const std::string& trial);

  std::string dir_, host_;
  std::map<std::string, std::unique_ptr<open_trial>> open_;
  // Trials started and not open yet: their configuration and start. A trial's files are
  // opened by its first result (a trial waiting for its placement holds no files).
  std::map<std::string, std::pair<nlohmann::json, double>> starts_;
  std::vector<trial_link> links_;       // each trial's folder, when first opened
  std::map<std::string, bool> failed_;  // trials whose files could not be written (said once)
};

// Another sink's work on a thread of its own: starts, results and ends are queued (their
// text and numbers copied into a batch's pools, a result's names shared while they stay
// the same), handed over at each flush and carried out in order there, so the
// controller's thread only copies. A batch that grows past 64 MiB while the thread is
// still writing the last waits for it (the disk's pace, nothing lost). Warnings and links
// come back through take_warnings and take_links; experiment_ended waits for all of it.
class background_sink final : public trial_sink {
 public:
  explicit background_sink(std::unique_ptr<trial_sink> inner);
  ~background_sink() override;
  background_sink(const background_sink&) = delete;
  background_sink& operator=(const background_sink&) = delete;

  void started(const std::string& trial, const nlohmann::json& config, double time) override;
  void result(const std::string& trial, const logged_result& r) override;
  void ended(const std::string& trial, trial_state state, const std::string& error, double time) override;
  void checkpoint(const std::string& trial, int64_t iteration, const std::string& folder) override;
  void flush() override;
  void experiment_ended(const std::string& best, double time) override;
  std::vector<trial_link> take_links() override;

 private:
  struct batch;
  void run();
  void hand_over(bool wait);

  std::unique_ptr<trial_sink> inner_;
  std::unique_ptr<batch> filling_;   // the controller's
  std::unique_ptr<batch> handed_;    // the worker's next (null: none)
  std::vector<std::shared_ptr<const std::vector<std::string>>> names_;  // the latest names, shared
  std::mutex m_;
  std::condition_variable cv_;
  bool busy_ = false, stopping_ = false;
  std::vector<std::string> heard_;
  std::vector<trial_link> links_;
  std::thread worker_;
};

}  // namespace tune
