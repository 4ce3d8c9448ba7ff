// Reused workers (docs/trials.md, "Reused workers"): a C++ trainable's worker that
// finished its trial well can run the experiment's next trial in the same bundle shape
// on the same node, with its CUDA context, its libraries' handles and its loaded data
// still there (Ray Tune's reuse_actors). Nothing is weakened: the next trial gets the
// worker only if it would have been started exactly the same way (same program and
// arguments, same account, same cards and shares, same host limits, the same
// environment but for the trial's own variables), and the worker's cgroup held nothing
// else. The placement group still goes back to the head after each trial; the worker
// waits (a short linger) for whatever the head places next on its cards.
//
// The protocol, between the node and a worker started with TUNE_REUSE_DIR:
//   - the worker, its trainable returned, writes {"type":"idle"} on its report channel
//     and waits for <TUNE_REUSE_DIR>/next.json (inotify), at most TUNE_REUSE_WAIT_MS;
//     none: it exits 0;
//   - the node, for the next trial, writes next.json (its whole environment and its
//     working directory; written to a temporary name, then renamed);
//   - the worker takes it (removes it), sets exactly that environment, changes to that
//     folder, forgets an earlier stop request, writes {"type":"adopted"} and runs the
//     trainable again. The node sends no stop signal for the new trial before it has
//     read that line (a stop meant for the last trial must not stop the next one, nor
//     the next one's be forgotten).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <condition_variable>

#include "tune/core/status.hpp"
#include "tune/trial/cgroup.hpp"
#include "tune/trial/process.hpp"

namespace tune::reuse {

inline constexpr const char* idle_line = R"({"type":"idle"})";
inline constexpr const char* adopted_line = R"({"type":"adopted"})";
inline constexpr const char* next_file = "next.json";

// --- the worker's side -------------------------------------------------------------

struct next_trial {
  std::map<std::string, std::string> env;
  std::string cwd;
};

// Waits up to `wait` for the next trial in `dir` and takes it (the file is removed).
// nullopt: none came in time (or the folder is gone: the node ended the wait). An
// error: the file was there and is not a next trial.
expected<std::optional<next_trial>> wait_for_next(const std::string& dir, std::chrono::milliseconds wait);
// The process's environment becomes exactly `n.env`, its working directory `n.cwd`.
status apply(const next_trial& n);

// --- the node's side ---------------------------------------------------------------

// What must be equal for a worker to be reused: everything its start depends on but the
// trial's own variables (trial id, folder, configuration, checkpoint to start from, home
// when that is its folder).
std::string key_of(const process_spec& spec, const std::string& experiment, const host_limits& limits);
// The per-trial variables key_of leaves out.
bool per_trial_variable(const std::string& name);

struct idle_worker {
  std::string key;
  std::set<std::string> cards;  // UUIDs (logical ones too)
  std::unique_ptr<worker_process> process;
  std::unique_ptr<trial_cgroup> cgroup;
  std::string dir;  // its TUNE_REUSE_DIR
  std::string trial_id;  // the trial it ran last
  host_usage used;       // what its cgroup had counted by then (the next trial's start)
  std::chrono::steady_clock::time_point until;
};

// The node's idle workers. A thread ends those whose linger is over (or that ended):
// their process group is killed and reaped, their cgroup emptied and removed, their
// folder removed.
class idle_pool {
 public:
  explicit idle_pool(std::chrono::milliseconds linger);
  ~idle_pool();  // ends every idle worker
  idle_pool(const idle_pool&) = delete;
  idle_pool& operator=(const idle_pool&) = delete;

  std::chrono::milliseconds linger() const { return linger_; }
  void keep(idle_worker w);
  // The one whose key is `key` that has waited least (nullopt: none).
  std::optional<idle_worker> take(const std::string& key);
  // Ends, and waits for the end of, every idle worker on any of `cards` whose key is
  // not `key`: whatever starts on those cards next does not share them with a worker
  // that no trial holds.
  void evict(const std::string& key, const std::set<std::string>& cards);
  size_t size();
  // Ends one (its process, cgroup and folder).
  static void end(idle_worker& w);

 private:
  void reap_loop();
  std::chrono::milliseconds linger_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<idle_worker> idle_;
  bool stopping_ = false;
  std::thread reaper_;
};

// Hands `w` the next trial (`spec`'s environment and folder): writes next.json (call it
// as the worker's account: tune/trial/account.hpp's as_account). False (and why) when
// it could not.
status hand_over(const idle_worker& w, const process_spec& spec);

}  // namespace tune::reuse
