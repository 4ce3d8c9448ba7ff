// The experiment engine driven step by step, with the real search algorithms and
// schedulers: what it starts, stops, pauses and resumes, and the trials' states.
#include "tune/tuner/engine.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace tune {
namespace {

using kind = engine_action::kind;

template <class T>
T ok(expected<T> e) {
  EXPECT_TRUE(e) << (e ? "" : e.error().message());
  return std::move(e).value();
}

struct rig {
  std::unique_ptr<search_algorithm> search;
  std::unique_ptr<trial_scheduler> scheduler;
  std::unique_ptr<experiment_engine> engine;
  rig(scheduler_spec spec, int samples, engine_options opt, search_space space = {{"x", uniform(0, 1)}}) {
    search = ok(make_random_search(space, {.num_samples = samples, .seed = 3}));
    scheduler = ok(make_scheduler(spec, opt.metric, opt.direction));
    auto e = experiment_engine::make(*search, *scheduler, std::move(opt));
    EXPECT_TRUE(e) << e.error().message();
    engine = std::move(e).value();
  }
  std::vector<engine_action> step(double t = 0) { return ok(engine->step(t)); }
  std::vector<engine_action> result(const std::string& id, int64_t it, double v) {
    return ok(engine->on_result(id, it, {{"acc", v}}));
  }
  std::vector<engine_action> ended(const std::string& id, bool good = true, std::string why = {}) {
    return ok(engine->on_ended(id, good, why));
  }
  trial_state state(const std::string& id) { return engine->trials().at(id).state; }
};

engine_options opts(int concurrent) {
  engine_options o;
  o.metric = "acc";
  o.direction = mode::max;
  o.max_concurrent = concurrent;
  return o;
}

TEST(Engine, FifoRunsEverySampleWithinTheConcurrencyLimit) {
  rig r{fifo{}, 5, opts(2)};
  auto a = r.step();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].what, kind::start);
  EXPECT_EQ(a[0].trial, "trial-00001");
  EXPECT_TRUE(a[0].cfg.contains("x"));
  EXPECT_TRUE(a[0].restore_from.empty());
  EXPECT_TRUE(r.step().empty()) << "no room for a third";
  int started = 2, done = 0;
  std::vector<std::string> live{a[0].trial, a[1].trial};
  while (!live.empty()) {
    auto id = live.front();
    live.erase(live.begin());
    EXPECT_TRUE(r.result(id, 1, 0.5).empty());
    EXPECT_TRUE(r.ended(id).empty());
    ++done;
    for (auto& n : r.step()) {
      EXPECT_EQ(n.what, kind::start);
      live.push_back(n.trial);
      ++started;
    }
    EXPECT_LE(r.engine->running(), 2);
  }
  EXPECT_EQ(started, 5);
  EXPECT_EQ(done, 5);
  EXPECT_TRUE(r.step().empty());
  EXPECT_TRUE(r.engine->finished());
  for (auto& [id, t] : r.engine->trials()) EXPECT_EQ(t.state, "terminated") << id;
}

// Records what the engine tells the search (a random search underneath).
class recording_search final : public search_algorithm {
 public:
  explicit recording_search(search_space s) : search_algorithm(std::vector<mode>{mode::max, mode::min}) {
    inner_ = std::move(make_random_search(std::move(s), {.num_samples = 3, .seed = 1})).value();
  }
  bool finished() const override { return inner_->finished(); }
  std::string name() const override { return "recording"; }
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> outcomes;
  std::vector<std::string> forgotten;

 protected:
  expected<std::optional<config>> next_config(const std::string& id) override { return inner_->suggest(id); }
  void observe(const std::string& id, std::optional<double>) override { forgotten.push_back(id); }
  void observe_outcome(const std::string& id, const std::vector<double>& v, const std::vector<double>& c) override {
    outcomes[id] = {v, c};
  }

 private:
  std::unique_ptr<search_algorithm> inner_;
};

TEST(Engine, SeveralObjectivesAndConstraintsReachTheSearchWhenATrialEnds) {
  recording_search search({{"x", uniform(0, 1)}});
  auto sched = ok(make_scheduler(fifo{}, "acc", mode::max));
  auto o = opts(3);
  o.other_objectives = {"ms"};
  o.constraints = {"mem_over"};
  auto engine = ok(experiment_engine::make(search, *sched, o));
  auto a = ok(engine->step(0));
  ASSERT_EQ(a.size(), 3u);
  // Trial 1: every value, the latest of each counts (ms from the first result).
  ok(engine->on_result(a[0].trial, 1, {{"acc", 0.5}, {"ms", 7}, {"mem_over", 1}}));
  ok(engine->on_result(a[0].trial, 2, {{"acc", 0.6}, {"mem_over", -2}}));
  ok(engine->on_ended(a[0].trial, true));
  // Trial 2 through the columns' path: on_metric with the others.
  ok(engine->on_metric(a[1].trial, 1, 0.7, {3.0, -1.0}));
  ok(engine->on_ended(a[1].trial, true));
  EXPECT_TRUE(engine->meets_constraints(engine->trials().at(a[0].trial)));  // -2: its latest
  EXPECT_FALSE(engine->meets_constraints(engine->trials().at(a[2].trial)));  // none reported yet
  // Trial 3 never reports ms: it ends in error, naming it, and the search forgets it.
  ok(engine->on_result(a[2].trial, 1, {{"acc", 0.9}, {"mem_over", -1}}));
  ok(engine->on_result(a[2].trial, 2, {{"acc", 0.9}, {"mem_over", 0.5}}));
  EXPECT_FALSE(engine->meets_constraints(engine->trials().at(a[2].trial)));  // over by its latest
  ok(engine->on_ended(a[2].trial, true));
  ASSERT_EQ(search.outcomes.size(), 2u);
  EXPECT_EQ(search.outcomes[a[0].trial].first, (std::vector<double>{0.6, 7}));
  EXPECT_EQ(search.outcomes[a[0].trial].second, (std::vector<double>{-2}));
  EXPECT_EQ(search.outcomes[a[1].trial].first, (std::vector<double>{0.7, 3}));
  EXPECT_EQ(engine->trials().at(a[2].trial).state, trial_state::error);
  EXPECT_EQ(engine->trials().at(a[2].trial).error, "it ended without reporting ms");
  EXPECT_EQ(search.forgotten, std::vector<std::string>{a[2].trial});
}

TEST(Engine, AshaStopsTheWorstAtARungAndStopCriteriaEndTrials) {
  auto o = opts(3);
  o.stop.max_iterations = 4;
  rig r{asha{.max_t = 100, .grace_period = 1, .reduction_factor = 3, .brackets = 1}, 3, o};
  auto a = r.step();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_TRUE(r.result(a[0].trial, 1, 0.9).empty()) << "the first at a rung goes on";
  EXPECT_TRUE(r.result(a[1].trial, 1, 0.95).empty()) << "2 values, k = 1: the best goes on";
  auto s = r.result(a[2].trial, 1, 0.1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].what, kind::stop);
  EXPECT_NE(s[0].reason.find("stopped by asha at iteration"), std::string::npos) << s[0].reason;
  EXPECT_TRUE(r.result(a[2].trial, 2, 0.2).empty()) << "a late result after the stop is only recorded";
  EXPECT_TRUE(r.ended(a[2].trial).empty());
  EXPECT_EQ(r.state(a[2].trial), "terminated");
  // The criterion: 4 iterations.
  EXPECT_TRUE(r.result(a[0].trial, 3, 0.95).empty());
  auto c = r.result(a[0].trial, 4, 0.96);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].what, kind::stop);
  EXPECT_EQ(c[0].reason, "reached 4 iterations");
}

TEST(Engine, AMetricThresholdAndANonFiniteValue) {
  auto o = opts(2);
  o.stop.metric_threshold = 0.9;
  rig r{fifo{}, 2, o};
  auto a = r.step();
  EXPECT_TRUE(r.result(a[0].trial, 1, 0.5).empty());
  auto t = r.result(a[0].trial, 2, 0.91);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].reason, "reached acc 0.91");
  auto bad = ok(r.engine->on_result(a[1].trial, 1, {{"acc", nullptr}}));
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].what, kind::stop);
  r.ended(a[1].trial);
  EXPECT_EQ(r.state(a[1].trial), "error");
  EXPECT_NE(r.engine->trials().at(a[1].trial).error.find("not a finite number"), std::string::npos);
  // Results without the metric are recorded, not judged.
  EXPECT_TRUE(ok(r.engine->on_result(a[0].trial, 3, {{"loss", 1}})).empty());
}

TEST(Engine, AFailedTrialKeepsItsErrorAndTheNextStarts) {
  rig r{fifo{}, 2, opts(1)};
  auto a = r.step();
  ASSERT_EQ(a.size(), 1u);
  r.ended(a[0].trial, false, "the trial's process ended with exit code 3");
  EXPECT_EQ(r.state(a[0].trial), "error");
  EXPECT_EQ(r.engine->trials().at(a[0].trial).error, "the trial's process ended with exit code 3");
  auto b = r.step();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].trial, "trial-00002");
  auto unknown = r.engine->on_result("nobody", 1, {{"acc", 1}});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), errc::not_found);
}

TEST(Engine, HyperBandPausesThenResumesFromTheTrialsOwnCheckpoint) {
  // One bracket of 3 trials, rungs at 1 then 3 (max_t 3, eta 3, s = 1); the best one
  // reports first, so it waits paused for the rung to fill and is then resumed.
  rig r{hyperband{.max_t = 3, .reduction_factor = 3, .brackets = 1}, 3, opts(3)};
  auto a = r.step();
  ASSERT_EQ(a.size(), 3u);
  std::vector<engine_action> acts;
  for (int i = 0; i < 3; ++i) {
    r.engine->on_checkpoint(a[i].trial, 1);
    auto v = r.result(a[i].trial, 1, 0.9 - 0.3 * i);
    acts.insert(acts.end(), v.begin(), v.end());
  }
  ASSERT_EQ(acts.size(), 3u);
  EXPECT_EQ(acts[0].what, kind::pause);
  EXPECT_EQ(acts[1].what, kind::pause);
  EXPECT_EQ(acts[2].what, kind::stop) << "the worst completes the rung and loses";
  for (auto& p : acts) r.ended(p.trial);
  EXPECT_EQ(r.state(a[0].trial), "paused");
  EXPECT_EQ(r.state(a[1].trial), "terminated") << "lost at the rung";
  EXPECT_EQ(r.state(a[2].trial), "terminated");
  auto resumed = r.step();
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].what, kind::start);
  EXPECT_EQ(resumed[0].trial, a[0].trial);
  EXPECT_EQ(resumed[0].restore_from, a[0].trial);
  EXPECT_EQ(resumed[0].restore_iteration, 1);
  EXPECT_EQ(resumed[0].cfg, a[0].cfg);
  EXPECT_EQ(r.engine->trials().at(a[0].trial).starts, 2);
  auto last = r.result(a[0].trial, 3, 0.95);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].what, kind::stop) << "max_t";
  r.ended(a[0].trial);
  EXPECT_TRUE(r.step().empty());
  EXPECT_TRUE(r.engine->finished());
}

// A trial resumed from an earlier checkpoint reports again what came after it: those
// results were counted already (the scheduler saw them), so they are not again.
TEST(Engine, ResultsReplayedAfterARestartFromAnEarlierCheckpointCountOnce) {
  rig r{hyperband{.max_t = 3, .reduction_factor = 3, .brackets = 1}, 3, opts(3)};
  auto a = r.step();
  ASSERT_EQ(a.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    r.engine->on_checkpoint(a[i].trial, 1);
    (void)r.result(a[i].trial, 1, 0.9 - 0.3 * i);
  }
  (void)r.result(a[0].trial, 2, 0.91);  // on its way while it was being paused
  for (int i = 0; i < 3; ++i) r.ended(a[i].trial);
  auto resumed = r.step();
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].restore_iteration, 1);
  EXPECT_EQ(r.engine->trials().at(a[0].trial).replay_until, 2);
  EXPECT_TRUE(r.result(a[0].trial, 2, 0.1).empty()) << "iteration 2 again";
  EXPECT_DOUBLE_EQ(*r.engine->trials().at(a[0].trial).value, 0.9) << "a replayed result does not count";
  auto last = r.result(a[0].trial, 3, 0.95);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].what, kind::stop) << "max_t";
  EXPECT_DOUBLE_EQ(*r.engine->trials().at(a[0].trial).value, 0.95);
}

TEST(Engine, AFailedTrialIsStartedAgainFromItsCheckpointUpToMaxFailures) {
  auto o = opts(1);
  o.max_failures = 2;
  rig r{fifo{}, 1, o};
  auto a = r.step();
  ASSERT_EQ(a.size(), 1u);
  auto id = a[0].trial;
  r.engine->on_checkpoint(id, 2);
  (void)r.result(id, 3, 0.5);
  auto again = r.ended(id, false, "exit code 1");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].what, kind::start);
  EXPECT_EQ(again[0].restore_from, id);
  EXPECT_EQ(again[0].restore_iteration, 2);
  EXPECT_EQ(r.state(id), "running");
  EXPECT_EQ(r.engine->trials().at(id).failures, 1);
  EXPECT_EQ(r.engine->trials().at(id).last_failure, "exit code 1");
  EXPECT_TRUE(r.result(id, 3, 0.1).empty()) << "iteration 3 again: counted once";
  ASSERT_EQ(r.ended(id, false, "its node was lost").size(), 1u);
  EXPECT_TRUE(r.ended(id, false, "exit code 2").empty()) << "the third failure is the last";
  EXPECT_EQ(r.state(id), "error");
  EXPECT_EQ(r.engine->trials().at(id).error, "exit code 2 (failed 3 times)");
  EXPECT_TRUE(r.step().empty());
  EXPECT_TRUE(r.engine->finished());
  // A trial that was asked to stop is not restarted, whatever its end.
  rig s{fifo{}, 1, o};
  auto b = s.step();
  (void)s.engine->on_result(b[0].trial, 1, nlohmann::json{{"acc", std::nan("")}});
  EXPECT_TRUE(s.ended(b[0].trial, false, "killed").empty());
  EXPECT_EQ(s.state(b[0].trial), "error");
}

TEST(Engine, PbtRestartsTheLoserFromTheDonorsCheckpointWithANewConfig) {
  pbt p;
  p.perturbation_interval = 2;
  p.quantile_fraction = 0.5;
  p.resample_probability = 0;
  p.hyperparameter_mutations = {mutation{"x", {}, 0.0, 1.0}};
  p.seed = 5;
  rig r{p, 2, opts(2)};
  auto a = r.step();
  ASSERT_EQ(a.size(), 2u);
  for (auto& t : a) r.engine->on_checkpoint(t.trial, 2);
  EXPECT_TRUE(r.result(a[0].trial, 2, 0.9).empty());
  auto x = r.result(a[1].trial, 2, 0.1);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].what, kind::pause);
  EXPECT_EQ(x[0].reason, "exploits " + a[0].trial);
  EXPECT_TRUE(r.ended(a[1].trial).empty());
  auto again = r.step();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].trial, a[1].trial);
  EXPECT_EQ(again[0].restore_from, a[0].trial) << "the donor's checkpoint";
  EXPECT_EQ(again[0].restore_iteration, 2);
  double x0 = a[0].cfg["x"].get<double>(), x1 = again[0].cfg["x"].get<double>();
  EXPECT_TRUE(std::abs(x1 - x0 * 1.2) < 1e-9 || std::abs(x1 - x0 * 0.8) < 1e-9 || x1 == 0.0 || x1 == 1.0)
      << "the donor's x perturbed: " << x0 << " -> " << x1;
  EXPECT_EQ(r.engine->trials().at(a[1].trial).cfg["x"], again[0].cfg["x"]);
}

TEST(Engine, BadOptionsAreRefused) {
  auto search = ok(make_random_search({{"x", uniform(0, 1)}}, {.num_samples = 1}));
  auto sched = ok(make_scheduler(fifo{}, "acc", mode::max));
  auto o = opts(0);
  EXPECT_FALSE(experiment_engine::make(*search, *sched, o));
  o = opts(1);
  o.metric = "loss";
  auto e = experiment_engine::make(*search, *sched, o);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message().find("same metric and mode"), std::string::npos);
  o = opts(1);
  o.time_budget_s = -1;
  EXPECT_FALSE(experiment_engine::make(*search, *sched, o));
  o = opts(1);
  o.stop.max_time_s = 0;
  auto t = experiment_engine::make(*search, *sched, o);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("max_time_s"), std::string::npos);
}

TEST(Engine, ATrialsTimeLimitCountsOnlyTheTimeItRan) {
  // Each trial's clock starts when it is started (time before that, and time paused,
  // does not count); the limit is checked at its results.
  auto o = opts(1);
  o.stop.max_time_s = 10;
  rig r{fifo{}, 2, o};
  auto a = r.step(0);
  ASSERT_EQ(a.size(), 1u);
  auto id = a[0].trial;
  r.step(6);
  EXPECT_TRUE(r.result(id, 1, 0.5).empty());  // 6 s in
  r.step(10.5);
  auto stop = r.result(id, 2, 0.6);  // 10.5 s in
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].what, kind::stop);
  EXPECT_EQ(stop[0].reason, "ran for its 10 s");
  r.ended(id);
  EXPECT_EQ(r.state(id), "terminated");
  // The next trial starts at 11 s: its clock starts there.
  auto b = r.step(11);
  ASSERT_EQ(b.size(), 1u);
  r.step(19);
  EXPECT_TRUE(r.result(b[0].trial, 1, 0.5).empty());  // 8 s of its own
}

TEST(Engine, TheTimeBudgetStopsEveryTrialAndStartsNoMore) {
  auto o = opts(2);
  o.time_budget_s = 10;
  rig r{fifo{}, 10, o};
  auto a = r.step(0);
  ASSERT_EQ(a.size(), 2u);
  auto s = r.step(10.5);
  ASSERT_EQ(s.size(), 2u);
  for (auto& x : s) {
    EXPECT_EQ(x.what, kind::stop);
    EXPECT_NE(x.reason.find("time budget of 10 s"), std::string::npos);
    r.ended(x.trial);
  }
  EXPECT_TRUE(r.step(11).empty());
  EXPECT_TRUE(r.engine->finished());
  EXPECT_EQ(r.engine->trials().size(), 2u);
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST(Engine, ATrialThatEndsWellWithoutEverReportingTheMetricEndsInErrorAndIsNotRestarted) {
  auto o = opts(1);
  o.max_failures = 3;  // it would do the same again: not a failure to retry
  rig r{fifo{}, 2, o};
  auto a = r.step();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_TRUE(ok(r.engine->on_result(a[0].trial, 1, {{"loss", 0.5}})).empty());  // another metric only
  EXPECT_TRUE(r.ended(a[0].trial, true, "it reported loss").empty());
  EXPECT_EQ(r.state(a[0].trial), "error");
  EXPECT_EQ(r.engine->trials().at(a[0].trial).error, "it ended without reporting acc (it reported loss)");
  // One that reported it ends well, as before.
  auto b = r.step();
  ASSERT_EQ(b.size(), 1u);
  r.result(b[0].trial, 1, 0.7);
  r.ended(b[0].trial);
  EXPECT_EQ(r.state(b[0].trial), "terminated");
}

}  // namespace
}  // namespace tune
