// libtune's public API: everything a tuning script needs.
//
//   #include <tune/tune.hpp>
//
//   void train(tune::trial_context& ctx) {            // runs in its own worker process
//     double lr = ctx.number("lr").value();
//     for (int epoch = 1; epoch <= 20; ++epoch)
//       if (!ctx.report({{"acc", one_epoch(lr)}}) || tune::trial_context::should_stop()) return;
//   }
//   TUNE_TRAINABLE(train);
//
//   int main(int argc, char** argv) {
//     auto cluster = tune::init(argc, argv);           // --address HOST:PORT, or embedded
//     if (!cluster) { std::cerr << cluster.error().message() << "\n"; return 2; }
//     tune::search_space space{{"lr", tune::loguniform(1e-4, 1e-1)},
//                              {"width", tune::choice({128, 256, 512})}};
//     tune::tuner t{*cluster, "train", space,
//                   {.metric = "acc", .mode = tune::mode::max, .num_samples = 64,
//                    .resources_per_trial = tune::resources({{"gpu", 0.25}}),
//                    .scheduler = tune::asha{.max_t = 20}}};
//     auto results = t.fit();
//     if (!results) { std::cerr << results.error().message() << "\n"; return 1; }
//     if (auto best = results->best(); best && *best) std::cout << (*best)->config << "\n";
//   }
//
// Trials run the same program: the tuner serves this executable to the nodes and they
// start it as the trial's worker (`init` notices and runs the trainable instead of
// main's work). So `init` must come first in main, before anything with side effects.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tune/core/placement.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/tuner/plan.hpp"
#include "tune/trial/command.hpp"
#include "tune/trial/context.hpp"
#include "tune/tuner/auto_share.hpp"
#include "tune/tuner/engine.hpp"
#include "tune/tuner/export.hpp"
#include "tune/tuner/scheduler.hpp"
#include "tune/tuner/search.hpp"
#include "tune/tuner/searchers.hpp"
#include "tune/tuner/space.hpp"
#include "tune/tuner/store.hpp"

namespace tune {

// --- trainables -------------------------------------------------------------------

// A trainable: runs one trial in its worker process. Returning ends the trial well;
// an exception ends it in error (its message is the trial's error).
using trainable_fn = std::function<void(trial_context&)>;

// Registers `fn` under `name` (TUNE_TRAINABLE does it before main). A name used twice
// is an error at start: the program prints it and exits.
bool register_trainable(const std::string& name, trainable_fn fn);
std::vector<std::string> trainable_names();

#define TUNE_TRAINABLE(fn) [[maybe_unused]] static const bool tune_trainable_registered_##fn = ::tune::register_trainable(#fn, fn)

// --- the cluster ------------------------------------------------------------------

struct cluster_options {
  // HOST:PORT of a head. Empty: the cluster that runs on this machine, when there is one
  // (a head started here with `tune start --head`, or $TUNE_ADDRESS), as ray.init() does;
  // else an embedded cluster in this process.
  std::string address;
  bool local = false;      // an embedded cluster even when one runs on this machine
  std::string token_file;  // the cluster token (default: $TUNE_TOKEN_FILE, else ~/.tune/token)
  // For a head that uses TLS (docs/cluster.md): this process's certificate, its key and
  // the cluster's CA (defaults: $TUNE_TLS_CERT, $TUNE_TLS_KEY, $TUNE_TLS_CA; none: plain).
  std::string tls_cert, tls_key, tls_ca;
  // An embedded cluster's node (ignored with an address):
  std::optional<double> num_cpus;  // default: this machine's CPUs
  std::optional<int> num_gpus;     // default: this machine's GPUs; on a machine without
                                   // any, N logical GPUs (placement only: trials run on the CPU)
  std::string work_dir;            // programs, trial folders and the cluster's log (cluster.log);
                                   // default: a fresh folder in /tmp, removed at the end
  bool keep_work_dir = false;      // keep that default folder (its path is in description())
  int gpu_audit_ms = 200;          // the node's GPU audit (0: off); real cards only
  // Other programs on the cards (docs/gpu-sharing.md): a card where programs that are not
  // this cluster's hold more GPU memory than foreign_threshold is never given whole;
  // foreign_margin bytes are kept free beside what they hold.
  int64_t foreign_threshold = int64_t{256} << 20;
  int64_t foreign_margin = int64_t{1} << 30;
  // How the node contains trials (docs/containment.md): "auto" (a cgroup each where it
  // can make them, else a subreaper), "cgroup" (or fail), "subreaper".
  std::string containment = "auto";
  int64_t trial_max_pids = 16384;  // each trial's pids.max (0: none)
  // The Unix account trials run as. Default: this process's own, root included, with its
  // HOME: an embedded run behaves like running the script yourself (docs/run.md says why
  // cluster nodes differ). Another account needs this process to be root.
  std::string trial_user;
  std::optional<int> dashboard_port;  // serve the web dashboard on 127.0.0.1 (0: any free port)
  // Trials sharing a card run under CUDA MPS, a daemon of this cluster's own, as on a
  // node started with `tune start --mps` (docs/trials.md); real cards only. Off by default.
  bool mps = false;
};

struct cluster_capacity {
  int nodes = 0;
  double cpus = 0, gpus = 0;
  bool real_gpus = false;  // at least one node has real cards (not logical ones)
};

// A connection to a cluster, or an embedded one (a head and a node in this process,
// on this machine's GPUs, or its CPUs when it has none). Copies share it; the last one
// ends an embedded cluster (and every trial it still runs).
class cluster {
 public:
  static expected<cluster> start(cluster_options opt = {});
  bool embedded() const;
  std::string description() const;  // "embedded (1 node: 2 CPUs, no GPU)" or "head at HOST:PORT"
  expected<cluster_capacity> capacity() const;
  expected<std::string> status_json() const;  // as `tune status --json`
  // The embedded cluster's dashboard, with the token that signs in ("" without one).
  std::string dashboard_url() const;

  struct impl;
  std::shared_ptr<impl> state() const { return impl_; }

 private:
  std::shared_ptr<impl> impl_;
};

// Takes libtune's own flags out of argv (the rest stay, in order, for the program):
//   --address HOST:PORT   connect to a cluster (else: an embedded one)
//   --token-file F        its token (default ~/.tune/token)
//   --num-cpus N, --num-gpus N   the embedded node's resources
//   --dashboard-port N    the embedded cluster's web dashboard (127.0.0.1)
// In a trial's worker process (started by a node) it runs the trainable and exits
// with its outcome: it never returns there.
expected<cluster> init(int& argc, char** argv);
// The lines above, for a program's --help.
const char* init_help();
// The worker part of init alone: in a trial's worker process it runs the trainable and
// exits; anywhere else it returns at once (for programs that build their cluster with
// cluster::start, or none).
void run_if_trial_worker(int argc, char** argv);

// --- experiments ---------------------------------------------------------------------

// program, tune_config and the rest of an experiment's settings: tune/tuner/plan.hpp.

// What an experiment produced: read from its store (the experiment directory), so it
// is the same after the program ended (`result_grid::open`).
class result_grid {
 public:
  static expected<result_grid> open(const std::string& experiment_dir, std::string metric, tune::mode mode);
  // With several objectives and constraints (the first objective is best()'s metric).
  static expected<result_grid> open(const std::string& experiment_dir, std::vector<objective> objectives,
                                    std::vector<std::string> constraints = {});
  const std::string& dir() const;
  // The best trial by the experiment's metric (its last result, or its best with
  // scope::best); nothing when no trial reported it.
  expected<std::optional<best_trial>> best(scope s = scope::last) const;
  // The trials no other trial beats in every objective, by their last results (those
  // that meet the constraints); with one objective, the best trial(s).
  expected<std::vector<front_trial>> pareto_front() const;
  expected<std::vector<trial_row>> trials() const;
  expected<std::vector<result_row>> history(const std::string& trial) const;
  expected<std::string> csv() const;
  expected<nlohmann::json> json() const;
  int errors() const;     // trials that ended in error
  double wall_s = 0;      // how long fit() ran
  int64_t results = 0;    // results stored
  int64_t ingested = 0;   // results the controller handled in fit()
  double controller_cpu_s = 0;  // the controller's CPU time in fit()
  const experiment_store& store() const { return *store_; }

 private:
  std::shared_ptr<experiment_store> store_;
  std::string metric_;
  tune::mode mode_ = tune::mode::max;
  std::vector<objective> objectives_;
  std::vector<std::string> constraints_;
};

class tuner {
 public:
  tuner(cluster c, std::string trainable, search_space space, tune_config cfg);
  tuner(cluster c, program p, search_space space, tune_config cfg);
  // Runs the experiment to its end. Errors: a bad configuration (named), an unknown
  // trainable, a program whose command, environment, patterns or working directory are
  // wrong (checked before any trial starts), a cluster that cannot run a trial at all;
  // trials that fail do not fail fit() (see result_grid::errors()).
  expected<result_grid> fit();

 private:
  cluster cluster_;
  std::string trainable_;
  std::optional<program> program_;
  search_space space_;
  tune_config cfg_;
};

}  // namespace tune
