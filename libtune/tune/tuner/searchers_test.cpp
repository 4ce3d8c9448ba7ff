// libtune's algorithms behind tune::searcher: the same configurations as the native
// algorithm, save and restore that continue exactly, and the errors.
#include "tune/tuner/searchers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tune/tuner/search_testing.hpp"

namespace tune {
namespace {

using search_testing::has;

search_space space2() { return search_space{{"x", uniform(-5, 5)}, {"y", loguniform(1e-3, 1)}, {"k", 3}}; }
double loss(const config& c) { return std::pow(c["x"].get<double>() - 1, 2) + std::log(c["y"].get<double>()); }

search_properties props(search_space s, int n = 40, uint64_t seed = 7) {
  search_properties p;
  p.metric = "loss";
  p.mode = mode::min;
  p.space = std::move(s);
  p.num_samples = n;
  p.seed = seed;
  return p;
}

nlohmann::json result(const config& c, int64_t it) { return {{"loss", loss(c)}, {"training_iteration", it}}; }

// Runs the searcher as the engine would: suggest, a result, complete; `from`..`to` ids.
std::vector<config> drive(searcher& s, int from, int to) {
  std::vector<config> out;
  for (int i = from; i < to; ++i) {
    auto id = "t" + std::to_string(i);
    auto c = s.suggest(id);
    if (!c) break;
    out.push_back(*c);
    s.on_trial_result(id, result(*c, 1));
    s.on_trial_complete(id, result(*c, 1), false);
  }
  return out;
}

TEST(Searchers, TpeAsASearcherSuggestsWhatNativeTpeDoes) {
  auto s = tpe_searcher({.n_startup_trials = 5});
  ASSERT_TRUE(s->set_search_properties(props(space2())));
  auto via = drive(*s, 0, 30);

  auto native = search_testing::ok(make_tpe(space2(), {.metric_mode = mode::min, .num_samples = 40,
                                                        .n_startup_trials = 5, .seed = 7}));
  std::vector<config> direct;
  for (int i = 0; i < 30; ++i) {
    auto id = "t" + std::to_string(i);
    auto c = native->suggest(id);
    ASSERT_TRUE(c && c->has_value());
    direct.push_back(**c);
    ASSERT_TRUE(native->on_complete(id, loss(**c)));
  }
  EXPECT_EQ(via, direct);
  EXPECT_EQ(via[0]["k"], 3) << "the space's constants are in each configuration";
  EXPECT_EQ(s->name(), "tpe");
}

TEST(Searchers, RestoredFromItsSavedStateItContinuesExactly) {
  for (auto make : {+[] { return tpe_searcher({.n_startup_trials = 4}); }, +[] { return gp_searcher({.n_startup_trials = 4}); },
                    +[] { return bohb_searcher(); }, +[] { return random_searcher(); }}) {
    auto a = make();
    ASSERT_TRUE(a->set_search_properties(props(space2())));
    drive(*a, 0, 12);
    // One trial pending when the state is kept: suggested, with a result, not complete.
    auto pending = a->suggest("t12");
    ASSERT_TRUE(pending);
    a->on_trial_result("t12", result(*pending, 1));
    auto state = a->save();
    auto rest_a = drive(*a, 13, 20);

    auto b = make();
    ASSERT_TRUE(b->set_search_properties(props(space2())));
    auto st = b->restore(state);
    ASSERT_TRUE(st) << a->name() << ": " << st.message();
    auto rest_b = drive(*b, 13, 20);
    EXPECT_EQ(rest_a, rest_b) << a->name() << " continues as the saved one did";
    b->on_trial_complete("t12", result(*pending, 1), false);  // the pending trial is still known

    auto other = make();
    ASSERT_TRUE(other->set_search_properties(props(space2(), 40, 8)));
    auto bad = other->restore(state);
    EXPECT_FALSE(bad) << a->name();
    EXPECT_TRUE(has(bad.message(), "the space or the seed changed")) << bad.message();
  }
}

TEST(Searchers, ResultsOfTrialsItNeverSuggestedAreIgnored) {
  // A trial suggested after the state it was restored from (its suggestion was lost with
  // the program): its results teach nothing, and nothing fails.
  auto s = tpe_searcher();
  ASSERT_TRUE(s->set_search_properties(props(space2())));
  s->on_trial_result("unknown", {{"loss", 1.0}});
  s->on_trial_complete("unknown", {{"loss", 1.0}}, false);
  auto c = s->suggest("t0");
  ASSERT_TRUE(c);
  s->on_trial_complete("t0", result(*c, 1), false);
  s->on_trial_complete("t0", result(*c, 1), false);  // told twice: the second is ignored
  auto b = bohb_searcher();
  ASSERT_TRUE(b->set_search_properties(props(space2())));
  auto d = b->suggest("t0");
  b->on_trial_complete("t0", result(*d, 1), false);
  b->on_trial_result("t0", result(*d, 2));  // a result after its end
  EXPECT_EQ(nlohmann::json::parse(s->save())["log"].size(), 2u);
}

TEST(Searchers, AFailedTrialCountsWithItsLastValueOrIsForgotten) {
  auto s = tpe_searcher({.n_startup_trials = 1});
  ASSERT_TRUE(s->set_search_properties(props(space2())));
  auto c = s->suggest("t0");
  s->on_trial_result("t0", result(*c, 1));
  s->on_trial_complete("t0", nullptr, true);  // no last result given: the one it reported counts
  auto d = s->suggest("t1");
  s->on_trial_complete("t1", nullptr, true);  // never reported: forgotten
  auto state = nlohmann::json::parse(s->save());
  ASSERT_EQ(state["log"].size(), 4u);
  EXPECT_EQ(state["log"][1]["v"], loss(*c));
  EXPECT_FALSE(state["log"][3].contains("v"));
}

TEST(Searchers, BadUseIsNamed) {
  auto s = gp_searcher();
  EXPECT_THROW(s->suggest("t0"), std::runtime_error) << "before set_search_properties";
  auto p = props(space2());
  p.metrics = {{"loss", mode::min}, {"ms", mode::min}};
  auto st = s->set_search_properties(p);
  EXPECT_FALSE(st);
  EXPECT_TRUE(has(st.message(), "gp models one metric")) << st.message();

  auto g = gp_searcher();
  st = g->set_search_properties(
      props(search_space{{"x", uniform(0, 1)}, {"y", conditional([](const config&) -> domain { return 1; })}}));
  EXPECT_FALSE(st) << "the GP's own check of the space";
  EXPECT_TRUE(has(st.message(), "parameter \"y\" is conditional")) << st.message();

  auto r = random_searcher();
  st = r->set_search_properties(props(search_space{{"a", grid_search({1, 2})}}));
  EXPECT_FALSE(st);
  EXPECT_TRUE(has(st.message(), "random_search_alg")) << st.message();

  auto t = tpe_searcher();
  ASSERT_TRUE(t->set_search_properties(props(space2())));
  EXPECT_FALSE(t->restore("not json"));
  EXPECT_FALSE(t->restore(gp_searcher()->save())) << "another searcher's state";
  for (auto bad : {R"({"searcher": "tpe", "log": [{"s": 3}]})", R"({"searcher": "tpe", "log": [{"s": "t9"}]})",
                   R"({"searcher": "tpe", "log": [{"r": "t9", "v": 1}]})"}) {
    auto damaged = t->restore(bad);
    EXPECT_FALSE(damaged) << bad;
    EXPECT_TRUE(has(damaged.message(), "its saved state is damaged")) << damaged.message();
  }
  EXPECT_TRUE(t->suggest("t0")) << "a refused state leaves it as it was";
}

TEST(Searchers, TpeModelsEveryObjectiveAndConstraint) {
  // Every objective and constraint reaches the algorithm as native TPE gets them (its
  // MOTPE and constraint handling are search_test.cpp's).
  auto p = props(space2(), 50);
  p.metrics = {{"loss", mode::min}, {"size", mode::max}};
  p.constraints = {"over"};
  auto s = tpe_searcher({.n_startup_trials = 5});
  ASSERT_TRUE(s->set_search_properties(p));
  auto native = search_testing::ok(make_tpe(space2(), {.num_samples = 50, .n_startup_trials = 5, .seed = 7,
                                                        .directions = {mode::min, mode::max}}));
  auto outcome = [](const config& c) {
    double x = c["x"].get<double>();
    return nlohmann::json{{"loss", loss(c)}, {"size", x}, {"over", x - 2}};
  };
  for (int i = 0; i < 40; ++i) {
    auto id = "t" + std::to_string(i);
    auto c = s->suggest(id);
    auto d = native->suggest(id);
    ASSERT_TRUE(c && d && d->has_value());
    ASSERT_EQ(*c, **d) << "trial " << i;
    auto r = outcome(*c);
    s->on_trial_complete(id, r, false);
    ASSERT_TRUE(native->on_complete(id, {r["loss"].get<double>(), r["size"].get<double>()}, {r["over"].get<double>()}));
  }
  auto state = nlohmann::json::parse(s->save());
  EXPECT_EQ(state["log"][1]["v"].size(), 2u);
  EXPECT_EQ(state["log"][1]["k"].size(), 1u);
  // A trial whose result lacks an objective is forgotten, not a failure.
  ASSERT_TRUE(s->suggest("t40"));
  s->on_trial_complete("t40", {{"loss", 1.0}}, false);
  EXPECT_FALSE(nlohmann::json::parse(s->save())["log"].back().contains("v"));
}

}  // namespace
}  // namespace tune
