// The experiment file's keys, one table: docs/run.md holds it as rendered, each default
// it shows is the one the code has, the errors list the keys in its order, and a file
// and its C++ twin make the same plan.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tune/run/experiment.hpp"

namespace tune {
namespace {

// The table of keys in docs/run.md: its lines from the header to the first that is not
// a row.
std::string docs_table() {
  std::ifstream in(LIBTUNE_RUN_DOC);
  std::string line, out;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("| key | value | what | default |", 0) == 0) inside = true;
    if (inside && line.rfind("|", 0) != 0) break;
    if (inside) out += line + "\n";
  }
  return out;
}

TEST(ExperimentKeys, DocsRunMdHoldsTheTableAsTheCodeRendersIt) {
  auto docs = docs_table();
  ASSERT_FALSE(docs.empty()) << LIBTUNE_RUN_DOC << " has no table of keys (| key | value | what | default |)";
  EXPECT_EQ(docs, experiment_keys_markdown()) << "docs/run.md's table of keys should read:\n" << experiment_keys_markdown();
}

// What a file made of an experiment, in one value to compare.
nlohmann::json made(const experiment_spec& e) {
  const auto& c = e.config;
  const auto& p = e.prog;
  return {{"command", p.command}, {"working_dir", p.working_dir}, {"working_dir_limit", p.working_dir_limit},
          {"env", p.env}, {"forward_env", p.forward_env}, {"args", static_cast<int>(p.args)},
          {"patterns", p.metric_patterns}, {"in_place", p.in_place}, {"space", e.space.size()},
          {"name", c.name}, {"metric", c.metric}, {"mode", static_cast<int>(c.mode)}, {"metrics", c.metrics.size()},
          {"constraints", c.constraints}, {"num_samples", c.num_samples},
          {"resources", c.resources_per_trial.set ? c.resources_per_trial.set->to_json() : "none"},
          {"gpu_auto", c.resources_per_trial.gpu_auto}, {"bundles", c.bundles.size()},
          {"strategy", static_cast<int>(c.strategy)}, {"scheduler", c.scheduler.index()}, {"search", c.search.index()},
          {"max_iterations", c.stop.max_iterations.value_or(-1)}, {"max_concurrent", c.max_concurrent_trials},
          {"max_failures", c.max_failures}, {"time_budget", c.time_budget_s.value_or(-1)},
          {"experiment_dir", c.experiment_dir}, {"seed", c.seed}, {"stop_grace_s", c.stop_grace_s},
          {"group_timeout_s", c.group_timeout_s}, {"auto_rebalance", c.auto_rebalance},
          {"min_move_interval_s", c.min_move_interval_s}, {"progress", static_cast<int>(c.progress)},
          {"standby_copies", c.standby_copies}, {"reuse_workers", c.reuse_workers}, {"trial_files", c.trial_files},
          {"auto_packing", {c.auto_packing.margin, c.auto_packing.probe_share, c.auto_packing.probe_trials,
                            c.auto_packing.probe_results, c.auto_packing.min_share}}};
}

TEST(ExperimentKeys, EachDefaultTheTableShowsIsTheCodesOwn) {
  auto without = read_experiment("metric: acc\n", "exp.yaml", "/x");
  ASSERT_TRUE(without) << without.error().message();
  int checked = 0;
  for (const auto& k : experiment_keys()) {
    if (k.default_value.empty()) {
      EXPECT_FALSE(k.default_note.empty()) << k.name << " shows no default";
      continue;
    }
    auto with = read_experiment("metric: acc\n" + k.name + ": " + k.default_value + "\n", "exp.yaml", "/x");
    ASSERT_TRUE(with) << k.name << ": " << with.error().message();
    EXPECT_EQ(made(*with), made(*without)) << k.name << ": " << k.default_value << " is not its default";
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(ExperimentKeys, AnUnknownKeyListsEveryKeyInTheTablesOrder) {
  auto e = read_experiment("schedular: asha\n", "exp.yaml", "/x");
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().message(),
            "exp.yaml:1:1: schedular: unknown key (did you mean scheduler?); an experiment has: name, command, "
            "working_dir, working_dir_limit, env, config_args, metric_pattern, space, metric, mode, metrics, constraints, "
            "num_samples, resources_per_trial, bundles, workers, strategy, scheduler, search, stop, stoppers, checkpoints, "
            "log_to_driver, show_results, driver, max_concurrent_trials, "
            "max_failures, time_budget_s, experiment_dir, seed, stop_grace_s, group_timeout_s, auto_rebalance, "
            "min_move_interval_s, progress, standby_copies, auto_packing, reuse_workers, trial_files, mlflow, wandb, "
            "tracker_python, in_place");
}

TEST(ExperimentKeys, TrackersTakeTheirOptionsOrTrueAndABadOneIsNamedWhereItIs) {
  auto on = read_experiment("metric: acc\nmlflow: true\nwandb: {mode: offline, tags: [a, b]}\ntracker_python: /opt/py\n",
                            "exp.yaml", "/x");
  ASSERT_TRUE(on) << on.error().message();
  EXPECT_EQ(on->config.mlflow, nlohmann::json::object());
  EXPECT_EQ(on->config.wandb, (nlohmann::json{{"mode", "offline"}, {"tags", {"a", "b"}}}));
  EXPECT_EQ(on->config.tracker_python, "/opt/py");
  auto off = read_experiment("metric: acc\nmlflow: false\n", "exp.yaml", "/x");
  ASSERT_TRUE(off) << off.error().message();
  EXPECT_TRUE(off->config.mlflow.is_null());
  for (auto [text, said] : std::vector<std::pair<std::string, std::string>>{
           {"metric: acc\nmlflow: {uri: x}\n",
            "exp.yaml:2:9: mlflow: uri: unknown option; mlflow has: tracking_uri, registry_uri, experiment_name, tags, "
            "tracking_token, save_artifact"},
           {"metric: acc\nwandb: {mode: online-ish}\n", "exp.yaml:2:8: wandb: mode: give online, offline or disabled"},
           {"metric: acc\nmlflow: {tags: [a]}\n", "exp.yaml:2:9: mlflow: tags: give a mapping of text"},
           {"metric: acc\nwandb: 3\n", "exp.yaml:2:8: wandb: give a mapping of its options"},
           {"metric: acc\ntracker_python: ''\n", "exp.yaml:2:17: tracker_python: give the Python"}}) {
    auto e = read_experiment(text, "exp.yaml", "/x");
    ASSERT_FALSE(e) << text;
    EXPECT_EQ(e.error().message().substr(0, said.size()), said) << e.error().message();
  }
}

TEST(ExperimentKeys, TuneRunKeysPrintsEachKeyAsPlainText) {
  auto text = experiment_keys_text(80);
  for (const auto& k : experiment_keys()) EXPECT_NE(text.find("  " + k.name + ": "), std::string::npos) << k.name;
  EXPECT_EQ(text.find('`'), std::string::npos) << text;
  EXPECT_NE(text.find("docs/auto_packing.md"), std::string::npos) << text;
  EXPECT_EQ(text.find("](", 0), std::string::npos) << text;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("      ", 0) == 0) {
      EXPECT_LE(line.size(), 80u) << line;
    }
}

// tune run's file, and a C++ program's tune_config saying the same: one plan.
TEST(ExperimentKeys, AFileAndItsCppTwinMakeTheSamePlan) {
  auto file = read_experiment("metrics: {acc: max, ms: min}\nsearch: tpe\nnum_samples: 6\nmax_concurrent_trials: 2\n"
                              "resources_per_trial: {cpu: 1, gpu: auto}\nauto_packing: {probe_share: 0.5}\n",
                              "exp.yaml", "/x");
  ASSERT_TRUE(file) << file.error().message();
  tune_config twin;
  twin.metrics = {{"acc", mode::max}, {"ms", mode::min}};
  twin.search = tpe_search{};
  twin.num_samples = 6;
  twin.max_concurrent_trials = 2;
  twin.resources_per_trial = resources{{"cpu", 1}, {"gpu", "auto"}};
  twin.auto_packing.probe_share = 0.5;
  auto a = make_plan(file->config), b = make_plan(twin);
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ(a->config.metric, "acc");
  EXPECT_EQ(a->config.metric, b->config.metric);
  EXPECT_EQ(a->gpu_auto, b->gpu_auto);
  ASSERT_EQ(a->bundles.size(), 1u);
  ASSERT_EQ(b->bundles.size(), 1u);
  EXPECT_EQ(a->bundles[0].to_json(), b->bundles[0].to_json());
  EXPECT_EQ(std::get<tpe_search>(a->config.search).directions, std::get<tpe_search>(b->config.search).directions);
  experiment_spec as_file{program{}, search_space{}, a->config, ""}, as_twin{program{}, search_space{}, b->config, ""};
  EXPECT_EQ(made(as_file), made(as_twin));
}

}  // namespace
// workers: a bundle per worker, the same plan as tune_config::workers; every misstatement
// named (the count, what it is given with, its resources, its timeout, a key it lacks).
TEST(ExperimentKeys, WorkersMakeABundlePerWorkerAndEachMisstatementIsNamed) {
  auto file = read_experiment("metric: acc\nstrategy: spread\nworkers: {count: 3, resources: {cpu: 2, gpu: 1}, join_timeout_s: 9}\n",
                              "exp.yaml", "/x");
  ASSERT_TRUE(file) << file.error().message();
  tune_config twin;
  twin.metric = "acc";
  twin.strategy = strategy::spread;
  twin.workers = worker_group{3, {{"cpu", 2}, {"gpu", 1}}, 9};
  auto a = make_plan(file->config), b = make_plan(twin);
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ(a->world_size, 3u);
  EXPECT_EQ(b->world_size, 3u);
  ASSERT_EQ(a->bundles.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a->bundles[i].to_json(), b->bundles[i].to_json());
  EXPECT_EQ(a->config.workers->join_timeout_s, 9);
  auto error = [](const std::string& text) {
    auto f = read_experiment("metric: acc\n" + text, "exp.yaml", "/x");
    if (!f) return f.error().message();
    auto p = make_plan(f->config);
    return p ? std::string{} : p.error().message();
  };
  EXPECT_NE(error("workers: {count: 0}\n").find("workers.count"), std::string::npos) << error("workers: {count: 0}\n");
  EXPECT_NE(error("workers: {count: 2}\nbundles: [{cpu: 1}]\n").find("leave out bundles"), std::string::npos);
  EXPECT_NE(error("workers: {count: 2, resources: {cpu: 0}}\n").find("workers.resources"), std::string::npos)
      << error("workers: {count: 2, resources: {cpu: 0}}\n");
  EXPECT_NE(error("workers: {count: 2, join_timeout_s: -1}\n").find("join_timeout_s"), std::string::npos);
  EXPECT_NE(error("workers: {count: 2, gpus: 1}\n").find("gpus"), std::string::npos);
  EXPECT_NE(error("workers: 4\n").find("give a mapping with the count"), std::string::npos);
  tune_config fn;
  fn.metric = "acc";
  fn.workers = worker_group{};
  fn.resources_fn = [](const config&) { return resources{{"cpu", 1}}; };
  auto p = make_plan(fn);
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("resources_fn is for a trial of one process"), std::string::npos);
}

}  // namespace tune
