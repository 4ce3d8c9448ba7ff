#include "tune/core/node_resources.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;

std::vector<gpu_instance> cards(int n, int64_t memory = 80 * GiB) {
  std::vector<gpu_instance> out;
  for (int i = 0; i < n; ++i)
    out.push_back({i, "GPU-" + std::to_string(i), "0000:0" + std::to_string(i) + ":00.0",
                   "NVIDIA H200", memory, false});
  return out;
}

node_resources make_node(int gpus, double cpus = 32, int64_t memory = 256 * GiB) {
  resource_set host;
  host.set_cpu(*quantity::from_double(cpus, "cpu")).set_memory(memory);
  host.set_custom("tpu", quantity::whole(2));
  auto n = node_resources::make(host, cards(gpus));
  EXPECT_TRUE(n) << n.error().message();
  return *n;
}

resource_set req(std::initializer_list<std::pair<std::string_view, double>> a) {
  auto r = resource_set::make(a);
  EXPECT_TRUE(r) << r.error().message();
  return *r;
}

// Everything observable about a node's state, to check that nothing changed.
struct snapshot {
  resource_set available;
  std::vector<int64_t> free, mem;
  explicit snapshot(const node_resources& n) : available(n.available()) {
    for (size_t c = 0; c < n.gpus().size(); ++c) {
      free.push_back(n.card_free(c).units());
      mem.push_back(n.card_memory_free(c));
    }
  }
  bool operator==(const snapshot&) const = default;
};

TEST(NodeResources, MakeSetsTotalsFromCards) {
  auto n = make_node(4);
  EXPECT_EQ(n.total().gpu(), quantity::whole(4));
  EXPECT_EQ(n.total().gpu_memory(), 4 * 80 * GiB);
  EXPECT_EQ(n.available(), n.total());
  EXPECT_EQ(n.whole_free_cards(), 4u);
  EXPECT_TRUE(n.is_empty());
}

TEST(NodeResources, MakeRejectsBadCards) {
  auto dup = cards(2);
  dup[1].uuid = dup[0].uuid;
  EXPECT_FALSE(node_resources::make({}, dup));
  auto no_uuid = cards(1);
  no_uuid[0].uuid.clear();
  EXPECT_FALSE(node_resources::make({}, no_uuid));
  auto no_mem = cards(1, 0);
  EXPECT_FALSE(node_resources::make({}, no_mem));
  EXPECT_FALSE(node_resources::make(req({{"gpu", 1}}), cards(1)));
}

TEST(NodeResources, WholeRequestTakesWholeFreeCardsLowestFirst) {
  auto n = make_node(4);
  auto share = n.allocate(req({{"gpu", 0.5}}));
  ASSERT_TRUE(share);
  EXPECT_EQ(share->gpus[0].card, 0u);
  auto two = n.allocate(req({{"gpu", 2}}));
  ASSERT_TRUE(two) << two.error().message();
  ASSERT_EQ(two->gpus.size(), 2u);
  EXPECT_EQ(two->gpus[0].card, 1u);  // card 0 is partly used: not whole
  EXPECT_EQ(two->gpus[1].card, 2u);
  EXPECT_EQ(two->gpus[0].share, quantity::whole(1));
  EXPECT_EQ(two->gpus[0].memory, 80 * GiB);  // a whole card reserves all its memory
  snapshot before{n};
  auto too_many = n.allocate(req({{"gpu", 2}}));  // one whole card left
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().code(), errc::insufficient);
  EXPECT_NE(too_many.error().message().find("2 whole free cards, 1 free"), std::string::npos)
      << too_many.error().message();
  EXPECT_EQ(snapshot{n}, before);  // a failed allocation changes nothing
}

TEST(NodeResources, ShareGoesOnTheFullestCardThatFits) {
  auto n = make_node(3);
  ASSERT_TRUE(n.allocate(req({{"gpu", 0.5}})));   // card 0: 0.5 free
  ASSERT_TRUE(n.allocate(req({{"gpu", 0.75}})));  // card 0 cannot: card 1, 0.25 free
  EXPECT_EQ(n.card_free(1), *quantity::parse("0.25", "gpu"));
  auto a = n.allocate(req({{"gpu", 0.25}}));      // fits 0 (0.5), 1 (0.25), 2 (1): card 1
  ASSERT_TRUE(a);
  EXPECT_EQ(a->gpus[0].card, 1u);
  auto b = n.allocate(req({{"gpu", 0.5}}));       // card 0 exactly
  ASSERT_TRUE(b);
  EXPECT_EQ(b->gpus[0].card, 0u);
  EXPECT_EQ(n.whole_free_cards(), 1u);
}

TEST(NodeResources, TenTenthsFillOneCardExactly) {
  auto n = make_node(2);
  for (int i = 0; i < 10; ++i) {
    auto a = n.allocate(req({{"gpu", 0.1}}));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->gpus[0].card, 0u) << i;
  }
  EXPECT_TRUE(n.card_free(0).is_zero());
  EXPECT_EQ(n.whole_free_cards(), 1u);
  auto next = n.allocate(req({{"gpu", 0.1}}));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->gpus[0].card, 1u);
}

TEST(NodeResources, ShareReservesItsPartOfTheCardMemory) {
  auto n = make_node(1);
  auto a = n.allocate(req({{"gpu", 0.25}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->gpus[0].memory, 20 * GiB);
  EXPECT_EQ(n.card_memory_free(0), 60 * GiB);
  EXPECT_EQ(n.available().gpu_memory(), 60 * GiB);
}

TEST(NodeResources, ExplicitGpuMemoryIsReservedAndChecked) {
  auto n = make_node(2);
  auto big = n.allocate(req({{"gpu", 0.1}, {"gpu_memory", 70.0 * GiB}}));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->gpus[0].card, 0u);
  EXPECT_EQ(big->gpus[0].memory, 70 * GiB);
  // Card 0 has 0.9 of its share but only 10 GiB: a 0.5 share (40 GiB implied) goes to card 1.
  auto half = n.allocate(req({{"gpu", 0.5}}));
  ASSERT_TRUE(half);
  EXPECT_EQ(half->gpus[0].card, 1u);
  // 8 GiB fits both cards (card 0 has 10 GiB left, card 1 40 GiB): the fuller one wins.
  auto small = n.allocate(req({{"gpu", 0.1}, {"gpu_memory", 8.0 * GiB}}));
  ASSERT_TRUE(small);
  EXPECT_EQ(small->gpus[0].card, 1u);  // card 1 (0.5 free) is fuller than card 0 (0.9 free)
  snapshot before{n};
  auto none = n.allocate(req({{"gpu", 0.1}, {"gpu_memory", 50.0 * GiB}}));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), errc::insufficient);
  EXPECT_EQ(snapshot{n}, before);
}

TEST(NodeResources, WholeCardWithGpuMemoryReservesThatMuch) {
  auto n = make_node(1);
  auto a = n.allocate(req({{"gpu", 1}, {"gpu_memory", 10.0 * GiB}}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->gpus[0].memory, 10 * GiB);
  EXPECT_FALSE(make_node(1).allocate(req({{"gpu", 1}, {"gpu_memory", 81.0 * GiB}})));
}

TEST(NodeResources, HostAmountsAreAllOrNothing) {
  auto n = make_node(2, 4);
  snapshot before{n};
  auto a = n.allocate(req({{"gpu", 1}, {"cpu", 5}}));
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message().find("cpu: needs 5, 4 free"), std::string::npos)
      << a.error().message();
  EXPECT_EQ(snapshot{n}, before);
  auto t = n.allocate(req({{"tpu", 3}}));
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message().find("tpu: needs 3, 2 free"), std::string::npos);
  EXPECT_FALSE(n.allocate(req({{"fpga", 1}})));
  EXPECT_EQ(snapshot{n}, before);
}

TEST(NodeResources, BadRequestsAreRefusedAndChangeNothing) {
  auto n = make_node(4);
  snapshot before{n};
  auto a = n.allocate(req({{"gpu", 1.5}}));
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code(), errc::invalid_argument);
  resource_set negative;
  negative.set_cpu(quantity::from_units(-1));
  auto b = n.allocate(negative);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code(), errc::invalid_argument);
  EXPECT_NE(b.error().message().find("negative"), std::string::npos);
  EXPECT_FALSE(n.allocate(resource_set{}));
  EXPECT_EQ(snapshot{n}, before);
}

TEST(NodeResources, ReleaseRestoresExactly) {
  auto n = make_node(4);
  snapshot empty{n};
  auto a = n.allocate(req({{"gpu", 0.3}, {"cpu", 2.5}, {"memory", 3.0 * GiB}, {"tpu", 1}}));
  auto b = n.allocate(req({{"gpu", 2}, {"cpu", 1}}));
  auto c = n.allocate(req({{"gpu", 0.7}, {"gpu_memory", 5.0 * GiB}}));
  ASSERT_TRUE(a && b && c);
  snapshot with_all{n};
  ASSERT_TRUE(n.release(*b));
  ASSERT_TRUE(n.apply(*b));
  EXPECT_EQ(snapshot{n}, with_all);
  ASSERT_TRUE(n.release(*a));
  ASSERT_TRUE(n.release(*c));
  ASSERT_TRUE(n.release(*b));
  EXPECT_EQ(snapshot{n}, empty);
  EXPECT_TRUE(n.is_empty());
}

TEST(NodeResources, DoubleReleaseIsRefused) {
  auto n = make_node(2);
  auto a = n.allocate(req({{"gpu", 0.5}, {"cpu", 1}}));
  ASSERT_TRUE(a);
  ASSERT_TRUE(n.release(*a));
  snapshot after{n};
  auto st = n.release(*a);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), errc::inconsistent);
  EXPECT_NE(st.message().find("released already"), std::string::npos) << st.message();
  EXPECT_EQ(snapshot{n}, after);
}

TEST(NodeResources, ForeignAllocationIsRefused) {
  auto big = make_node(8);
  auto a = big.allocate(req({{"gpu", 1}}));
  auto b = big.allocate(req({{"gpu", 1}}));  // card 1
  ASSERT_TRUE(a && b);
  auto small = make_node(1);
  EXPECT_EQ(small.release(*b).code(), errc::inconsistent);
  EXPECT_EQ(small.apply(*b).code(), errc::inconsistent);
  allocation twice;
  twice.gpus = {{0, quantity::from_units(100), 1}, {0, quantity::from_units(100), 1}};
  EXPECT_EQ(big.apply(twice).code(), errc::inconsistent);
}

TEST(NodeResources, CouldHoldLooksAtTotals) {
  auto n = make_node(2);
  ASSERT_TRUE(n.allocate(req({{"gpu", 2}})));
  EXPECT_TRUE(n.could_hold(req({{"gpu", 2}})));
  EXPECT_FALSE(n.could_hold(req({{"gpu", 3}})));
  EXPECT_TRUE(n.could_hold(req({{"gpu", 0.5}, {"gpu_memory", 80.0 * GiB}})));
  EXPECT_FALSE(n.could_hold(req({{"gpu", 0.5}, {"gpu_memory", 81.0 * GiB}})));
  EXPECT_FALSE(n.could_hold(req({{"cpu", 33}})));
  EXPECT_FALSE(n.could_hold(req({{"fpga", 1}})));
  EXPECT_FALSE(n.could_hold(req({{"gpu", 1.5}})));
}

TEST(NodeResources, LoadIsTheBusiestResource) {
  auto n = make_node(4, 10);
  EXPECT_EQ(n.load(), 0);
  ASSERT_TRUE(n.allocate(req({{"gpu", 1}, {"cpu", 1}})));
  EXPECT_EQ(n.load(), 2500);  // a quarter of the GPUs
  ASSERT_TRUE(n.allocate(req({{"cpu", 4}})));
  EXPECT_EQ(n.load(), 5000);  // half of the CPUs
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST(NodeAvailability, RoundTripsAndRefusesImpossibleReports) {
  auto n = make_node(2);
  ASSERT_TRUE(n.allocate(req({{"gpu", 0.25}, {"cpu", 3}})));
  auto report = n.availability();
  auto fresh = make_node(2);
  ASSERT_TRUE(fresh.set_availability(report));
  EXPECT_EQ(fresh.available(), n.available());
  EXPECT_EQ(fresh.availability(), report);

  auto before = fresh.availability();
  auto too_many_cards = report;
  too_many_cards.card_free.push_back(0);
  too_many_cards.card_memory_free.push_back(0);
  EXPECT_EQ(fresh.set_availability(too_many_cards).code(), errc::inconsistent);
  auto over = report;
  over.card_free[0] = quantity::scale + 1;
  EXPECT_EQ(fresh.set_availability(over).code(), errc::inconsistent);
  auto negative = report;
  negative.host.set_cpu(quantity::from_units(-1));
  EXPECT_EQ(fresh.set_availability(negative).code(), errc::inconsistent);
  auto more_cpu = report;
  more_cpu.host.set_cpu(quantity::whole(33));
  EXPECT_EQ(fresh.set_availability(more_cpu).code(), errc::inconsistent);
  EXPECT_EQ(fresh.availability(), before);
}


// What other programs hold on a card (another cluster, a notebook): a share goes only
// where it fits beside them, a whole card never where they hold it; what this node
// holds already stays held and is given back exactly.
TEST(NodeResourcesOthers, ASharesFitsBesideWhatOthersHoldAndAWholeCardNever) {
  auto n = make_node(2);
  std::vector<card_others> others(2);
  others[0] = {0, 60 * GiB, true, "pid 4711 python3 (user ann), 60 GiB"};
  ASSERT_TRUE(n.set_others(others));
  EXPECT_EQ(n.whole_free_cards(), 1u);
  EXPECT_FALSE(n.card_whole_free(0));
  EXPECT_EQ(n.card_memory_usable(0), 20 * GiB);
  EXPECT_EQ(n.card_units_usable(0), quantity::scale);
  // A 0.5 share (40 GiB) cannot go beside 60 GiB: card 1.
  auto half = n.allocate(req({{"gpu", 0.5}}));
  ASSERT_TRUE(half);
  EXPECT_EQ(half->gpus[0].card, 1u);
  // A 0.25 share (20 GiB) fits beside: the fullest card that fits is card 1 (0.5 free).
  auto quarter = n.plan(req({{"gpu", 0.25}}));
  ASSERT_TRUE(quarter);
  EXPECT_EQ(quarter->gpus[0].card, 1u);
  // A whole card: card 1 is taken in part, card 0 is held by another program.
  auto whole = n.plan(req({{"gpu", 1}}));
  ASSERT_FALSE(whole);
  EXPECT_EQ(whole.error().code(), errc::insufficient);
  EXPECT_NE(whole.error().message().find("GPU 0 (GPU-0) is in use by another program: pid 4711 python3 (user ann), 60 GiB"),
            std::string::npos)
      << whole.error().message();
  // Gone: the card is whole again; what this node holds is untouched.
  ASSERT_TRUE(n.set_others({}));
  EXPECT_TRUE(n.others().empty());
  EXPECT_TRUE(n.card_whole_free(0));
  ASSERT_TRUE(n.release(*half));
  EXPECT_TRUE(n.is_empty());
}

TEST(NodeResourcesOthers, OtherClustersClaimShareUnits) {
  auto n = make_node(1);
  std::vector<card_others> others(1);
  others[0] = {quantity::scale * 3 / 4, 60 * GiB, true, "libtune cluster embedded-ab12 (pid 99, user bob): 0.75 GPU"};
  ASSERT_TRUE(n.set_others(others));
  EXPECT_FALSE(n.plan(req({{"gpu", 0.5}})));
  auto q = n.plan(req({{"gpu", 0.25}}));
  ASSERT_TRUE(q);
  EXPECT_TRUE(n.beside_others(*q));
  // The head's choice of a half card, made before it heard of them: not beside them.
  auto without = n.without_others().plan(req({{"gpu", 0.5}}));
  ASSERT_TRUE(without);
  EXPECT_FALSE(n.beside_others(*without));
  // apply() is bookkeeping only: a bundle held already stays held whatever appears.
  EXPECT_TRUE(n.apply(*without));
}

TEST(NodeResourcesOthers, BadReportsAreRefusedAndChangeNothing) {
  auto n = make_node(2);
  std::vector<card_others> one(1);
  EXPECT_EQ(n.set_others(one).code(), errc::inconsistent);
  std::vector<card_others> over(2);
  over[1].memory = 81 * GiB;
  EXPECT_EQ(n.set_others(over).code(), errc::inconsistent);
  over[1] = {quantity::scale + 1, 0, false, ""};
  EXPECT_EQ(n.set_others(over).code(), errc::inconsistent);
  over[1] = {-1, 0, false, ""};
  EXPECT_EQ(n.set_others(over).code(), errc::inconsistent);
  EXPECT_TRUE(n.others().empty());
  // Nothing held by anyone is the same as no report.
  ASSERT_TRUE(n.set_others(std::vector<card_others>(2)));
  EXPECT_TRUE(n.others().empty());
}

TEST(NodeResourcesOthers, TravelInTheAvailabilityAndAreGoneWhenEmptied) {
  auto n = make_node(2);
  std::vector<card_others> others(2);
  others[1] = {0, 2 * GiB, false, "pid 7 Xorg (user root), 2 GiB"};
  ASSERT_TRUE(n.set_others(others));
  auto report = n.availability();
  auto fresh = make_node(2);
  ASSERT_TRUE(fresh.set_availability(report));
  EXPECT_EQ(fresh.others(), others);
  EXPECT_EQ(fresh.card_memory_usable(1), 78 * GiB);
  // Below the threshold (holds_card false): a whole card still goes there.
  EXPECT_EQ(fresh.whole_free_cards(), 2u);
  EXPECT_TRUE(fresh.emptied().others().empty());
  EXPECT_TRUE(fresh.could_hold(req({{"gpu", 2}})));
}

}  // namespace
}  // namespace tune
