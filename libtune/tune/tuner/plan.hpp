// An experiment's plan: what it runs (a program, or a trainable of this program), its
// settings (tune_config), and the one check every entry point goes through. tune run's
// file (tune/run/experiment.hpp), a C++ program's tune_config and the Python API (which
// writes tune run's file) all end in make_plan, which tuner::fit() calls: a setting is
// checked in one place, whichever way it came. Pure: no cluster, no files.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tune/core/placement.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/trial/command.hpp"
#include "tune/tuner/auto_share.hpp"
#include "tune/tuner/engine.hpp"
#include "tune/tuner/hooks.hpp"
#include "tune/tuner/scheduler.hpp"
#include "tune/tuner/search.hpp"
#include "tune/tuner/space.hpp"

namespace tune {

// --- any program as a trial -------------------------------------------------------

// A program as the trial (docs/programs.md): a Python script, a shell script, any
// executable, with the same placement, isolation, GPU audit, scheduling, checkpoints and
// failover as a trainable:
//
//   tune::tuner t{cluster, tune::program{.command = {"python3", "train.py", "--lr", "${lr}"}},
//                 space, cfg};
//
// Each node that runs a trial of it gets `working_dir` by content (SHA-256 per file,
// cached per node, only missing files fetched; .git, __pycache__ and the patterns of a
// .tuneignore file left out) and runs `command` — an argv, never through a shell — in a
// copy of its own. The trial gets its configuration from the environment (Python:
// `import libtune`, put on its PYTHONPATH by the node; libtune.config()), from ${name}
// placeholders in the command or appended --key value pairs, and reports with
// libtune.report() or through lines of its output that match `metric_patterns`.
struct program {
  std::vector<std::string> command{};
  std::string working_dir = ".";                // shipped to the nodes; "" : nothing shipped (the
                                                // trial runs in its own folder)
  uint64_t working_dir_limit = 100ull << 20;    // bytes; a larger folder is refused, naming its largest files
  // Each trial runs in working_dir itself, not in a copy: a script's relative paths out of
  // its folder (../data) work as when you run it yourself. One machine only (an embedded
  // cluster, or one whose nodes all run here), and trials at once share the folder.
  bool in_place = false;
  std::map<std::string, std::string> env{};     // added to the trial's environment
  std::vector<std::string> forward_env{};       // names whose values are taken from this process
  config_args args = config_args::none;         // append: --key value for each configuration value
  std::vector<std::string> metric_patterns{};   // RE2 patterns read from its standard output
                                                // (tune/trial/output_metrics.hpp)
};

struct random_search_alg {  // random search (grid_search domains expanded, Ray's default)
  std::vector<config> points_to_evaluate = {};  // run first (whole or partial configs)
};
struct grid_search_alg {};    // every grid point, num_samples times; random domains are an error
using tpe_search = tpe_options;  // TPE (metric_mode, num_samples and seed are the experiment's)
using gp_search = gp_options;    // GP-based Bayesian optimisation (the same three are the experiment's)
using bohb_search = bohb_options;  // BOHB: TPE per budget, with scheduler = hyperband{} (the same)
// Or a searcher of the user's own (tune/tuner/hooks.hpp): run where hooks run, asked for
// each new trial's configuration.
using search_spec = std::variant<random_search_alg, grid_search_alg, tpe_search, gp_search, bohb_search,
                                 std::shared_ptr<searcher>>;

enum class progress_style { automatic, table, lines, none };  // automatic: table on a terminal

// One amount of a resource set: a number, or "auto" for the GPU (auto-packing).
struct amount {
  amount(double v) : value(v) {}
  amount(int v) : value(v) {}
  amount(const char* t) : text(t ? t : "") {}
  double value = 0;
  std::string text;  // not empty: a word instead of a number
};

// A resource set from {"gpu": 0.25, "cpu": 1}; a bad one is an error at fit().
// {"gpu": "auto"}: auto-packing (tune_config::auto_packing): the first trial probes on
// a share, and later trials get the smallest share that holds what it was measured to
// use, plus a margin (docs/auto_packing.md).
struct resources {
  resources() = default;
  resources(std::initializer_list<std::pair<std::string_view, amount>> values);
  resources(resource_set r) : set(std::move(r)) {}
  std::optional<resource_set> set;
  bool gpu_auto = false;
  std::string error;
};

// Which checkpoints of each trial the experiment folder keeps (Ray's CheckpointConfig):
// the num_to_keep best by score_attribute (the newest when none; 0: every one). A
// checkpoint a trial reported is kept until this rule removes it.
struct checkpoint_rules {
  int num_to_keep = 0;
  std::string score_attribute;
  tune::mode score_order = tune::mode::max;
};

// What the Python driver that started this experiment serves of its decisions
// (docs/hooks.md): it holds the user's code and answers over the socket `fd`.
struct driver_hooks {
  int fd = -1;                  // -1: no driver
  hook::interest serves;
  std::string searcher;         // the name of its searcher (suggests), for the store and messages
  std::string scheduler;        // of its scheduler (schedules)
  double timeout_s = 600;       // a hook that does not answer this long ends the experiment, named
  std::string state_file;       // where it keeps its hooks' state (a resumed experiment's)
};

// A trial of several worker processes (data-parallel training: docs/workers.md): `count`
// workers, each in a bundle of its own of `resources`, the bundles placed together by the
// experiment's strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD); each worker runs the
// trial's program with PyTorch's rendezvous in its environment (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR, MASTER_PORT; torchrun's names).
// Rank 0's results are the trial's; a worker that fails ends them all.
struct worker_group {
  int count = 1;
  resources per_worker = {{"cpu", 1}};
  // A gang whose workers have not all joined this long after they started is ended,
  // naming the ranks that did not; 0: no limit. A worker joins by saying so on its report
  // channel (libtune.train.torch's TorchTrainer does once its process group is made) or
  // by reporting anything.
  double join_timeout_s = 0;
};

struct tune_config {
  std::string metric;                     // the reported metric to tune
  tune::mode mode = tune::mode::max;
  // Several objectives instead: {{"acc", tune::mode::max}, {"latency_ms", tune::mode::min}}
  // (then metric and mode are the first's; the schedulers and stop criteria use it).
  // TPE models them all (MOTPE); result_grid::pareto_front() has the trials no other
  // beats in every one. Random and grid search run as usual; the GP and BOHB refuse.
  std::vector<objective> metrics;
  // Metrics that must be <= 0 for a trial to count (e.g. "memory_gib - 8" reported as
  // its own metric): TPE avoids where they are not met, an infeasible trial is never
  // the best nor on the front, and a trial that never reports one ends in error.
  std::vector<std::string> constraints;
  int num_samples = 1;                    // trials (× grid points for random search)
  int max_concurrent_trials = 0;          // 0: as many as the cluster holds at once
  resources resources_per_trial = {{"cpu", 1}};
  std::vector<resources> bundles;         // several bundles per trial (then not resources_per_trial)
  tune::strategy strategy = tune::strategy::pack;  // for several bundles, or workers
  // Several worker processes per trial, each in its own bundle (then neither bundles nor
  // resources_per_trial): e.g. worker_group{4, {{"gpu", 1}, {"cpu", 4}}}.
  std::optional<worker_group> workers;
  stop_criteria stop;                     // max_iterations, metric_threshold
  // Stoppers (tune/tuner/stoppers.hpp): libtune's (maximum_iteration_stopper,
  // trial_plateau_stopper, experiment_plateau_stopper, timeout_stopper, metric_at_least)
  // and your own (std::make_shared<my_stopper>()).
  std::vector<stopper_spec> stoppers;
  // Experiment and trial events (tune::callback): yours, run on libtune's hook thread.
  std::vector<std::shared_ptr<callback>> callbacks;
  // Each trial's resources as a function of its configuration (instead of the same
  // resources_per_trial for all); a request that is not valid, or can never fit, is
  // that trial's error.
  std::function<resources(const config&)> resources_fn;
  checkpoint_rules checkpoints;
  // Every trial's standard output and error on this program's standard error, each line
  // prefixed with the trial (Ray's log_to_driver); and each result as a line (Ray's
  // verbose=2).
  bool log_to_driver = true;
  bool show_results = false;
  driver_hooks driver;                    // tune run's, for a Python driver
  std::optional<double> time_budget_s;    // the whole experiment
  scheduler_spec scheduler = fifo{};
  search_spec search = random_search_alg{};
  uint64_t seed = 0;
  std::string name = "experiment";
  std::string experiment_dir;             // default: ./tune_results/<name>-<UTC time>
  progress_style progress = progress_style::automatic;
  double group_timeout_s = 600;           // a trial whose group is not placed by then fails
  double stop_grace_s = 10;               // a stopped trial's time to end before it is killed
  int max_failures = 0;                   // a trial that fails (its process crashed, its node
                                          // was lost) is started again this often, on any
                                          // node, from its latest checkpoint
  bool auto_rebalance = false;            // when nodes join or leave, ask the head to even the
                                          // GPU load (trials move, from their checkpoints)
  double min_move_interval_s = 60;        // a trial moves at most this often
  bool standby_copies = true;             // each trial's newest checkpoint copy is also
                                          // fetched ahead of time by another node, where a
                                          // restart after its node's death goes (no fetch
                                          // then); costs one more transfer per copy
  bool reuse_workers = false;             // a C++ trainable's worker whose trial ended well
                                          // runs the next trial placed on the same cards
                                          // (same node, shares and limits) in the same
                                          // process: no new process, CUDA context or library
                                          // set-up (docs/trials.md, "Reused workers")
  bool trial_files = true;                // each trial's folder (trials/<id>/) gets its results as
                                          // TensorBoard's event files, progress.csv and
                                          // result.json, and its params.json (docs/tracking.md)
  // Trackers (docs/tracking.md): each trial a run of MLflow, of Weights & Biases; null:
  // not used, an object: the tracker's options (tracker_keys), {} for its defaults.
  // tracker_python: the interpreter that has mlflow / wandb installed.
  nlohmann::json mlflow;
  nlohmann::json wandb;
  std::string tracker_python = "python3";
  // With resources_per_trial = {gpu: "auto"}: how the share is measured and sized
  // (margin over the measured peak, the probes' share and count, the least share).
  auto_share_options auto_packing;
  bool resume = false;                    // continue the experiment in experiment_dir (its
                                          // program died): completed trials and stored
                                          // results are kept, what ran starts again from its
                                          // latest checkpoint. `tune resume DIR` runs the
                                          // program again with TUNE_RESUME_DIR=DIR, which
                                          // does the same.
};

// A tracker's options: their names, and for each what it takes ("text", "true or false",
// "a mapping of text", "a list of text", "seconds > 0", or "online, offline or disabled").
const std::vector<std::pair<std::string, std::string>>& tracker_keys(std::string_view tracker);
// `options` for tracker "mlflow" or "wandb": an object of its keys, each of its type (the
// error names the key and what to give).
status check_tracker(std::string_view tracker, const nlohmann::json& options);

// Checks metrics and constraints (duplicates, a metric that disagrees with metrics, a
// search that cannot model them) and makes the first objective the metric and mode,
// TPE's directions all of them. make_plan calls it; a program may, to know its metric first.
status resolve_objectives(tune_config& c);

// --- the plan -----------------------------------------------------------------------

// A checked experiment: its settings with their objectives resolved, and the bundles
// each trial asks for.
struct experiment_plan {
  tune_config config;                 // resolve_objectives applied
  std::vector<resource_set> bundles;  // resources_per_trial, or bundles; with gpu "auto" the
                                      // probe's share (auto_packing.probe_share)
  bool gpu_auto = false;              // resources_per_trial's gpu is "auto" (auto-packing)
  uint32_t world_size = 0;            // workers per trial (a bundle each); 0: one process
};

// Checks `c` (objectives, num_samples, max_concurrent_trials, max_failures, the timeouts,
// each bundle, the stoppers, the checkpoint rules, the hooks) and makes its plan; the error
// names the setting and what to give.
expected<experiment_plan> make_plan(tune_config c);

// The user code of the plan as C++ hooks (none: it has none, or its hooks are a Python
// driver's). `saved_state`: a resumed experiment's searcher state.
std::optional<local_hooks_setup> local_hooks_of(const experiment_plan& plan, std::string saved_state = {});
// A trial's own resources as the hooks gave them (null: the experiment's; an object of
// amounts; {"bundles": [...], "strategy": "pack"}), checked as the plan's bundles are:
// the error names `trial` and what is wrong.
expected<std::optional<trial_resources>> trial_resources_of(const nlohmann::json& resources, const std::string& trial);
// A searcher's configuration made the trial's (the space's constants added, each value
// it gives checked against its domain): accept_suggestion of the engine's options.
std::function<expected<config>(const config&)> suggestion_check(const search_space& space);

// The plan's search algorithm over `space` (the search's own options, with the
// experiment's mode, num_samples and seed), and its scheduler's spec (PBT's seed, when
// not its own, the experiment's). A searcher of the user's own (or the driver's) is a
// stand-in that the engine does not ask (its configurations come from the hooks).
expected<std::unique_ptr<search_algorithm>> make_search(const experiment_plan& plan, const search_space& space);
scheduler_spec scheduler_of(const experiment_plan& plan);

// "auto", "table", "lines" or "none" (tune run's progress: and --progress); nothing for
// another text.
std::optional<progress_style> parse_progress_style(const std::string& text);

}  // namespace tune
