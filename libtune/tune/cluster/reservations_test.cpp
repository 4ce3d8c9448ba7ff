#include "tune/cluster/reservations.hpp"

#include <gtest/gtest.h>

#include <random>

namespace tune {
namespace {

using namespace std::chrono_literals;
constexpr int64_t GiB = int64_t{1} << 30;

node_resources four_gpus() {
  std::vector<gpu_instance> cards;
  for (int i = 0; i < 4; ++i) cards.push_back({i, "GPU-" + std::to_string(i), "bus", "H200", 80 * GiB, false});
  resource_set host;
  host.set_cpu(quantity::whole(16)).set_memory(64 * GiB);
  return *node_resources::make(host, cards);
}

resource_set req(std::initializer_list<std::pair<std::string_view, double>> a) { return *resource_set::make(a); }

struct ReservationsTest : ::testing::Test {
  reservation_table table{four_gpus()};
  reservation_table::time_point t0 = reservation_table::clock::now();
  // What the head would choose on its own copy of the node.
  allocation head_choice(const resource_set& r) { return *table.resources().plan(r); }
};

TEST_F(ReservationsTest, PrepareCommitAndRemove) {
  auto r = req({{"gpu", 1}, {"cpu", 4}});
  auto a = table.prepare({"g1", 0}, r, head_choice(r), t0);
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_EQ(table.find({"g1", 0})->state, hold_state::prepared);
  EXPECT_EQ(table.resources().whole_free_cards(), 3u);
  ASSERT_TRUE(table.commit({"g1", 0}));
  EXPECT_EQ(table.find({"g1", 0})->state, hold_state::committed);
  auto b = table.prepare({"g1", 1}, r, head_choice(r), t0);
  ASSERT_TRUE(b);
  EXPECT_NE(a->gpus[0].card, b->gpus[0].card);
  EXPECT_EQ(table.remove_group("g1"), 2u);
  EXPECT_TRUE(table.resources().is_empty());
  EXPECT_TRUE(table.holdings().empty());
}

TEST_F(ReservationsTest, RepeatedMessagesDoNoHarm) {
  auto r = req({{"gpu", 0.5}});
  auto a = table.prepare({"g", 0}, r, head_choice(r), t0);
  auto again = table.prepare({"g", 0}, r, head_choice(r), t0 + 1s);  // a duplicate prepare
  ASSERT_TRUE(a && again);
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(table.resources().available().gpu(), *quantity::parse("3.5", "gpu"));  // taken once
  ASSERT_TRUE(table.commit({"g", 0}));
  ASSERT_TRUE(table.commit({"g", 0}));  // a duplicate commit
  EXPECT_TRUE(table.prepare({"g", 0}, r, head_choice(r), t0));  // a late prepare after commit
  EXPECT_EQ(table.find({"g", 0})->state, hold_state::committed);
  table.abort({"g", 0});
  table.abort({"g", 0});  // a duplicate abort
  table.abort({"never", 3});
  EXPECT_TRUE(table.resources().is_empty());
  // A late commit after the abort must not resurrect anything.
  auto late = table.commit({"g", 0});
  EXPECT_EQ(late.code(), errc::not_found);
  EXPECT_TRUE(table.resources().is_empty());
}

TEST_F(ReservationsTest, SameKeyOtherRequestIsRefused) {
  ASSERT_TRUE(table.prepare({"g", 0}, req({{"gpu", 1}}), {}, t0));
  auto other = table.prepare({"g", 0}, req({{"gpu", 2}}), {}, t0);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.error().code(), errc::inconsistent);
}

TEST_F(ReservationsTest, StaleChoiceFallsBackToWhatFitsHere) {
  auto r = req({{"gpu", 1}});
  auto stale = head_choice(r);  // card 0
  ASSERT_TRUE(table.prepare({"other", 0}, r, stale, t0));  // someone else got card 0 first
  auto a = table.prepare({"g", 0}, r, stale, t0);
  ASSERT_TRUE(a);
  EXPECT_NE(a->gpus[0].card, stale.gpus[0].card);
}

TEST_F(ReservationsTest, WhatDoesNotFitIsRefusedChangingNothing) {
  ASSERT_TRUE(table.prepare({"big", 0}, req({{"gpu", 4}}), {}, t0));
  auto before = table.resources().availability();
  auto no = table.prepare({"g", 0}, req({{"gpu", 1}}), {}, t0);
  ASSERT_FALSE(no);
  EXPECT_EQ(no.error().code(), errc::insufficient);
  EXPECT_EQ(table.resources().availability(), before);
  EXPECT_EQ(table.find({"g", 0}), nullptr);
  auto bad = table.prepare({"g", 1}, req({{"gpu", 1.5}}), {}, t0);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), errc::invalid_argument);
}

TEST_F(ReservationsTest, UncommittedPreparesExpire) {
  auto r = req({{"gpu", 1}});
  ASSERT_TRUE(table.prepare({"a", 0}, r, {}, t0));
  ASSERT_TRUE(table.prepare({"b", 0}, r, {}, t0 + 4s));
  ASSERT_TRUE(table.prepare({"c", 0}, r, {}, t0));
  ASSERT_TRUE(table.commit({"c", 0}));
  auto gone = table.expire(t0 + 5001ms, 5000ms);
  ASSERT_EQ(gone, (std::vector<bundle_key>{{"a", 0}}));  // b is young, c committed
  EXPECT_EQ(table.resources().whole_free_cards(), 2u);
  EXPECT_EQ(table.commit({"a", 0}).code(), errc::not_found);  // its commit came too late
}

// Random messages in random order, repeated and late: the node never holds more than
// it has, and what it holds is exactly the sum of its holdings.
TEST_F(ReservationsTest, RandomMessagesKeepTheBooksExact) {
  std::mt19937 rng{11};
  const std::vector<resource_set> shapes{req({{"gpu", 1}}), req({{"gpu", 0.25}, {"cpu", 1}}), req({{"gpu", 0.5}}),
                                         req({{"cpu", 2}})};
  auto now = t0;
  for (int step = 0; step < 20000; ++step) {
    bundle_key key{'g' + std::to_string(rng() % 12), static_cast<uint32_t>(rng() % 3)};
    const auto& r = shapes[(std::hash<std::string>{}(key.group) + key.bundle) % shapes.size()];
    switch (rng() % 6) {
      case 0: case 1: (void)table.prepare(key, r, {}, now); break;
      case 2: (void)table.commit(key); break;
      case 3: table.abort(key); break;
      case 4: table.remove_group(key.group); break;
      case 5: now += 700ms; (void)table.expire(now, 2000ms); break;
    }
    node_resources expect = four_gpus();
    for (auto& h : table.holdings()) ASSERT_TRUE(expect.apply(h.alloc)) << "over-committed at step " << step;
    ASSERT_EQ(expect.availability(), table.resources().availability()) << "books differ at step " << step;
  }
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST(Reservations, AChoiceThatBreaksTheRulesIsNotTaken) {
  reservation_table table{four_gpus()};
  auto r = req({{"gpu", 0.25}});
  auto cheap = *table.resources().plan(r);
  cheap.gpus[0].memory = 1;  // far less memory than a quarter card reserves
  auto a = table.prepare({"g", 0}, r, cheap, reservation_table::clock::now());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->gpus[0].memory, 20 * GiB);
  EXPECT_TRUE(table.resources().follows_rules(r, *a));
  EXPECT_FALSE(table.resources().follows_rules(r, cheap));
  EXPECT_FALSE(table.resources().follows_rules(req({{"gpu", 2}}), *a));
}

}  // namespace
}  // namespace tune
