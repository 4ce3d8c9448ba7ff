// The engine with hooks (tune/tuner/hooks.hpp): configurations asked of them, trials
// prepared there, their decisions, stop_all, libtune's own stop rules and PBT's explore
// finished there, each driven step by step.
#include <gtest/gtest.h>

#include "tune/tuner/engine.hpp"
#include "tune/tuner/plan.hpp"

namespace tune {
namespace {

using kind = engine_action::kind;

template <class T>
T ok(expected<T> e) {
  EXPECT_TRUE(e) << (e ? "" : e.error().message());
  return std::move(e).value();
}

engine_options opts(int concurrent) {
  engine_options o;
  o.metric = "acc";
  o.direction = mode::max;
  o.max_concurrent = concurrent;
  return o;
}

// An engine whose searcher is the hooks' (its stand-in never asked).
struct hooked {
  search_space space{{"x", uniform(0, 1)}, {"steps", 10}};
  std::unique_ptr<search_algorithm> search;
  std::unique_ptr<trial_scheduler> scheduler;
  std::unique_ptr<experiment_engine> engine;
  explicit hooked(engine_options o, scheduler_spec spec = fifo{}) {
    tune_config c;
    c.metric = o.metric;
    c.search = std::shared_ptr<searcher>(nullptr);
    c.driver.serves.suggests = true;
    c.driver.searcher = "TestSearch";
    experiment_plan plan;
    plan.config = c;
    search = ok(make_search(plan, space));
    scheduler = ok(make_scheduler(spec, o.metric, o.direction));
    o.hooks_suggest = true;
    o.accept_suggestion = suggestion_check(space);
    engine = ok(experiment_engine::make(*search, *scheduler, std::move(o)));
  }
};

std::vector<std::string> trials_of(const std::vector<engine_action>& a, kind k) {
  std::vector<std::string> out;
  for (auto& x : a)
    if (x.what == k) out.push_back(x.trial);
  return out;
}

TEST(EngineHooks, AsksForAsManyConfigurationsAsThereIsRoomAndStartsEachAsItComes) {
  auto o = opts(3);
  o.max_suggestions = 4;
  hooked h{o};
  auto a = ok(h.engine->step(0));
  ASSERT_EQ(trials_of(a, kind::suggest), (std::vector<std::string>{"trial-00001", "trial-00002", "trial-00003"}));
  EXPECT_TRUE(ok(h.engine->step(0)).empty()) << "asked: counts toward the concurrency";
  auto s = ok(h.engine->on_suggestion("trial-00002", config{{"x", 0.5}}));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].what, kind::start);
  EXPECT_EQ(s[0].cfg, (config{{"x", 0.5}, {"steps", 10}})) << "the space's constants added";
  // Not now: asked again later with the same id (ids stay in sequence).
  EXPECT_TRUE(ok(h.engine->on_suggestion("trial-00001", std::nullopt)).empty());
  EXPECT_TRUE(ok(h.engine->step(0.1)).empty()) << "not again before suggest_retry_s";
  auto again = ok(h.engine->step(1.0));
  EXPECT_EQ(trials_of(again, kind::suggest), std::vector<std::string>{"trial-00001"});
  ok(h.engine->on_suggestion("trial-00001", config{{"x", 0.1}}));
  ok(h.engine->on_suggestion("trial-00003", config{{"x", 0.3}}));
  // The fourth is the last: nothing more is asked for, and it ends once they all end.
  ok(h.engine->on_ended("trial-00002", true));  // without reporting acc: an error, and a slot
  auto fourth = ok(h.engine->step(1.1));
  EXPECT_EQ(trials_of(fourth, kind::suggest), std::vector<std::string>{"trial-00004"});
  ok(h.engine->on_suggestion("trial-00004", config{{"x", 0.4}}));
  for (auto id : {"trial-00001", "trial-00003", "trial-00004"}) {
    ok(h.engine->on_result(id, 1, {{"acc", 0.5}}));
    ok(h.engine->on_ended(id, true));
  }
  EXPECT_TRUE(ok(h.engine->step(2)).empty());
  EXPECT_TRUE(h.engine->finished());
  EXPECT_EQ(h.engine->trials().size(), 4u);
}

TEST(EngineHooks, ASearchersConfigurationOutsideTheSpaceIsAnErrorThatNamesIt) {
  hooked h{opts(1)};
  ok(h.engine->step(0));
  auto bad = h.engine->on_suggestion("trial-00001", config{{"x", 5.0}});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("trial-00001"), std::string::npos) << bad.error().message();
  EXPECT_NE(bad.error().message().find("\"x\""), std::string::npos) << bad.error().message();
  hooked g{opts(1)};
  ok(g.engine->step(0));
  auto missing = g.engine->on_suggestion("trial-00001", config{{"y", 1}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("no value for parameter \"x\""), std::string::npos) << missing.error().message();
  EXPECT_FALSE(g.engine->on_suggestion("trial-00009", config{{"x", 0.5}})) << "never asked for";
}

TEST(EngineHooks, ASearcherThatIsFinishedEndsTheSearchAndOneThatWaitsForeverIsNamed) {
  hooked h{opts(2)};
  auto a = ok(h.engine->step(0));
  ok(h.engine->on_suggestion("trial-00001", config{{"x", 0.5}}));
  ok(h.engine->on_suggestion("trial-00002", std::nullopt, true));
  ok(h.engine->on_result("trial-00001", 1, {{"acc", 1}}));
  ok(h.engine->on_ended("trial-00001", true));
  EXPECT_TRUE(ok(h.engine->step(1)).empty());
  EXPECT_TRUE(h.engine->finished());
  EXPECT_EQ(h.engine->trials().size(), 1u);

  auto o = opts(1);
  o.suggest_patience_s = 5;
  hooked w{o};
  ok(w.engine->step(0));
  ok(w.engine->on_suggestion("trial-00001", std::nullopt));
  for (double t = 1; t < 6; t += 1) {
    auto s = w.engine->step(t);
    ASSERT_TRUE(s) << "at " << t << ": " << s.error().message();
    for (auto& x : *s) ok(w.engine->on_suggestion(x.trial, std::nullopt));
  }
  auto late = w.engine->step(7);
  ASSERT_FALSE(late);
  EXPECT_NE(late.error().message().find("not ready: None"), std::string::npos) << late.error().message();
}

TEST(EngineHooks, APreparedTrialStartsWithItsOwnResourcesOrEndsInErrorBeforeItStarts) {
  auto search = ok(make_random_search({{"x", uniform(0, 1)}}, {.num_samples = 2, .seed = 1}));
  auto sched = ok(make_scheduler(fifo{}, "acc", mode::max));
  auto o = opts(2);
  o.hooks_prepare = true;
  auto engine = ok(experiment_engine::make(*search, *sched, o));
  auto a = ok(engine->step(0));
  ASSERT_EQ(trials_of(a, kind::prepare).size(), 2u);
  auto req = ok(trial_resources_of({{"cpu", 2}, {"gpu", 0.5}}, a[0].trial));
  auto s = ok(engine->on_prepared(a[0].trial, a[0].cfg, req));
  ASSERT_EQ(s.size(), 1u);
  ASSERT_TRUE(s[0].request);
  EXPECT_EQ(s[0].request->bundles.size(), 1u);
  EXPECT_EQ(s[0].request->bundles[0].to_json(), R"({"cpu":2,"gpu":0.5})");
  auto bad = trial_resources_of({{"gpu", 1.5}}, a[1].trial);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find(a[1].trial), std::string::npos) << bad.error().message();
  EXPECT_TRUE(ok(engine->on_prepared(a[1].trial, a[1].cfg, bad.error())).empty());
  EXPECT_EQ(engine->trials().at(a[1].trial).state, trial_state::error);
  EXPECT_NE(engine->trials().at(a[1].trial).error.find("1.5"), std::string::npos);
  ok(engine->on_result(a[0].trial, 1, {{"acc", 1}}));
  ok(engine->on_ended(a[0].trial, true));
  ok(engine->step(1));
  EXPECT_TRUE(engine->finished());
}

TEST(EngineHooks, TheHooksDecisionsStopPauseResumeAndCheckpointAndStopAllEndsEverything) {
  auto search = ok(make_random_search({{"x", uniform(0, 1)}}, {.num_samples = 4, .seed = 1}));
  auto sched = ok(make_scheduler(fifo{}, "acc", mode::max));
  auto engine = ok(experiment_engine::make(*search, *sched, opts(2)));
  auto a = ok(engine->step(0));
  ASSERT_EQ(a.size(), 2u);
  auto c = ok(engine->on_decision(a[0].trial, kind::checkpoint, "a callback asked for one"));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].what, kind::checkpoint);
  auto p = ok(engine->on_decision(a[0].trial, kind::pause, "paused by MyScheduler"));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].what, kind::pause);
  EXPECT_TRUE(ok(engine->on_decision(a[0].trial, kind::stop, "late")).empty()) << "asked already";
  ok(engine->on_ended(a[0].trial, true));
  EXPECT_EQ(engine->trials().at(a[0].trial).state, trial_state::paused);
  auto next = ok(engine->step(1));
  ASSERT_EQ(next.size(), 1u) << "its slot goes to a new trial";
  auto r = ok(engine->on_resume(a[0].trial));
  EXPECT_TRUE(r.empty()) << "no room now: it waits";
  ok(engine->on_result(a[1].trial, 1, {{"acc", 0.1}}));
  ok(engine->on_ended(a[1].trial, true));
  auto resumed = ok(engine->step(2));
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].trial, a[0].trial) << "resumed first, before a new one";
  auto all = engine->stop_all("MyStopper.stop_all() said so");
  EXPECT_EQ(trials_of(all, kind::stop).size(), 2u);
  EXPECT_EQ(engine->stopped_because(), "MyStopper.stop_all() said so");
  for (auto& s : all) ok(engine->on_ended(s.trial, true));
  EXPECT_TRUE(ok(engine->step(3)).empty());
  EXPECT_TRUE(engine->finished());
  EXPECT_EQ(engine->trials().size(), 3u) << "nothing more started";
}

TEST(EngineHooks, LibtunesStopRulesReadOtherMetricsAndStopATrialOrTheExperiment) {
  auto search = ok(make_random_search({{"x", uniform(0, 1)}}, {.num_samples = 3, .seed = 1}));
  auto sched = ok(make_scheduler(fifo{}, "acc", mode::max));
  auto o = opts(3);
  o.stoppers = {metric_at_least{"mean_accuracy", 0.98}, maximum_iteration_stopper{5},
                experiment_plateau_stopper{"loss", 0.001, 2, mode::min, 0}};
  auto engine = ok(experiment_engine::make(*search, *sched, o));
  EXPECT_EQ(engine->watched(), (std::vector<std::string>{"mean_accuracy", "loss"}));
  auto a = ok(engine->step(0));
  ASSERT_EQ(a.size(), 3u);
  // Ray's >= on a metric that is not the tuned one, whatever the mode.
  auto s = ok(engine->on_result(a[0].trial, 1, {{"acc", 0.1}, {"mean_accuracy", 0.99}}));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].what, kind::stop);
  EXPECT_NE(s[0].reason.find("mean_accuracy"), std::string::npos) << s[0].reason;
  // The fifth result, counted (not the iteration reported).
  for (int i = 1; i <= 4; ++i) EXPECT_TRUE(ok(engine->on_result(a[1].trial, 10 * i, {{"acc", 0.1}})).empty());
  auto fifth = ok(engine->on_result(a[1].trial, 50, {{"acc", 0.1}}));
  ASSERT_EQ(fifth.size(), 1u);
  EXPECT_NE(fifth[0].reason.find("maximum_iteration_stopper"), std::string::npos) << fifth[0].reason;
  // The best two values of loss over all results equal: the whole experiment stops.
  ok(engine->on_result(a[2].trial, 1, {{"acc", 0.2}, {"loss", 0.5}}));
  auto plateau = ok(engine->on_result(a[2].trial, 2, {{"acc", 0.2}, {"loss", 0.5}}));
  EXPECT_FALSE(trials_of(plateau, kind::stop).empty());
  EXPECT_NE(engine->stopped_because().find("experiment_plateau_stopper"), std::string::npos) << engine->stopped_because();
}

TEST(EngineHooks, PbtWithAFunctionAmongItsMutationsWaitsForItsExploreBeforeItStartsAgain) {
  pbt p;
  p.perturbation_interval = 2;
  p.quantile_fraction = 0.5;
  p.resample_probability = 1;  // every explore draws anew: with the function
  mutation m;
  m.key = "x";
  m.by_hooks = true;
  p.hyperparameter_mutations = {m};
  p.seed = 5;
  auto search = ok(make_random_search({{"x", uniform(0, 1)}}, {.num_samples = 2, .seed = 3}));
  auto sched = ok(make_scheduler(p, "acc", mode::max));
  auto o = opts(2);
  o.hooks_explore = true;
  auto engine = ok(experiment_engine::make(*search, *sched, o));
  auto a = ok(engine->step(0));
  for (auto& t : a) engine->on_checkpoint(t.trial, 2);
  ok(engine->on_result(a[0].trial, 2, {{"acc", 0.9}}));
  auto x = ok(engine->on_result(a[1].trial, 2, {{"acc", 0.1}}));
  ASSERT_EQ(x.size(), 2u);
  EXPECT_EQ(x[0].what, kind::explore);
  EXPECT_EQ(x[0].restore_from, a[0].trial);
  EXPECT_EQ(x[0].resample, std::vector<std::string>{"x"});
  EXPECT_EQ(x[1].what, kind::pause);
  ok(engine->on_ended(a[1].trial, true));
  EXPECT_TRUE(ok(engine->step(1)).empty()) << "its new configuration is not known yet";
  auto again = ok(engine->on_explored(a[1].trial, config{{"x", 0.77}}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].what, kind::start);
  EXPECT_EQ(again[0].cfg, (config{{"x", 0.77}}));
  EXPECT_EQ(again[0].restore_from, a[0].trial);
}

}  // namespace
}  // namespace tune
