// Experiment files as tune run reads them: every key, the Ray-like space syntax, and
// every bad input an error naming the key, the line and what to write.
#include "tune/run/experiment.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

const char* full = R"(# a whole experiment
name: fmnist
command: [python3, train.py, --epochs, 8, "--lr=${lr}"]
working_dir: src
working_dir_limit: 20MiB
env:
  WANDB_MODE: offline
  VIRTUAL_ENV:
config_args: append
metric_pattern: 'val_acc=(\S+)'
metric: val_acc
mode: max
num_samples: 12
space:
  lr: {loguniform: [1e-4, 0.1]}
  momentum: {uniform: [0.5, 0.99]}
  wd: {quniform: [0.0, 0.01, 0.001]}
  batch: {choice: [64, 128]}
  width: {randint: [64, 513]}
  seed: {grid_search: [1, 2]}
  act: relu
  sizes: [1, 2]
  model:
    depth: {lograndint: [1, 16]}
  opt: {choice: [{name: sgd, m: {uniform: [0, 0.9]}}, {name: adam}]}
  literal: {constant: {choice: [1, 2]}}
  quoted: "3"
resources_per_trial: {gpu: 0.25, cpu: 1, memory: 4GiB}
scheduler: {type: asha, max_t: 8, grace_period: 2, reduction_factor: 3}
search: {type: tpe, n_startup_trials: 5}
stop: {max_iterations: 8, metric_threshold: 0.95, max_time_s: 600}
max_concurrent_trials: 4
max_failures: 2
time_budget_s: 3600
experiment_dir: results/fmnist
seed: 7
stop_grace_s: 5
group_timeout_s: 100
progress: lines
reuse_workers: true
)";

TEST(ExperimentFile, AWholeExperimentReadsIntoTheTunersTypes) {
  auto e = read_experiment(full, "experiment.yaml", "/work/exp");
  ASSERT_TRUE(e) << e.error().message();
  auto& p = e->prog;
  EXPECT_EQ(p.command, (std::vector<std::string>{"python3", "train.py", "--epochs", "8", "--lr=${lr}"}));
  EXPECT_EQ(p.working_dir, "/work/exp/src");  // from the file's folder
  EXPECT_EQ(p.working_dir_limit, 20u << 20);
  EXPECT_EQ(p.env, (std::map<std::string, std::string>{{"WANDB_MODE", "offline"}}));
  EXPECT_EQ(p.forward_env, std::vector<std::string>{"VIRTUAL_ENV"});
  EXPECT_EQ(p.args, config_args::append);
  EXPECT_EQ(p.metric_patterns, std::vector<std::string>{"val_acc=(\\S+)"});
  auto& c = e->config;
  EXPECT_EQ(c.name, "fmnist");
  EXPECT_EQ(c.metric, "val_acc");
  EXPECT_EQ(c.mode, mode::max);
  EXPECT_EQ(c.num_samples, 12);
  ASSERT_TRUE(c.resources_per_trial.set);
  EXPECT_EQ(c.resources_per_trial.set->to_json(), R"({"cpu":1,"gpu":0.25,"memory":4294967296})");
  auto* a = std::get_if<asha>(&c.scheduler);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->max_t, 8);
  EXPECT_EQ(a->grace_period, 2);
  EXPECT_EQ(a->reduction_factor, 3);
  auto* t = std::get_if<tpe_search>(&c.search);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->n_startup_trials, 5);
  EXPECT_EQ(c.stop.max_iterations, 8);
  EXPECT_EQ(c.stop.metric_threshold, 0.95);
  EXPECT_EQ(c.stop.max_time_s, 600);
  EXPECT_EQ(c.max_concurrent_trials, 4);
  EXPECT_EQ(c.max_failures, 2);
  EXPECT_EQ(c.time_budget_s, 3600);
  EXPECT_EQ(c.experiment_dir, "/work/exp/results/fmnist");
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.stop_grace_s, 5);
  EXPECT_EQ(c.group_timeout_s, 100);
  EXPECT_EQ(c.progress, progress_style::lines);
  EXPECT_TRUE(c.reuse_workers);
  // The space samples as its C++ twin would.
  auto& s = e->space;
  ASSERT_TRUE(s.validate()) << s.validate().message();
  EXPECT_EQ(s.find("lr")->describe(), "loguniform(0.0001, 0.1)");
  EXPECT_EQ(s.find("width")->describe(), "randint(64, 513)");
  EXPECT_EQ(s.find("model.depth")->describe(), "lograndint(1, 16)");
  EXPECT_EQ(s.find("seed")->what(), domain::kind::grid);
  rng r{1};
  auto cfg = s.sample(r);
  ASSERT_TRUE(cfg) << cfg.error().message();
  EXPECT_EQ((*cfg)["act"], "relu");
  EXPECT_EQ((*cfg)["sizes"], nlohmann::json::parse("[1, 2]"));
  EXPECT_EQ((*cfg)["literal"], nlohmann::json::parse(R"({"choice": [1, 2]})"));
  EXPECT_EQ((*cfg)["quoted"], "3");  // quoted: text
  EXPECT_TRUE((*cfg)["batch"] == 64 || (*cfg)["batch"] == 128);
  EXPECT_TRUE((*cfg)["opt"]["name"] == "sgd" || (*cfg)["opt"]["name"] == "adam");
  EXPECT_TRUE((*cfg)["model"]["depth"].is_number_integer());
}

TEST(ExperimentFile, JsonIsReadTooAndDefaultsAreTheTunersOwn) {
  auto e = read_experiment(R"({"command": ["sh", "run.sh"], "metric": "loss", "mode": "min",
                               "space": {"x": {"uniform": [0, 1]}}, "scheduler": "hyperband", "search": "random"})",
                           "experiment.json", "/x");
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->prog.working_dir, ".");  // the folder tune run starts in
  EXPECT_EQ(e->config.mode, mode::min);
  EXPECT_TRUE(std::holds_alternative<hyperband>(e->config.scheduler));
  EXPECT_EQ(e->config.num_samples, 1);
  auto none = read_experiment("working_dir: null\nmetric: a\n", "e.yaml", "/x");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->prog.working_dir, "");  // nothing shipped
}

TEST(ExperimentFile, GpuAutoAndItsOptionsAreRead) {
  auto e = read_experiment("metric: a\nresources_per_trial: {gpu: auto, cpu: 1}\n"
                           "auto_packing: {margin: 0.5, min_share: 0.125, probe_share: 0.5, probe_trials: 2, probe_results: 3}\n",
                           "e.yaml", "/x");
  ASSERT_TRUE(e) << e.error().message();
  auto& c = e->config;
  EXPECT_TRUE(c.resources_per_trial.gpu_auto);
  ASSERT_TRUE(c.resources_per_trial.set);
  EXPECT_EQ(c.resources_per_trial.set->to_json(), R"({"cpu":1})");
  EXPECT_EQ(c.auto_packing.margin, 0.5);
  EXPECT_EQ(c.auto_packing.min_share, 0.125);
  EXPECT_EQ(c.auto_packing.probe_share, 0.5);
  EXPECT_EQ(c.auto_packing.probe_trials, 2);
  EXPECT_EQ(c.auto_packing.probe_results, 3);
  auto alone = read_experiment("metric: a\nresources_per_trial: {gpu: auto}\n", "e.yaml", "/x");
  ASSERT_TRUE(alone) << alone.error().message();
  EXPECT_TRUE(alone->config.resources_per_trial.gpu_auto);
}

// The error for `text`, which must name each of `parts`.
void expect_error(const std::string& text, std::vector<std::string> parts) {
  auto e = read_experiment(text, "exp.yaml", "/x");
  ASSERT_FALSE(e) << text;
  for (auto& p : parts) EXPECT_NE(e.error().message().find(p), std::string::npos) << "'" << p << "' in: " << e.error().message();
}

TEST(ExperimentFile, EveryBadInputIsAnErrorNamingTheKeyTheLineAndWhatToWrite) {
  expect_error("metric: a\nschedular: asha\n", {"exp.yaml:2:1", "schedular", "unknown key", "did you mean scheduler?"});
  expect_error("config: {lr: 1}\n", {"exp.yaml:1:1", "libtune calls it space"});
  expect_error("num_samples: many\n", {"exp.yaml:1:14", "num_samples", "whole number of at least 1", "'many'"});
  expect_error("num_samples: 0\n", {"num_samples", "at least 1"});
  expect_error("num_samples: 2.5\n", {"num_samples"});
  expect_error("mode: maximize\n", {"mode", "'maximize' is not one of max, min"});
  expect_error("command: python3 train.py\n", {"command", "as a list", "no shell"});
  expect_error("command: []\n", {"command", "non-empty"});
  expect_error("metric: a\nmetric: b\n", {"exp.yaml:2:1", "given twice"});
  expect_error("space:\n  lr: {loguniform: [0, 0.1]}\n", {"exp.yaml:2:7", "space.lr", "loguniform"});
  expect_error("space:\n  lr: {loguniform: [0.1]}\n", {"space.lr.loguniform", "[low, high]"});
  expect_error("space:\n  lr: {log_uniform: [1e-4, 0.1]}\n", {"space.lr", "did you mean loguniform?", "constant"});
  expect_error("space:\n  x: {sample_from: [0, 1]}\n", {"space.x", "tune.sample_from", "not one of libtune's domains"});
  expect_error("space:\n  x: {randn: [0]}\n", {"space.x.randn", "[mean, sd]"});
  expect_error("space:\n  x: {randn: [0, -1]}\n", {"exp.yaml:2:6", "space.x", "standard deviation must be > 0"});
  expect_error("space:\n  x: {qrandint: [0, 10]}\n", {"space.x.qrandint", "[low, high, q]", "high included"});
  expect_error("space:\n  x: {qrandint: [0, 10, 0.5]}\n", {"space.x.qrandint[2]", "whole number"});
  expect_error("space:\n  x: {qlograndint: [0, 10, 2]}\n", {"space.x", "log scale needs a low bound > 0"});
  expect_error("space:\n  x: {choice: [a, b], weights: [1]}\n", {"space.x.weights", "one weight per option"});
  expect_error("space:\n  x: {choice: [a, b], weights: [0, 0]}\n", {"space.x.weights", "every weight is 0"});
  expect_error("space:\n  x: {uniform: [0, 1]}\nsearch: {type: tpe, points_to_evaluate: [{x: 0.5}, {x: 3}]}\n",
               {"exp.yaml:3:52", "search.points_to_evaluate[1]", "parameter \"x\": 3 lies outside"});
  expect_error("space:\n  x: {uniform: [0, 1]}\nsearch: {type: random, points_to_evaluate: [{y: 0.5}]}\n",
               {"search.points_to_evaluate[0]", "unknown parameter \"y\""});
  expect_error("search: {type: tpe, points_to_evaluate: {x: 1}}\n", {"search.points_to_evaluate", "a list of configs"});
  expect_error("search: {type: tpe, points_to_evaluate: [1]}\n", {"search.points_to_evaluate[0]", "a mapping"});
  expect_error("search: {type: tpe, multivariate: maybe}\n", {"search.multivariate", "true or false"});
  expect_error("space:\n  x: {randint: [1.5, 4]}\n", {"space.x.randint[0]", "whole number"});
  expect_error("space:\n  x: {choice: []}\n", {"space.x.choice", "as a list"});
  expect_error("space:\n  x: {uniform: [0, one]}\n", {"space.x.uniform[1]", "give a number, not 'one'"});
  expect_error("space:\n  a.b: 1\n", {"space.a.b", "no '/' or '.'"});
  expect_error("space: [1, 2]\n", {"space", "as a mapping"});
  expect_error("scheduler: {type: asha, max_tt: 8}\n", {"exp.yaml:1:25", "scheduler.max_tt", "did you mean max_t?", "grace_period"});
  expect_error("scheduler: {type: ashha}\n", {"scheduler", "'ashha' is not one of", "did you mean asha?"});
  expect_error("scheduler: {max_t: 8}\n", {"scheduler", "type:"});
  expect_error("scheduler: {type: asha, reduction_factor: 1}\n", {"reduction_factor", "at least 2"});
  expect_error("scheduler: {type: pbt, hyperparam_mutations: {lr: 3}}\n", {"scheduler.hyperparam_mutations.lr"});
  expect_error("search: {type: tpe, n_startup: 3}\n", {"search.n_startup", "n_startup_trials"});
  expect_error("resources_per_trial: {GPU: 1}\n", {"resources_per_trial", "gpu"});
  expect_error("resources_per_trial: {gpu: 1.5}\n", {"resources_per_trial", "1.5"});
  expect_error("bundles: [{gpu: auto}]\n", {"bundles[0]", "gpu: auto is for resources_per_trial"});
  expect_error("resources_per_trial: {gpu: fast}\n", {"resources_per_trial", "fast"});
  expect_error("auto_packing: {margin: -1}\n", {"auto_packing", "margin must be between 0 and 10"});
  expect_error("auto_packing: {min_shares: 0.1}\n", {"auto_packing", "min_shares", "did you mean min_share?"});
  expect_error("auto_packing: {probe_trials: 0}\n", {"auto_packing.probe_trials", "at least 1"});
  expect_error("auto_packing: 0.25\n", {"auto_packing", "mapping"});
  expect_error("resources_per_trial: {gpu: 1}\nbundles: [{gpu: 1}]\n", {"bundles", "not both"});
  expect_error("strategy: sideways\n", {"strategy", "pack, spread"});
  expect_error("stop: {training_iteration: 3}\n", {"stop.training_iteration", "max_iterations"});
  expect_error("env: {CUDA_VISIBLE_DEVICES: '0'}\n", {"env.CUDA_VISIBLE_DEVICES", "set by libtune"});
  expect_error("env: {'A-B': x}\n", {"env.A-B", "not an environment variable"});
  expect_error("metric_pattern: 'acc=\\S+'\n", {"metric_pattern", "captures nothing"});
  expect_error("metric_pattern: 'acc=(\\S+'\n", {"metric_pattern", "not a regular expression"});
  expect_error("working_dir_limit: lots\n", {"working_dir_limit", "200MiB"});
  expect_error("time_budget_s: -1\n", {"time_budget_s", "above 0"});
  expect_error("group_timeout_s: 0\n", {"group_timeout_s", "above 0"});
  expect_error("config_args: yes\n", {"config_args", "none, append"});
  expect_error("- a\n- b\n", {"exp.yaml:1:1", "a mapping of keys", "not a list"});
  expect_error("metric: [a\n", {"exp.yaml:", "not valid YAML"});
  expect_error("name: a/b\n", {"name", "without '/'"});
  expect_error("seed: -3\n", {"seed", "at least 0"});
  expect_error("auto_rebalance: sometimes\n", {"auto_rebalance", "true or false"});
}

TEST(ExperimentFile, NormalQuantizedIntegerAndWeightedDomainsAndPointsToEvaluate) {
  auto e = read_experiment(R"(metric: loss
mode: min
space:
  shift: {randn: [10, 2]}
  step: {qrandn: [0, 1, 0.5]}
  width: {qrandint: [64, 512, 64]}
  heads: {qlograndint: [1, 16, 1]}
  opt: {choice: [sgd, adam], weights: [3, 1]}
search:
  type: tpe
  multivariate: false
  constant_liar: false
  points_to_evaluate: [{shift: 10, width: 128, opt: adam}, {width: 512}]
)",
                           "exp.yaml", "/x");
  ASSERT_TRUE(e) << e.error().message();
  auto& s = e->space;
  EXPECT_EQ(s.find("shift")->describe(), "randn(10, 2)");
  EXPECT_EQ(s.find("step")->describe(), "qrandn(0, 1, 0.5)");
  EXPECT_EQ(s.find("width")->describe(), "qrandint(64, 512, 64)");
  EXPECT_EQ(s.find("heads")->describe(), "qlograndint(1, 16, 1)");
  EXPECT_EQ(s.find("opt")->choices().weights, (std::vector<double>{0.75, 0.25}));
  auto* t = std::get_if<tpe_search>(&e->config.search);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->multivariate, false);
  EXPECT_FALSE(t->constant_liar);
  ASSERT_EQ(t->points_to_evaluate.size(), 2u);
  EXPECT_EQ(t->points_to_evaluate[1], (config{{"width", 512}}));
  auto gp = read_search("{type: gp, n_startup_trials: 5, n_candidates: 500, fantasize_pending: false}", "--search");
  ASSERT_TRUE(gp) << gp.error().message();
  EXPECT_EQ(std::get<gp_search>(*gp).n_startup_trials, 5);
  EXPECT_EQ(std::get<gp_search>(*gp).n_candidates, 500);
  EXPECT_FALSE(std::get<gp_search>(*gp).fantasize_pending);
  EXPECT_TRUE(std::holds_alternative<gp_search>(*read_search("GPSampler", "--search")));
  auto gp_bad = read_search("{type: gp, n_ei_candidates: 5}", "--search");
  ASSERT_FALSE(gp_bad);
  EXPECT_NE(gp_bad.error().message().find("not an option of gp"), std::string::npos) << gp_bad.error().message();
  auto bohb = read_search("{type: bohb, random_fraction: 0.2, min_points_in_model: 4}", "--search");
  ASSERT_TRUE(bohb) << bohb.error().message();
  EXPECT_EQ(std::get<bohb_search>(*bohb).random_fraction, 0.2);
  EXPECT_EQ(std::get<bohb_search>(*bohb).min_points_in_model, 4);
  auto rnd = read_search("{type: random, points_to_evaluate: [{a: 1}]}", "--search");
  ASSERT_TRUE(rnd) << rnd.error().message();
  EXPECT_EQ(std::get<random_search_alg>(*rnd).points_to_evaluate.size(), 1u);
}

TEST(ExperimentFile, FlagsPartsReadTheSameSyntax) {
  auto space = read_search_space(R"({"lr": {"loguniform": [1e-4, 0.1]}, "w": {"choice": [1, 2]}})", "--space");
  ASSERT_TRUE(space) << space.error().message();
  EXPECT_EQ(space->size(), 2u);
  auto bad = read_search_space(R"({"lr": {"loguniform": [1e-4]}})", "--space");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("--space:1:"), std::string::npos) << bad.error().message();
  auto sched = read_scheduler("asha", "--scheduler");
  ASSERT_TRUE(sched);
  EXPECT_TRUE(std::holds_alternative<asha>(*sched));
  auto json_sched = read_scheduler(R"({"type": "median", "grace_period": 2})", "--scheduler");
  ASSERT_TRUE(json_sched) << json_sched.error().message();
  EXPECT_EQ(std::get<median_stopping>(*json_sched).grace_period, 2);
  EXPECT_FALSE(read_scheduler("nope", "--scheduler"));
  auto search = read_search("tpe", "--search");
  ASSERT_TRUE(search);
  EXPECT_TRUE(std::holds_alternative<tpe_search>(*search));
  EXPECT_FALSE(read_search("bayes", "--search"));
  auto pbt_spec = read_scheduler(
      "{type: pbt, perturbation_interval: 2, hyperparam_mutations: {lr: {loguniform: [1e-4, 0.1]}, b: [16, 32], d: {randint: [1, 4]}}}",
      "--scheduler");
  ASSERT_TRUE(pbt_spec) << pbt_spec.error().message();
  auto& muts = std::get<pbt>(*pbt_spec).hyperparameter_mutations;
  ASSERT_EQ(muts.size(), 3u);
  EXPECT_TRUE(muts[0].log);
  EXPECT_EQ(muts[1].options.size(), 2u);
  EXPECT_TRUE(muts[2].integer);
}

TEST(ExperimentFile, AMissingOrUnreadableFileSaysSo) {
  auto e = read_experiment_file("/nonexistent/experiment.yaml");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("no experiment file /nonexistent/experiment.yaml"), std::string::npos);
  EXPECT_FALSE(read_experiment_file("/tmp"));
}

}  // namespace
}  // namespace tune
