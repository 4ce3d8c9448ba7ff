// The node's standby copies: which sets are kept and which files go.
#include "standby.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

using shas = std::vector<std::string>;

TEST(StandbyCopies, KeepsTheNewestIterationOfEachTrialAndDropsTheOlderFiles) {
  standby_copies c{100};
  EXPECT_EQ(c.iteration("alice/t1"), -1);
  auto first = c.keep("alice/t1", 3, {"a", "b"}, 10);
  EXPECT_TRUE(first.kept);
  EXPECT_EQ(first.unnamed, shas{});
  auto second = c.keep("alice/t1", 5, {"b", "c"}, 10);
  EXPECT_TRUE(second.kept);
  EXPECT_EQ(second.unnamed, shas{"a"}) << "b is named by the new set still";
  EXPECT_EQ(c.iteration("alice/t1"), 5);
}

TEST(StandbyCopies, AnOlderOrEqualSetFetchedMeanwhileIsNotKept) {
  standby_copies c{100};
  c.keep("alice/t1", 5, {"a"}, 10);
  auto late = c.keep("alice/t1", 4, {"a", "x"}, 10);
  EXPECT_FALSE(late.kept);
  EXPECT_EQ(late.unnamed, shas{"x"}) << "its own files go, except those the kept set names";
  EXPECT_FALSE(c.keep("alice/t1", 5, {"y"}, 10).kept);
  EXPECT_EQ(c.iteration("alice/t1"), 5);
}

TEST(StandbyCopies, AFileTwoSetsNameStaysUntilBothAreGone) {
  standby_copies c{100};
  c.keep("alice/t1", 1, {"shared", "a"}, 10);
  c.keep("bob/t2", 1, {"shared", "b"}, 10);
  EXPECT_EQ(c.drop("alice/t1"), shas{"a"});
  EXPECT_EQ(c.drop("bob/t2"), (shas{"shared", "b"}));
  EXPECT_EQ(c.drop("bob/t2"), shas{}) << "dropping twice is fine";
}

TEST(StandbyCopies, TheOldestSetsGoWhenSpaceRunsOutNeverTheNewOne) {
  standby_copies c{100};
  c.keep("t1", 1, {"a"}, 40);
  c.keep("t2", 1, {"b"}, 40);
  c.keep("t1", 2, {"c"}, 40);  // t1 is now newer than t2
  auto big = c.keep("t3", 1, {"d"}, 50);
  EXPECT_TRUE(big.kept);
  EXPECT_EQ(big.unnamed, shas{"b"}) << "t2 is the oldest";
  EXPECT_EQ(c.iteration("t2"), -1);
  EXPECT_EQ(c.iteration("t1"), 2);
  auto huge = c.keep("t4", 1, {"e"}, 100);
  EXPECT_TRUE(huge.kept);
  EXPECT_EQ(huge.unnamed, (shas{"c", "d"}));
  EXPECT_EQ(c.sets().size(), 1u);
}

}  // namespace
}  // namespace tune
