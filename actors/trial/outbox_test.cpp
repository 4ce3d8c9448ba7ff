// A trial's outbox: what goes to its owner at once, what waits for a greeting, what is
// sent again after a broken route, what is kept, and when the owner is behind.
#include "outbox.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tune {
namespace {

using box = outbox<std::string>;
using texts = std::vector<std::string>;

TEST(Outbox, WaitsForTheOwnersFirstGreetingThenSendsAllInOrder) {
  box b{100, 10, true};
  EXPECT_FALSE(b.greeted());
  EXPECT_FALSE(b.push("started"));
  EXPECT_FALSE(b.push("result 1"));
  auto r = b.greet(0);
  EXPECT_EQ(r.again, (texts{"started", "result 1"}));
  EXPECT_EQ(r.lost, 0u);
  EXPECT_TRUE(b.push("result 2")) << "greeted: it goes at once";
  EXPECT_EQ(b.end(), 3u);
}

TEST(Outbox, WithoutAnOwnerNothingIsKeptOrSent) {
  box b{100, 10, false};
  EXPECT_TRUE(b.greeted());
  EXPECT_FALSE(b.push("x"));
  EXPECT_EQ(b.kept(), 0u);
  EXPECT_FALSE(b.behind());
  EXPECT_FALSE(b.hold());
}

TEST(Outbox, AfterAHoldTheOwnerGetsWhatItMissedFromItsCount) {
  box b{100, 1000, true};
  b.greet(0);
  for (auto m : {"a", "b", "c"}) b.push(m);
  b.ack(1);  // it has "a"
  EXPECT_TRUE(b.hold());
  EXPECT_FALSE(b.hold()) << "held already";
  EXPECT_FALSE(b.push("d"));
  EXPECT_FALSE(b.push("e"));
  EXPECT_EQ(b.since_hold(), 2u);
  auto r = b.greet(2);  // "b" reached it before the route broke; "c" did not
  EXPECT_EQ(r.again, (texts{"c", "d", "e"}));
  EXPECT_EQ(r.lost, 0u);
  EXPECT_TRUE(b.greeted());
  EXPECT_EQ(b.greet(5).again, texts{}) << "nothing missing: nothing sent twice";
}

TEST(Outbox, WhatTheOwnerAcknowledgedIsNotKept) {
  box b{100, 1000, true};
  b.greet(0);
  for (int i = 0; i < 10; ++i) b.push(std::to_string(i));
  EXPECT_EQ(b.kept(), 10u);
  b.ack(7);
  EXPECT_EQ(b.kept(), 3u);
  b.ack(3);
  EXPECT_EQ(b.kept(), 3u) << "an older acknowledgement changes nothing";
}

TEST(Outbox, WhileGreetedAtMostKeptAreKeptAndAGreetingFromBeforeThemCountsTheLost) {
  box b{4, 1000, true};
  b.greet(0);
  for (int i = 0; i < 10; ++i) b.push(std::to_string(i));
  EXPECT_EQ(b.kept(), 4u);
  b.hold();
  auto r = b.greet(2);
  EXPECT_EQ(r.lost, 4u) << "messages 2..5 are no longer kept";
  EXPECT_EQ(r.again, (texts{"6", "7", "8", "9"}));
}

TEST(Outbox, WhileHeldEverythingIsKept) {
  box b{4, 1000, true};
  for (int i = 0; i < 10; ++i) b.push(std::to_string(i));
  EXPECT_EQ(b.kept(), 10u) << "never greeted yet: nothing may be lost";
  EXPECT_EQ(b.greet(0).again.size(), 10u);
  EXPECT_EQ(b.kept(), 4u);
}

TEST(Outbox, TheOwnerIsBehindBeyondItsWindow) {
  box b{100, 3, true};
  b.greet(0);
  for (int i = 0; i < 3; ++i) b.push("m");
  EXPECT_FALSE(b.behind());
  b.push("m");
  EXPECT_TRUE(b.behind());
  b.ack(2);
  EXPECT_FALSE(b.behind());
}

}  // namespace
}  // namespace tune
