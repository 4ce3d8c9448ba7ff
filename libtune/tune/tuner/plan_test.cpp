// The experiment plan: the one check every entry point goes through (make_plan), and
// what it makes: objectives resolved, each trial's bundles, the search and scheduler.
#include "tune/tuner/plan.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

tune_config config_with(std::function<void(tune_config&)> change) {
  tune_config c;
  c.metric = "acc";
  change(c);
  return c;
}

std::string error_of(const tune_config& c) {
  auto p = make_plan(c);
  return p ? std::string{} : p.error().message();
}

TEST(ExperimentPlan, TheDefaultsMakeOneBundleOfOneCpu) {
  auto p = make_plan(config_with([](tune_config&) {}));
  ASSERT_TRUE(p) << p.error().message();
  ASSERT_EQ(p->bundles.size(), 1u);
  EXPECT_EQ(p->bundles[0].to_json(), R"({"cpu":1})");
  EXPECT_FALSE(p->gpu_auto);
  EXPECT_EQ(p->config.metric, "acc");
  EXPECT_EQ(p->config.num_samples, 1);
}

TEST(ExperimentPlan, EachBadSettingIsAnErrorNamingIt) {
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.num_samples = 0; })), "num_samples must be at least 1");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.max_concurrent_trials = -1; })),
            "max_concurrent_trials must be 0 (as many as fit) or more");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.max_failures = -2; })), "max_failures must be 0 (no restarts) or more");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.group_timeout_s = 0; })),
            "group_timeout_s must be positive and stop_grace_s not negative");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.stop_grace_s = -1; })),
            "group_timeout_s must be positive and stop_grace_s not negative");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.resources_per_trial = resources{resource_set{}}; })),
            "resources_per_trial is empty: ask for at least one CPU or GPU");
  auto word = error_of(config_with([](tune_config& c) { c.resources_per_trial = resources{{"gpu", "fast"}}; }));
  EXPECT_EQ(word, "resources_per_trial: gpu is \"fast\": give a number (0.25, 1, 2) or \"auto\" (auto-packing)");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.bundles = {resources{{"cpu", 1}}, resources{{"gpu", "auto"}}}; })),
            "bundle 1: gpu \"auto\" is for resources_per_trial (one bundle), not bundles");
  EXPECT_NE(error_of(config_with([](tune_config& c) { c.resources_per_trial = resources{{"gpu", "auto"}, {"gpu_memory", "4GiB"}}; }))
                .find("drop gpu_memory"),
            std::string::npos);
  auto margin = error_of(config_with([](tune_config& c) {
    c.resources_per_trial = resources{{"gpu", "auto"}};
    c.auto_packing.margin = -0.5;
  }));
  EXPECT_NE(margin.find("margin"), std::string::npos) << margin;
}

TEST(ExperimentPlan, TheFirstOfSeveralObjectivesIsTheMetric) {
  auto p = make_plan(config_with([](tune_config& c) {
    c.metric = "";
    c.metrics = {{"acc", mode::max}, {"ms", mode::min}};
    c.search = tpe_search{};
  }));
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->config.metric, "acc");
  EXPECT_EQ(p->config.mode, mode::max);
  EXPECT_EQ(std::get<tpe_search>(p->config.search).directions, (std::vector<mode>{mode::max, mode::min}));
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.metrics = {{"loss", mode::min}}; })),
            "metric is \"acc\" but metrics starts with \"loss\": give metrics alone (its first is the metric)");
  EXPECT_EQ(error_of(config_with([](tune_config& c) { c.metrics = {{"acc", mode::max}, {"acc", mode::min}}; })),
            "metrics: \"acc\" is given twice");
  EXPECT_EQ(error_of(config_with([](tune_config& c) {
              c.constraints = {"mem"};
              c.search = gp_search{};
            })),
            "gp models one objective without constraints; use tpe for constraints");
}

TEST(ExperimentPlan, GpuAutoAsksForTheProbesShare) {
  auto p = make_plan(config_with([](tune_config& c) {
    c.resources_per_trial = resources{{"cpu", 1}, {"gpu", "auto"}};
    c.auto_packing.probe_share = 0.5;
  }));
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_TRUE(p->gpu_auto);
  ASSERT_EQ(p->bundles.size(), 1u);
  EXPECT_EQ(p->bundles[0].to_json(), R"({"cpu":1,"gpu":0.5})");
}

TEST(ExperimentPlan, SeveralBundlesAreTheTrialsOwn) {
  auto p = make_plan(config_with([](tune_config& c) { c.bundles = {resources{{"gpu", 1}}, resources{{"cpu", 4}}}; }));
  ASSERT_TRUE(p) << p.error().message();
  ASSERT_EQ(p->bundles.size(), 2u);
  EXPECT_EQ(p->bundles[0].to_json(), R"({"gpu":1})");
  EXPECT_EQ(p->bundles[1].to_json(), R"({"cpu":4})");
  EXPECT_FALSE(p->gpu_auto);
}

TEST(ExperimentPlan, TheSearchAndSchedulerTakeTheExperimentsSettings) {
  search_space space{{"x", uniform(0.0, 1.0)}};
  auto grid = make_plan(config_with([](tune_config& c) { c.search = grid_search_alg{}; }));
  ASSERT_TRUE(grid);
  auto refused = make_search(*grid, space);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("x"), std::string::npos) << refused.error().message();
  auto tpe = make_plan(config_with([](tune_config& c) { c.search = tpe_search{}; }));
  ASSERT_TRUE(tpe);
  auto made = make_search(*tpe, space);
  ASSERT_TRUE(made) << made.error().message();
  auto seeded = make_plan(config_with([](tune_config& c) {
    c.seed = 7;
    c.scheduler = pbt{};
  }));
  ASSERT_TRUE(seeded);
  EXPECT_EQ(std::get<pbt>(scheduler_of(*seeded)).seed, 7u);
  auto own = make_plan(config_with([](tune_config& c) {
    c.seed = 7;
    pbt own_seed;
    own_seed.seed = 3;
    c.scheduler = own_seed;
  }));
  ASSERT_TRUE(own);
  EXPECT_EQ(std::get<pbt>(scheduler_of(*own)).seed, 3u);
}

TEST(ExperimentPlan, ProgressStylesAreNamed) {
  EXPECT_EQ(parse_progress_style("auto"), progress_style::automatic);
  EXPECT_EQ(parse_progress_style("table"), progress_style::table);
  EXPECT_EQ(parse_progress_style("lines"), progress_style::lines);
  EXPECT_EQ(parse_progress_style("none"), progress_style::none);
  EXPECT_FALSE(parse_progress_style("fancy"));
}

}  // namespace
}  // namespace tune
