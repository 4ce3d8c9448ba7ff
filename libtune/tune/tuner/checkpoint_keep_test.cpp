#include "tune/tuner/checkpoint_keep.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

checkpoint_rules keep(int n, std::string score = "", mode order = mode::max) {
  checkpoint_rules r;
  r.num_to_keep = n;
  r.score_attribute = std::move(score);
  r.score_order = order;
  return r;
}

TEST(CheckpointKeep, ZeroKeepsEveryOne) {
  EXPECT_EQ(checkpoints_kept(keep(0), {1, 2, 3, 4}, {}, {}), (std::set<int64_t>{1, 2, 3, 4}));
}

TEST(CheckpointKeep, WithoutAScoreTheNewestStay) {
  EXPECT_EQ(checkpoints_kept(keep(2), {1, 2, 3, 4}, {}, {4}), (std::set<int64_t>{3, 4}));
  EXPECT_EQ(checkpoints_kept(keep(1), {5, 1, 3}, {}, {}), (std::set<int64_t>{5}));
}

TEST(CheckpointKeep, TheBestByScoreStayAndTheNewestAlways) {
  std::map<int64_t, double> acc{{1, 0.9}, {2, 0.5}, {3, 0.7}, {4, 0.1}};
  EXPECT_EQ(checkpoints_kept(keep(2, "acc"), {1, 2, 3, 4}, acc, {4}), (std::set<int64_t>{1, 3, 4}));
  EXPECT_EQ(checkpoints_kept(keep(1, "acc", mode::min), {1, 2, 3, 4}, acc, {}), (std::set<int64_t>{4}));
  EXPECT_EQ(checkpoints_kept(keep(1, "acc", mode::min), {1, 2, 3}, acc, {}), (std::set<int64_t>{2}));
}

TEST(CheckpointKeep, OneWithoutItsScoreStaysAndTiesKeepTheNewer) {
  std::map<int64_t, double> acc{{1, 0.5}, {3, 0.5}};
  EXPECT_EQ(checkpoints_kept(keep(1, "acc"), {1, 2, 3}, acc, {}), (std::set<int64_t>{2, 3}));
  acc[2] = 0.1;
  EXPECT_EQ(checkpoints_kept(keep(1, "acc"), {1, 2, 3}, acc, {}), (std::set<int64_t>{3}));
}

TEST(CheckpointKeep, APinnedOneStaysWhateverItsRank) {
  EXPECT_EQ(checkpoints_kept(keep(1), {1, 2, 3}, {}, {1, 3}), (std::set<int64_t>{1, 3}));
}

TEST(CheckpointKeep, OnlyACheckpointTheRuleDropsAtOnceIsNotCopied) {
  EXPECT_TRUE(checkpoint_needless(keep(1), 2, {3}, {}, {3}));    // a newer one is in already
  EXPECT_FALSE(checkpoint_needless(keep(2), 2, {3}, {}, {3}));   // room for two
  EXPECT_FALSE(checkpoint_needless(keep(0), 2, {3, 4}, {}, {}));  // every one kept
  EXPECT_FALSE(checkpoint_needless(keep(1), 4, {3}, {}, {4}));   // the newest reported
  std::map<int64_t, double> acc{{3, 0.9}};
  EXPECT_FALSE(checkpoint_needless(keep(1, "acc"), 2, {3}, acc, {3}));  // its score is not known yet
  acc[2] = 0.95;
  EXPECT_FALSE(checkpoint_needless(keep(1, "acc"), 2, {3}, acc, {3}));  // better than the one in
  acc[2] = 0.1;
  EXPECT_TRUE(checkpoint_needless(keep(1, "acc"), 2, {3}, acc, {3}));
}

}  // namespace
}  // namespace tune
