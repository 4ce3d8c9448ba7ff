#include "tune/trial/others.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

constexpr int64_t MiB = int64_t{1} << 20, GiB = int64_t{1} << 30;

std::vector<gpu_instance> cards() {
  std::vector<gpu_instance> c(3);
  for (int i = 0; i < 3; ++i) c[i] = {i, "GPU-" + std::to_string(i), "bus", "H200", 80 * GiB, false};
  c[2].logical = true;  // a logical card is its node's alone
  c[2].uuid = "LOGICAL-n-2";
  return c;
}

foreign_process process(const std::string& uuid, int pid, int64_t memory) {
  foreign_process p;
  p.uuid = uuid;
  p.pid = pid;
  p.memory = memory;
  p.name = "python3";
  p.uid = 0;
  return p;
}

TEST(Others, NothingOnTheCardsIsNothing) {
  auto o = others_on_cards(cards(), {}, {}, {});
  ASSERT_EQ(o.size(), 3u);
  for (auto& c : o) EXPECT_FALSE(c.any());
}

TEST(Others, AProgramOverTheThresholdHoldsTheCardAndItsMemoryWithAMargin) {
  others_policy policy{256 * MiB, 1 * GiB};
  auto o = others_on_cards(cards(), {}, {process("GPU-0", 4711, 20 * GiB)}, policy);
  EXPECT_TRUE(o[0].holds_card);
  EXPECT_EQ(o[0].units, 0);
  EXPECT_EQ(o[0].memory, 21 * GiB);
  EXPECT_EQ(o[0].who, "pid 4711 python3 (user root), 20 GiB");
  EXPECT_FALSE(o[1].any());
}

TEST(Others, ASmallProgramLeavesTheCardWholeButItsMemoryCounts) {
  others_policy policy{256 * MiB, 64 * MiB};
  auto o = others_on_cards(cards(), {}, {process("GPU-1", 7, 100 * MiB), process("GPU-1", 8, 100 * MiB)}, policy);
  EXPECT_FALSE(o[1].holds_card);  // 200 MiB in all: below the threshold
  EXPECT_EQ(o[1].memory, 264 * MiB);
  EXPECT_NE(o[1].who.find(" and 1 more"), std::string::npos) << o[1].who;
  auto over = others_on_cards(cards(), {}, {process("GPU-1", 7, 200 * MiB), process("GPU-1", 8, 100 * MiB)}, policy);
  EXPECT_TRUE(over[1].holds_card);  // 300 MiB: over it
}

TEST(Others, MemoryTheDriverDoesNotSayCountsAsAContext) {
  auto o = others_on_cards(cards(), {}, {process("GPU-0", 5, -1)}, {256 * MiB, 0});
  EXPECT_TRUE(o[0].holds_card);
  EXPECT_EQ(o[0].memory, unknown_process_memory);
  EXPECT_NE(o[0].who.find("memory not known"), std::string::npos);
}

TEST(Others, ClaimsOfOtherNodesCountTheirSharesAndTheirTrialsAreNotCountedTwice) {
  claimer c;
  c.node = "embedded-ab12";
  c.pid = 900;
  c.user = "bob";
  c.cgroup = "/libtune/embedded-ab12";
  c.cards["GPU-0"] = {quantity::scale / 4, 20 * GiB};
  c.cards["LOGICAL-n-2"] = {quantity::scale, 16 * GiB};  // not a card of this machine's: ignored
  auto by_cgroup = process("GPU-0", 901, 3 * GiB);
  by_cgroup.cgroup = "/libtune/embedded-ab12/t1";
  auto by_parent = process("GPU-0", 902, 3 * GiB);
  by_parent.ancestors = {950, 900, 1};
  auto other = process("GPU-0", 903, 3 * GiB);
  other.cgroup = "/libtune/embedded-ab123/t1";  // a prefix of the name is not below it
  std::vector<claimer> claims{c};
  EXPECT_EQ(claimer_of(by_cgroup, claims), &claims[0]);
  EXPECT_EQ(claimer_of(by_parent, claims), &claims[0]);
  EXPECT_EQ(claimer_of(other, claims), nullptr);
  auto o = others_on_cards(cards(), claims, {by_cgroup, by_parent, other}, {256 * MiB, 1 * GiB});
  EXPECT_EQ(o[0].units, quantity::scale / 4);
  EXPECT_EQ(o[0].memory, 20 * GiB + 3 * GiB + 1 * GiB);  // the claim, then the one process of nobody's
  EXPECT_TRUE(o[0].holds_card);
  EXPECT_NE(o[0].who.find("libtune cluster node embedded-ab12 (pid 900, user bob): 0.25 GPU, 20 GiB"), std::string::npos)
      << o[0].who;
  EXPECT_FALSE(o[2].any());
}

TEST(Others, NeverMoreThanTheCard) {
  claimer a, b;
  a.pid = 1, b.pid = 2;
  a.cards["GPU-1"] = {quantity::scale, 80 * GiB};
  b.cards["GPU-1"] = {quantity::scale, 80 * GiB};  // a broken or racing file: still at most the card
  auto o = others_on_cards(cards(), {a, b}, {process("GPU-1", 3, 10 * GiB)}, {});
  EXPECT_EQ(o[1].units, quantity::scale);
  EXPECT_EQ(o[1].memory, 80 * GiB);
  auto all = cards();
  auto n = node_resources::make({}, std::vector<gpu_instance>(all.begin(), all.begin() + 2));
  ASSERT_TRUE(n);
  std::vector<card_others> two(o.begin(), o.begin() + 2);
  EXPECT_TRUE(n->set_others(two));  // what it makes is always a report a node takes
}

}  // namespace
}  // namespace tune
