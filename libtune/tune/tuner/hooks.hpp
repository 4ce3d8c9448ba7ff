// User code in the engine's decisions: the extension points that the controller
// consults at defined moments (docs/hooks.md). Pure: no CAF.
//
// What a tuning script may bring (tune_config, tune/tuner/plan.hpp):
//   callback        experiment and trial events; a result's flags (should_checkpoint)
//   stopper         per result, and for the whole experiment (tune/tuner/stoppers.hpp)
//   searcher        the configurations (suggest, on_trial_result, on_trial_complete,
//                   save, restore); libtune's own random, grid, TPE, GP and BOHB are the
//                   default and need none of this
//   user_scheduler  CONTINUE, PAUSE or STOP per result; which paused trial resumes
//   resources_fn    each trial's resources as a function of its configuration
//   explore_fn      PBT's custom explore, and sample functions in its mutations
//
// Where user code runs: never on the controller's thread. A hook host runs it and
// answers asynchronously; the engine goes on meanwhile, so a slow hook delays only what
// waits on it (a trial's start waits for its configuration, a stop for its decision).
// Two hosts speak the same protocol (hook::event in, hook::answer out):
//   local_hooks (below)   a thread of this process, running C++ objects
//   driver_link           the Python driver's process, over a socket (driver_link.hpp)
// With no user code given, there is no host and nothing here costs anything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/status.hpp"
#include "tune/tuner/common.hpp"
#include "tune/tuner/space.hpp"
#include "tune/tuner/stoppers.hpp"
#include "tune/tuner/trial_state.hpp"

namespace tune {

// What a hook sees of a trial: a snapshot, kept up to date by the host from the
// engine's events.
struct trial_info {
  std::string id;
  config cfg = config::object();
  trial_state state = trial_state::pending;
  int64_t iteration = 0;                       // its latest result's
  nlohmann::json last_result;                  // null before its first
  std::string error;                           // in error: why
  int64_t checkpoint = -1;                     // its latest stored checkpoint's iteration
  std::string checkpoint_dir;                  // and where it is (the experiment folder's copy)
  double started = 0;                          // when it first started (seconds since the epoch)
};

// The keys of a result that callbacks may set (Ray's names).
inline constexpr const char* should_checkpoint = "should_checkpoint";

// Experiment and trial events (Ray's Callback). A result's callbacks get it as a
// mutable object: result["should_checkpoint"] = true asks the trial for a checkpoint now
// (a trainable that can make one on request: Python Trainable classes, C++ trainables
// that ask trial_context::checkpoint_requested()).
class callback {
 public:
  virtual ~callback() = default;
  struct experiment_info {
    std::string name, dir, metric;
    tune::mode mode = tune::mode::max;
    int num_samples = 1;
    bool resumed = false;
  };
  virtual void setup(const experiment_info&) {}
  virtual void on_trial_start(const trial_info&) {}
  virtual void on_trial_restore(const trial_info&) {}  // started again from its checkpoint
  virtual void on_trial_result(const trial_info&, nlohmann::json& result) { (void)result; }
  virtual void on_trial_save(const trial_info&) {}     // a checkpoint of it is stored (checkpoint_dir)
  virtual void on_trial_complete(const trial_info&) {}
  virtual void on_trial_recover(const trial_info&) {}  // failed, and starts again (max_failures)
  virtual void on_trial_error(const trial_info&) {}
  virtual void on_experiment_end(const std::vector<trial_info>&) {}
  virtual std::string name() const { return "callback"; }
};

// What the experiment gives its searcher before the first suggest (Ray's
// set_search_properties): the metric and mode (metrics: every objective, the first
// being metric's; constraints: metrics that must be <= 0), the space that tune::tuner
// was given, num_samples (the engine asks no more than that many configurations) and the
// experiment's seed.
struct search_properties {
  std::string metric;
  tune::mode mode = tune::mode::max;
  std::vector<objective> metrics;
  std::vector<std::string> constraints;
  search_space space;
  int num_samples = 1;
  uint64_t seed = 0;
};

// The configurations (Ray's Searcher). suggest() answers a configuration for the new
// trial, nothing (wait: asked again once something changes), or, once finished() is
// true, nothing ever again. The configuration's parameters that the experiment's space
// declares must lie in their domains; the space's constants are added to it. Trials
// suggested and not yet completed are the pending ones: a searcher that models results
// should allow for them (libtune's TPE counts them as the worst value so far).
// libtune's own algorithms are searchers too (tune/tuner/searchers.hpp: tpe_searcher(),
// gp_searcher(), bohb_searcher(), random_searcher()), to use as they are, wrap or extend.
class searcher {
 public:
  virtual ~searcher() = default;
  // Called once, on the tuning program's thread, before anything runs; an error ends
  // fit() with it (naming the searcher) before the experiment starts.
  virtual status set_search_properties(const search_properties& p) { (void)p; return {}; }
  virtual std::optional<config> suggest(const std::string& trial_id) = 0;
  virtual bool finished() const { return false; }
  virtual void on_trial_result(const std::string& trial_id, const nlohmann::json& result) {
    (void)trial_id, (void)result;
  }
  // Its last result (null: it reported none), and whether it failed.
  virtual void on_trial_complete(const std::string& trial_id, const nlohmann::json& last_result, bool error) {
    (void)trial_id, (void)last_result, (void)error;
  }
  // Its state as bytes, kept in the experiment folder; a resumed experiment restores it.
  virtual std::string save() const { return {}; }
  virtual status restore(const std::string& state) { (void)state; return {}; }
  virtual std::string name() const { return "searcher"; }
};

// A scheduler of the user's own (Ray's TrialScheduler): a decision per result, which
// paused trial runs next.
class user_scheduler {
 public:
  virtual ~user_scheduler() = default;
  virtual void on_trial_add(const trial_info&) {}
  virtual decision on_trial_result(const trial_info&, const nlohmann::json& result) = 0;
  virtual void on_trial_complete(const trial_info&, const nlohmann::json& last_result) { (void)last_result; }
  virtual void on_trial_error(const trial_info&) {}
  // A paused trial to run again now (nothing: none), asked whenever something changed.
  virtual std::optional<std::string> choose_trial_to_resume(const std::vector<trial_info>& paused) {
    (void)paused;
    return std::nullopt;
  }
  virtual std::string name() const { return "scheduler"; }
};

// ---- the protocol between the engine and a hook host ------------------------------

namespace hook {

// Engine -> host, in the order they happened.
struct setup {  // first, once
  callback::experiment_info experiment;
  std::vector<trial_info> trials;  // a resumed experiment's, as stored
};
struct suggest {  // answer: suggestion
  std::string trial;
};
struct prepare {  // answer: prepared (the trial's final configuration, its resources)
  std::string trial;
  config cfg;
};
struct explore {  // PBT: answer explored (`cfg` with `resample` drawn, then the explore function)
  std::string trial, donor;
  config cfg;
  std::vector<std::string> resample;  // JSON pointers of the mutations to draw anew
};
struct trial_start {
  std::string trial;
  config cfg;
  int64_t restored_from = -1;  // the checkpoint's iteration, when it starts from one
};
struct result {  // its metrics as the trial reported them (a JSON object's text)
  std::string trial;
  int64_t iteration = 0;
  double time = 0;  // seconds since the epoch
  std::string metrics;
};
struct checkpoint {  // a copy stored in the experiment folder
  std::string trial;
  int64_t iteration = 0;
  std::string dir;
};
struct trial_end {  // terminated or error: for good; paused; recovering: it starts again
  std::string trial;
  trial_state state = trial_state::terminated;
  bool recovering = false;
  std::string error;
};
struct save {};  // keep the hooks' state now (the searcher's)
struct end {};   // the experiment is over: answer done
using event = std::variant<setup, suggest, prepare, explore, trial_start, result, checkpoint, trial_end, save, end>;

// Host -> engine.
struct suggestion {
  enum class kind { config, wait, finished };
  std::string trial;
  kind what = kind::wait;
  config cfg;
};
struct prepared {
  std::string trial;
  config cfg;
  nlohmann::json resources;  // null: the experiment's; an object {"cpu": 1, ...}; or
                             // {"bundles": [...], "strategy": "pack"}
  std::string error;         // not empty: the trial ends in error with it
};
struct explored {
  std::string trial;
  config cfg;
};
struct decided {
  enum class kind { stop, pause, resume, checkpoint };
  std::string trial;
  kind what = kind::stop;
  std::string reason;
};
struct stop_all {
  std::string reason;
};
struct failure {  // a hook raised or hung: the experiment ends with it
  std::string hook, trial, message, traceback;
};
struct saved {
  std::string state;  // the hooks' state (the local host's searcher), kept by the engine
};
struct done {};
using answer = std::variant<suggestion, prepared, explored, decided, stop_all, failure, saved, done>;

// Which events a host wants (the others are not sent), and which asks it answers.
struct interest {
  bool results = false;      // result events
  bool trials = false;       // trial_start, trial_end, checkpoint
  bool suggests = false;     // it holds the searcher: suggest asks
  bool prepares = false;     // each new configuration goes through it (resources, sample_from)
  bool explores = false;     // PBT's explore is finished there
  bool schedules = false;    // it holds the scheduler (its decisions; the engine's is FIFO)
  bool any() const { return results || trials || suggests || prepares || explores || schedules; }
};

// "Callback X.on_trial_result for trial-00003 raised ValueError: ..." (the failure's
// headline, without its traceback).
std::string describe(const failure& f);

}  // namespace hook

// Where user code runs. post() never blocks (events are queued); answers are taken
// with take() once `wake` was called (from the host's thread: the controller sends
// itself a message). Every ask is answered, with a failure if its hook failed.
class hook_host {
 public:
  virtual ~hook_host() = default;
  virtual const hook::interest& wants() const = 0;
  virtual std::string name() const = 0;  // "the Python driver", "this program's hooks"
  virtual status start(std::function<void()> wake) = 0;
  virtual void post(hook::event e) = 0;
  virtual std::vector<hook::answer> take() = 0;
  // Why it cannot answer any more (its process gone); empty while it can.
  virtual std::string broken() const = 0;
  // Waits up to `timeout` for the answers to everything posted (after end: done).
  virtual void drain(std::chrono::milliseconds timeout) = 0;
};

// The hooks of a C++ tuning script, run on a thread of their own.
struct local_hooks_setup {
  std::vector<std::shared_ptr<callback>> callbacks;
  std::vector<std::shared_ptr<stopper>> stoppers;
  std::shared_ptr<searcher> search;
  std::shared_ptr<user_scheduler> scheduler;
  std::function<nlohmann::json(const config&)> resources;  // the resources_fn, as JSON (plan.cpp makes it)
  std::function<config(const config&)> explore;             // PBT's custom explore
  std::map<std::string, std::function<nlohmann::json()>> samplers;  // PBT's mutations drawn by functions
  std::string saved_state;  // a resumed experiment's searcher state
};

class local_hooks final : public hook_host {
 public:
  explicit local_hooks(local_hooks_setup setup);
  // What hooks of this setup answer (wants() of the host it makes).
  static hook::interest interest_of(const local_hooks_setup& s);
  ~local_hooks() override;
  local_hooks(const local_hooks&) = delete;
  local_hooks& operator=(const local_hooks&) = delete;
  const hook::interest& wants() const override { return wants_; }
  std::string name() const override { return "this program's hooks"; }
  status start(std::function<void()> wake) override;
  void post(hook::event e) override;
  std::vector<hook::answer> take() override;
  std::string broken() const override { return {}; }
  void drain(std::chrono::milliseconds timeout) override;

 private:
  void run();
  void handle(hook::event& e, std::vector<hook::answer>& out);
  void on_result(const hook::result& r, std::vector<hook::answer>& out);
  void ask_scheduler_to_resume(std::vector<hook::answer>& out);
  template <class F>
  bool guarded(const std::string& hook, const std::string& trial, std::vector<hook::answer>& out, F&& f);
  trial_info& trial(const std::string& id);
  std::vector<trial_info> all_trials() const;

  local_hooks_setup s_;
  hook::interest wants_;
  std::function<void()> wake_;
  std::map<std::string, trial_info> trials_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<hook::event> in_;
  std::vector<hook::answer> out_;
  bool stopping_ = false, busy_ = false, failed_ = false;
  std::thread thread_;
};

}  // namespace tune
