// Dominance, fronts and hypervolumes, against values worked out by hand.
#include "tune/core/pareto.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <random>

namespace tune {
namespace {

TEST(Pareto, DominanceAndFronts) {
  EXPECT_TRUE(dominates({1, 2}, {2, 2}));
  EXPECT_FALSE(dominates({1, 2}, {1, 2}));  // equal: neither
  EXPECT_FALSE(dominates({1, 3}, {2, 2}));
  std::vector<point> pts{{1, 5}, {2, 3}, {3, 1}, {2, 4}, {4, 4}, {5, 5}, {2, 3}};
  EXPECT_EQ(nondominated_ranks(pts), (std::vector<int>{0, 0, 0, 1, 2, 3, 0}));  // (2,4) < (4,4) < (5,5)
  EXPECT_EQ(pareto_front(pts), (std::vector<std::size_t>{0, 1, 2, 6}));
  EXPECT_TRUE(pareto_front({}).empty());
}

TEST(Pareto, HypervolumeIn2dAnd3d) {
  // A staircase of three points under the reference (4, 4): 3 + 2 + 1 ... by hand:
  // (1,3): [1,4]x[3,4] = 3; (2,2) adds [2,4]x[2,3] = 2; (3,1) adds [3,4]x[1,2] = 1.
  EXPECT_DOUBLE_EQ(hypervolume({{1, 3}, {2, 2}, {3, 1}}, {4, 4}), 6);
  // Dominated points and points outside the reference add nothing.
  EXPECT_DOUBLE_EQ(hypervolume({{1, 3}, {2, 2}, {3, 1}, {3, 3}, {5, 0}, {4, 1}}, {4, 4}), 6);
  EXPECT_DOUBLE_EQ(hypervolume({}, {1, 1}), 0);
  // 3-D: one point is a box; two overlapping boxes by inclusion-exclusion.
  EXPECT_DOUBLE_EQ(hypervolume({{0, 0, 0}}, {1, 2, 3}), 6);
  // (0,0,1) -> 2x2x1 = 4 ... boxes [0,2]^2x[1,2] and [1,2]x[1,2]x[0,2] (volume 2), overlap [1,2]^2x[1,2] = 1.
  EXPECT_DOUBLE_EQ(hypervolume({{0, 0, 1}, {1, 1, 0}}, {2, 2, 2}), 4 + 2 - 1);
}

TEST(Pareto, GreedyHypervolumeSubsetTakesTheLargestGainFirst) {
  std::vector<point> pts{{1, 3}, {2, 2}, {3, 1}, {2.9, 2.9}};
  auto pick = greedy_hypervolume_subset(pts, 2, {4, 4});
  ASSERT_EQ(pick.size(), 2u);
  EXPECT_EQ(pick[0], 1u);  // (2,2) alone: 4; the others 3
  EXPECT_EQ(greedy_hypervolume_subset(pts, 9, {4, 4}).size(), 4u);
}

// The front by the sweep (2-D) and by checking against the front so far (more) is the
// non-dominated sort's front 0, ties and duplicates included.
TEST(Pareto, TheFrontIsTheSortsFirstFrontWithTiesAndDuplicates) {
  std::mt19937_64 rng{7};
  for (std::size_t dims : {2u, 3u, 4u})
    for (int round = 0; round < 50; ++round) {
      std::uniform_int_distribution<int> coarse{0, 6};  // few values: many ties and duplicates
      std::vector<point> pts(40);
      for (auto& p : pts) {
        p.resize(dims);
        for (auto& v : p) v = coarse(rng);
      }
      const auto ranks = nondominated_ranks(pts);
      std::vector<std::size_t> expected;
      for (std::size_t i = 0; i < pts.size(); ++i)
        if (ranks[i] == 0) expected.push_back(i);
      EXPECT_EQ(pareto_front(pts), expected) << dims << " objectives, round " << round;
    }
}

// The head computes the front on every refresh of an experiment's page: 100,000 trials
// must not take the n^2 time and memory of the full sort.
TEST(Pareto, TheFrontOfAHundredThousandPointsIsQuick) {
  std::mt19937_64 rng{1};
  std::uniform_real_distribution<double> u{0, 1};
  std::vector<point> pts(100000);
  for (auto& p : pts) p = {u(rng), u(rng)};
  const auto start = std::chrono::steady_clock::now();
  const auto front = pareto_front(pts);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(front.empty());
  for (std::size_t i = 1; i < front.size(); ++i) EXPECT_FALSE(dominates(pts[front[i - 1]], pts[front[i]]));
  EXPECT_LT(s, 2.0) << "the front of 100,000 points took " << s << " s";
}

}  // namespace
}  // namespace tune
