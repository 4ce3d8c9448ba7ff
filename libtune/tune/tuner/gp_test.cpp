// The GP search: finds minima of smooth functions in few evaluations, spreads pending
// suggestions, handles every numeric domain and choices of values, and says what it
// cannot model.
#include "tune/tuner/problems.hpp"
#include "tune/tuner/search.hpp"
#include "tune/tuner/search_testing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace tune {
namespace {

using search_testing::has;
using search_testing::ok;
using search_testing::run;

double branin_of(const config& c) { return branin(c["x1"].get<double>(), c["x2"].get<double>()); }

TEST(Gp, FindsBraninsMinimumInFewEvaluations) {
  search_space s{{"x1", uniform(-5, 10)}, {"x2", uniform(0, 15)}};
  std::vector<double> best;
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    auto alg = ok(make_gp(s, {.num_samples = 40, .seed = seed}));
    double b = INFINITY;
    for (const auto& c : run(*alg, branin_of)) b = std::min(b, branin_of(c));
    best.push_back(b);
  }
  std::sort(best.begin(), best.end());
  std::printf("branin, gp, median best of 40 evaluations over 5 seeds: %.5f (min 0.397887)\n", best[2]);
  // Random search needs thousands of evaluations for this; TPE reaches 0.42-0.46 in 100.
  EXPECT_LT(best[2], 0.41);
}

TEST(Gp, PastMaxFitTrialsItFitsOnTheBestAndTheLatest) {
  // Fitted on 12 of the trials only, the GP still beats random search (same seeds).
  search_space s{{"x1", uniform(-5, 10)}, {"x2", uniform(0, 15)}};
  std::vector<double> gp, rnd;
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    auto alg = ok(make_gp(s, {.num_samples = 40, .max_fit_trials = 12, .seed = seed}));
    auto r = ok(make_random_search(s, {.num_samples = 40, .seed = seed}));
    double b = INFINITY, c = INFINITY;
    for (const auto& x : run(*alg, branin_of)) b = std::min(b, branin_of(x));
    for (const auto& x : run(*r, branin_of)) c = std::min(c, branin_of(x));
    gp.push_back(b), rnd.push_back(c);
  }
  std::sort(gp.begin(), gp.end());
  std::sort(rnd.begin(), rnd.end());
  std::printf("branin, 40 evaluations, median of 5: gp fitted on 12 %.4f, random %.4f\n", gp[2], rnd[2]);
  EXPECT_LT(gp[2], rnd[2]);
  EXPECT_TRUE(has(make_gp(s, {.max_fit_trials = 2}).error().message(), "max_fit_trials must be >= 4"));
}

TEST(Gp, SameSeedSameConfigs) {
  search_space s{{"x", uniform(0, 1)}, {"n", randint(1, 9)}, {"k", choice({"a", "b", "c"})}};
  auto f = [](const config& c) {
    return std::pow(c["x"].get<double>() - 0.3, 2) + 0.1 * c["n"].get<int>() + (c["k"] == "b" ? 0 : 1);
  };
  auto a = run(*ok(make_gp(s, {.num_samples = 16, .seed = 4})), f);
  auto b = run(*ok(make_gp(s, {.num_samples = 16, .seed = 4})), f);
  ASSERT_EQ(a.size(), 16u);
  EXPECT_EQ(a, b);
}

TEST(Gp, RespectsEveryDomainAndLearnsAChoice) {
  search_space s{{"lr", loguniform(1e-5, 1e-1)}, {"n", qrandint(0, 100, 10)}, {"k", choice({"a", "b", "c"})},
                 {"z", randn(0, 1)},             {"g", grid_search({1, 2})},   {"model", search_space{{"w", randint(1, 5)}}},
                 {"fixed", "yes"}};
  auto f = [](const config& c) {
    return std::fabs(std::log10(c["lr"].get<double>()) + 3) + std::fabs(c["n"].get<int>() - 40) / 50.0 +
           (c["k"] == "c" ? 0 : 1) + std::fabs(c["z"].get<double>() - 0.5) + (c["g"] == 2 ? 0 : 0.5) +
           0.1 * c["model"]["w"].get<int>();
  };
  int c_late = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    auto cs = run(*ok(make_gp(s, {.num_samples = 40, .seed = seed})), f);
    ASSERT_EQ(cs.size(), 40u);
    for (std::size_t i = 0; i < cs.size(); ++i) {
      const auto& c = cs[i];
      ASSERT_TRUE(s.check(c)) << s.check(c).message() << " in " << c.dump();
      if (i >= 25) c_late += c["k"] == "c";
    }
  }
  std::printf("the best option in the last 15 of 40, 3 seeds: %d of 45\n", c_late);
  EXPECT_GT(c_late, 20);  // random: 15 (measured: 24; the GP still explores 8 other coordinates)
  // With one other parameter it settles on the best option.
  search_space two{{"x", uniform(0, 1)}, {"k", choice({"a", "b", "c"})}};
  int best_option = 0;
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    auto cs = run(*ok(make_gp(two, {.num_samples = 30, .seed = seed})), [](const config& c) {
      return std::pow(c["x"].get<double>() - 0.3, 2) + (c["k"] == "c" ? 0 : 1);
    });
    for (std::size_t i = 10; i < cs.size(); ++i) best_option += cs[i]["k"] == "c";
  }
  EXPECT_GT(best_option, 50) << "of 60";  // measured: 60
}

TEST(Gp, PendingSuggestionsSpreadOut) {
  // Eight suggestions before any result (after the startup): fantasized at the GP's
  // mean, they must not pile onto one point.
  search_space s{{"x", uniform(0, 1)}, {"y", uniform(0, 1)}};
  auto f = [](const config& c) { return std::pow(c["x"].get<double>() - 0.7, 2) + std::pow(c["y"].get<double>() - 0.2, 2); };
  for (bool fantasize : {true, false}) {
    auto alg = ok(make_gp(s, {.n_startup_trials = 10, .fantasize_pending = fantasize, .seed = 3}));
    for (int i = 0; i < 10; ++i) {
      auto c = alg->suggest('s' + std::to_string(i));
      ASSERT_TRUE(c && *c);
      ASSERT_TRUE(alg->on_complete('s' + std::to_string(i), f(**c)));
    }
    std::vector<std::pair<double, double>> pts;
    for (int i = 0; i < 8; ++i) {
      auto c = alg->suggest('p' + std::to_string(i));
      ASSERT_TRUE(c && *c);
      pts.emplace_back((**c)["x"].get<double>(), (**c)["y"].get<double>());
    }
    double closest = INFINITY, mean = 0;
    for (std::size_t i = 0; i < pts.size(); ++i)
      for (std::size_t j = i + 1; j < pts.size(); ++j) {
        const double d = std::hypot(pts[i].first - pts[j].first, pts[i].second - pts[j].second);
        closest = std::min(closest, d), mean += d / 28;
      }
    std::printf("8 pending suggestions: closest pair %.3g, mean distance %.3g (fantasize %d)\n", closest, mean, fantasize);
    // Measured: mean distance 0.106 with, 1.4e-6 without (the same point, up to the
    // optimizer, eight times).
    if (fantasize) EXPECT_GT(mean, 0.05);
    else EXPECT_LT(mean, 1e-3);
  }
}

TEST(Gp, ErrorsNameWhatItCannotModel) {
  auto sub = make_gp({{"opt", choice({search_space{{"m", uniform(0, 1)}}, search_space{{"b", 1}}})}});
  ASSERT_FALSE(sub);
  EXPECT_TRUE(has(sub.error().message(), "gp: parameter \"opt\""));
  EXPECT_TRUE(has(sub.error().message(), "use tpe"));
  auto cond = make_gp({{"x", uniform(0, 1)}, {"y", conditional([](const config&) -> domain { return 1; })}});
  ASSERT_FALSE(cond);
  EXPECT_TRUE(has(cond.error().message(), "parameter \"y\" is conditional"));
  EXPECT_TRUE(has(make_gp({{"x", uniform(0, 1)}}, {.n_candidates = 0}).error().message(), "n_candidates must be >= 1"));
  EXPECT_TRUE(has(make_gp({{"x", uniform(0, 1)}}, {.points_to_evaluate = {{{"x", 3}}}}).error().message(),
                  "gp: points_to_evaluate[0]"));
  // Only constants: nothing to model, random (constant) configs.
  auto constants = ok(make_gp({{"a", 1}}, {.num_samples = 12}));
  EXPECT_EQ(run(*constants, [](const config&) { return 0.0; }).size(), 12u);
}

TEST(Gp, MaxModeAndPointsToEvaluate) {
  search_space s{{"x", uniform(0, 1)}};
  auto alg = ok(make_gp(s, {.metric_mode = mode::max, .num_samples = 25, .seed = 2,
                            .points_to_evaluate = {{{"x", 0.5}}}}));
  auto cs = run(*alg, [](const config& c) { return -std::pow(c["x"].get<double>() - 0.8, 2); });
  ASSERT_EQ(cs.size(), 25u);
  EXPECT_EQ(cs[0]["x"], 0.5);
  double best = 1;
  for (const auto& c : cs) best = std::min(best, std::fabs(c["x"].get<double>() - 0.8));
  EXPECT_LT(best, 0.01);
}

}  // namespace
}  // namespace tune
