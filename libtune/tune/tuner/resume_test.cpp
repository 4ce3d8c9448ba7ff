// Resuming an experiment from its store: an experiment driven step by step (this test
// as its controller, writing what happens to a real store) stops in the middle as if
// its driver died; a new engine replays the store and must be where the first one was.
#include "tune/tuner/resume.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

namespace tune {
namespace {

namespace fs = std::filesystem;
using kind = engine_action::kind;

double wall() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

struct rig {
  std::unique_ptr<search_algorithm> search;
  std::unique_ptr<trial_scheduler> scheduler;
  std::unique_ptr<experiment_engine> engine;
  explicit rig(uint64_t seed, search_space space = {{"x", uniform(0, 1)}}) {
    search = std::move(make_random_search(space, {.num_samples = 8, .seed = seed})).value();
    scheduler = std::move(make_scheduler(asha{.max_t = 8, .grace_period = 2, .reduction_factor = 2}, "acc", mode::max)).value();
    engine_options o;
    o.metric = "acc";
    o.max_concurrent = 3;
    engine = std::move(experiment_engine::make(*search, *scheduler, o)).value();
  }
};

class ResumeTest : public ::testing::Test {
 protected:
  std::string dir = (fs::temp_directory_path() / ("resume-test-" + std::to_string(::getpid()))).string();
  std::unique_ptr<experiment_store> store = std::move(experiment_store::open(dir)).value();
  void TearDown() override { fs::remove_all(dir); }

  // Carries out the engine's actions as a controller would, writing to the store; stops
  // (the driver "dies") after `results` results. The trials still running then.
  std::set<std::string> run_until(experiment_engine& e, int results) {
    std::set<std::string> running;
    std::map<std::string, int64_t> it;
    std::vector<engine_action> todo = std::move(e.step(0)).value();
    int n = 0;
    while (n < results) {
      for (size_t k = 0; k < todo.size(); ++k) {
        auto a = todo[k];
        if (a.what == kind::start) {
          (void)store->add_trial(a.trial, a.cfg, "running");
          running.insert(a.trial);
        } else {  // stop or pause: its process ends
          running.erase(a.trial);
          (void)store->add_event(a.trial, "ended", {{"ok", true}, {"stopped", true}});
          auto more = std::move(e.on_ended(a.trial, true)).value();
          for (auto& m : more) todo.push_back(m);
        }
      }
      todo.clear();
      if (running.empty()) break;
      auto id = *running.begin();
      int64_t i = ++it[id];
      double acc = e.trials().at(id).cfg["x"].get<double>() * static_cast<double>(i);
      (void)store->add_results(std::vector<result_row>{{id, i, wall(), {{"acc", acc}}}});
      todo = std::move(e.on_result(id, i, {{"acc", acc}})).value();
      if (i % 2 == 0) {
        (void)store->add_event(id, "checkpoint", {{"iteration", i}});
        e.on_checkpoint(id, i);
      }
      if (i == 8 && running.count(id)) {  // done
        running.erase(id);
        (void)store->add_event(id, "ended", {{"ok", true}});
        auto more = std::move(e.on_ended(id, true)).value();
        for (auto& m : more) todo.push_back(m);
      }
      auto more = std::move(e.step(0)).value();
      for (auto& m : more) todo.push_back(m);
      ++n;
    }
    return running;
  }
};

TEST_F(ResumeTest, TheReplayedEngineIsWhereTheDeadOneWasAndRestartsWhatRan) {
  rig first{7};
  auto running = run_until(*first.engine, 25);
  ASSERT_FALSE(running.empty());
  rig second{7};
  auto plan = replay_experiment(*second.engine, *store);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->interrupted_trials, static_cast<int>(running.size()));
  EXPECT_EQ(plan->replayed_results, 25);
  for (auto& [id, t] : first.engine->trials()) {
    auto& r = second.engine->trials().at(id);
    EXPECT_EQ(r.cfg, t.cfg) << id;
    EXPECT_EQ(r.iteration, t.iteration) << id;
    EXPECT_EQ(r.checkpoint, t.checkpoint) << id;
    EXPECT_EQ(r.state, t.state) << id;  // running ones run again
    EXPECT_EQ(r.failures, 0) << id << ": an interruption is not its failure";
  }
  for (auto& a : plan->actions) {
    if (!running.count(a.trial)) continue;
    EXPECT_EQ(a.what, kind::start) << a.trial;
    auto& t = second.engine->trials().at(a.trial);
    if (t.checkpoint >= 0) {
      EXPECT_EQ(a.restore_from, a.trial);
      EXPECT_EQ(a.restore_iteration, t.checkpoint);
    }
    // What it reports again up to its last stored iteration is not counted again.
    EXPECT_EQ(t.replay_until, t.iteration) << a.trial;
    EXPECT_TRUE(second.engine->on_metric(a.trial, t.iteration, 100.0)->empty());
  }
}

TEST_F(ResumeTest, AProgramThatSearchesDifferentlyIsRefusedNamingTheTrial) {
  rig first{7};
  run_until(*first.engine, 10);
  rig other{8};  // another seed: other configurations
  auto plan = replay_experiment(*other.engine, *store);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("trial-00001"), std::string::npos) << plan.error().message();
  EXPECT_NE(plan.error().message().find("seed"), std::string::npos) << plan.error().message();
}

// A configuration's bytes that are not UTF-8 (a choice read from an experiment file) are
// stored as U+FFFD: the same search still resumes.
TEST_F(ResumeTest, AConfigurationWithBytesThatAreNotUtf8StillResumes) {
  search_space space{{"x", uniform(0, 1)}, {"tag", choice({nlohmann::json("a\xff"), nlohmann::json("b\xed\xa0\x80")})}};
  rig first{7, space};
  run_until(*first.engine, 10);
  EXPECT_NE(store->trial("trial-00001")->config["tag"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
  rig second{7, space};
  auto plan = replay_experiment(*second.engine, *store);
  ASSERT_TRUE(plan) << plan.error().message();
  EXPECT_EQ(plan->replayed_results, 10);
}

TEST_F(ResumeTest, AnEmptyExperimentHasNothingToResume) {
  rig r{7};
  auto plan = replay_experiment(*r.engine, *store);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.error().message().find("nothing to resume"), std::string::npos);
}

}  // namespace
}  // namespace tune
