#include "tune/core/placement.hpp"

#include <gtest/gtest.h>

#include <set>

namespace tune {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;

node_resources make_node(const std::string& name, int gpus, double cpus = 16,
                         int64_t card_memory = 80 * GiB,
                         std::initializer_list<std::pair<std::string_view, double>> custom = {}) {
  std::vector<gpu_instance> cards;
  for (int i = 0; i < gpus; ++i)
    cards.push_back({i, name + "-GPU-" + std::to_string(i), "bus" + std::to_string(i), "H200",
                     card_memory, false});
  resource_set host;
  host.set_cpu(*quantity::from_double(cpus, "cpu")).set_memory(256 * GiB);
  for (auto& [k, v] : custom) host.set_custom(k, *quantity::from_double(v, k));
  return *node_resources::make(host, cards);
}

resource_set req(std::initializer_list<std::pair<std::string_view, double>> a) {
  auto r = resource_set::make(a);
  EXPECT_TRUE(r) << r.error().message();
  return *r;
}

std::vector<resource_set> many(int n, const resource_set& r) { return std::vector<resource_set>(n, r); }

placement must_place(const cluster_view& v, const std::vector<resource_set>& b, strategy s) {
  auto p = place(v, b, s);
  EXPECT_TRUE(p) << p.error().message();
  return p ? *p : placement{};
}

std::set<node_id> nodes_of(const placement& p) {
  std::set<node_id> out;
  for (auto& b : p.bundles) out.insert(b.node);
  return out;
}

cluster_view three_nodes() {
  cluster_view v;
  EXPECT_TRUE(v.add_node("a", make_node("a", 2)));
  EXPECT_TRUE(v.add_node("b", make_node("b", 4)));
  EXPECT_TRUE(v.add_node("c", make_node("c", 2)));
  return v;
}

TEST(Strategy, ParsesAnyCase) {
  EXPECT_EQ(*parse_strategy("strict_spread"), strategy::strict_spread);
  EXPECT_EQ(*parse_strategy("PACK"), strategy::pack);
  auto bad = parse_strategy("SPREAD_OUT");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("STRICT_SPREAD"), std::string::npos);
}

TEST(Place, RejectsBadInputNamingTheBundle) {
  auto v = three_nodes();
  std::vector<resource_set> none;
  EXPECT_FALSE(place(v, none, strategy::pack));
  auto p = place(v, std::vector{req({{"gpu", 1}}), req({{"gpu", 1.5}})}, strategy::pack);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code(), errc::invalid_argument);
  EXPECT_NE(p.error().message().find("bundle 1"), std::string::npos) << p.error().message();
}

TEST(Place, InfeasibleSaysWhat) {
  auto v = three_nodes();
  auto p = must_place(v, {req({{"gpu", 1}}), req({{"gpu", 1}}), req({{"gpu", 5}})}, strategy::pack);
  EXPECT_EQ(p.result, outcome::infeasible);
  EXPECT_EQ(p.reason, "bundle 2 asks 5 GPUs; the largest node has 4");

  auto cpu = must_place(v, {req({{"cpu", 64}})}, strategy::pack);
  EXPECT_EQ(cpu.result, outcome::infeasible);
  EXPECT_EQ(cpu.reason, "bundle 0 asks 64 CPUs; the largest node has 16");

  auto tpu = must_place(v, {req({{"tpu", 1}})}, strategy::spread);
  EXPECT_EQ(tpu.result, outcome::infeasible);
  EXPECT_EQ(tpu.reason, "bundle 0 asks 1 'tpu'; no node has 'tpu'");

  auto vram = must_place(v, {req({{"gpu", 0.5}, {"gpu_memory", 100.0 * GiB}})}, strategy::pack);
  EXPECT_EQ(vram.result, outcome::infeasible);
  EXPECT_EQ(vram.reason, "bundle 0 asks 100 GiB of GPU memory per card; the largest card has 80 GiB");
}

TEST(Place, EmptyClusterIsInfeasible) {
  cluster_view v;
  auto p = must_place(v, {req({{"cpu", 1}})}, strategy::pack);
  EXPECT_EQ(p.result, outcome::infeasible);
  EXPECT_NE(p.reason.find("no nodes"), std::string::npos);
}

TEST(Place, NoGpuAnywhere) {
  cluster_view v;
  ASSERT_TRUE(v.add_node("cpu-only", make_node("x", 0)));
  auto p = must_place(v, {req({{"gpu", 0.5}})}, strategy::pack);
  EXPECT_EQ(p.result, outcome::infeasible);
  EXPECT_EQ(p.reason, "bundle 0 asks 0.5 of a GPU; no node has a GPU");
}

TEST(PlacePreferring, GoesToAPreferredNodeWhenItFitsThereElseAsUsual) {
  auto v = three_nodes();
  ASSERT_TRUE(v.allocate("c", req({{"gpu", 0.6}})));
  std::vector<resource_set> one{req({{"gpu", 0.4}})};
  std::vector<node_id> prefer{"b"}, none{};
  auto p = place_preferring(v, one, strategy::pack, none, prefer);
  ASSERT_TRUE(p && p->result == outcome::placed);
  EXPECT_EQ(p->bundles[0].node, "b") << "not c, where PACK alone puts it";
  EXPECT_EQ(must_place(v, one, strategy::pack).bundles[0].node, "c");
  // b full: placed as usual, on c.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(v.allocate("b", req({{"gpu", 1}})));
  p = place_preferring(v, one, strategy::pack, none, prefer);
  ASSERT_TRUE(p && p->result == outcome::placed);
  EXPECT_EQ(p->bundles[0].node, "c");
  // A preferred node that is avoided is not used; an unknown one changes nothing.
  auto w = three_nodes();
  std::vector<node_id> avoid_b{"b"}, unknown{"zz"};
  p = place_preferring(w, one, strategy::pack, avoid_b, prefer);
  ASSERT_TRUE(p && p->result == outcome::placed);
  EXPECT_NE(p->bundles[0].node, "b");
  p = place_preferring(w, one, strategy::pack, none, unknown);
  ASSERT_TRUE(p && p->result == outcome::placed);
  EXPECT_EQ(p->bundles[0].node, must_place(w, one, strategy::pack).bundles[0].node);
  // Infeasible stays infeasible, with the usual reason.
  std::vector<resource_set> huge{req({{"gpu", 8}})};
  p = place_preferring(w, huge, strategy::pack, none, prefer);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->result, outcome::infeasible);
}

TEST(Place, SingleSharePacksOntoTheFullestCardInTheCluster) {
  auto v = three_nodes();
  ASSERT_TRUE(v.allocate("c", req({{"gpu", 0.6}})));
  ASSERT_TRUE(v.allocate("b", req({{"gpu", 0.3}})));
  auto p = must_place(v, {req({{"gpu", 0.4}})}, strategy::pack);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(p.bundles[0].node, "c");  // card with 0.4 free beats 0.7 and 1.0
  EXPECT_EQ(p.bundles[0].alloc.gpus[0].card, 0u);
}

TEST(Place, SingleSpreadGoesToTheLeastLoadedNode) {
  auto v = three_nodes();
  ASSERT_TRUE(v.allocate("a", req({{"gpu", 1}})));
  ASSERT_TRUE(v.allocate("b", req({{"gpu", 1}})));
  auto p = must_place(v, {req({{"gpu", 0.5}})}, strategy::spread);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(p.bundles[0].node, "c");
}

TEST(Place, PackPutsTheGroupOnOneNodeWhenItCan) {
  auto v = three_nodes();
  auto p = must_place(v, many(3, req({{"gpu", 1}})), strategy::pack);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(nodes_of(p), std::set<node_id>{"b"});
  std::set<uint32_t> cards;
  for (auto& b : p.bundles) cards.insert(b.alloc.gpus[0].card);
  EXPECT_EQ(cards.size(), 3u);  // three different cards of b
}

TEST(Place, PackSpillsOverWhenNoNodeHoldsAll) {
  auto v = three_nodes();
  auto p = must_place(v, many(6, req({{"gpu", 1}})), strategy::pack);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(nodes_of(p).size(), 2u);  // b's four, then two on one more node
  ASSERT_TRUE(commit(v, p));
  EXPECT_EQ(v.find("b")->whole_free_cards(), 0u);
}

TEST(Place, SpreadUsesDistinctNodesFirstThenShares) {
  auto v = three_nodes();
  auto p = must_place(v, many(3, req({{"gpu", 0.5}})), strategy::spread);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(nodes_of(p).size(), 3u);
  auto q = must_place(v, many(5, req({{"gpu", 1}})), strategy::spread);
  ASSERT_EQ(q.result, outcome::placed);
  EXPECT_EQ(nodes_of(q).size(), 3u);
}

TEST(Place, StrictPackAllOnOneNodeOrWait) {
  auto v = three_nodes();
  auto p = must_place(v, many(4, req({{"gpu", 1}})), strategy::strict_pack);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(nodes_of(p), std::set<node_id>{"b"});
  ASSERT_TRUE(commit(v, p));
  auto again = must_place(v, many(3, req({{"gpu", 1}})), strategy::strict_pack);
  EXPECT_EQ(again.result, outcome::not_now);
  EXPECT_NE(again.reason.find("waiting for one node with room for all 3 bundles"), std::string::npos)
      << again.reason;
  ASSERT_TRUE(release(v, p));
  EXPECT_EQ(must_place(v, many(3, req({{"gpu", 1}})), strategy::strict_pack).result, outcome::placed);
}

TEST(Place, StrictPackTooBigForAnyNodeIsInfeasible) {
  auto v = three_nodes();
  auto p = must_place(v, many(5, req({{"gpu", 1}})), strategy::strict_pack);
  EXPECT_EQ(p.result, outcome::infeasible);
  EXPECT_EQ(p.reason, "STRICT_PACK of 5 bundles asks 5 GPUs; the largest node has 4");
}

TEST(Place, StrictPackPacksSharesOntoCards) {
  cluster_view v;
  ASSERT_TRUE(v.add_node("two", make_node("two", 2)));
  // 0.6 + 0.4 on one card, 0.6 + 0.4 on the other: fits only when packed well.
  auto p = must_place(v, {req({{"gpu", 0.4}}), req({{"gpu", 0.6}}), req({{"gpu", 0.4}}),
                          req({{"gpu", 0.6}})},
                      strategy::strict_pack);
  ASSERT_EQ(p.result, outcome::placed);
  ASSERT_TRUE(commit(v, p));
  EXPECT_TRUE(v.find("two")->available().gpu().is_zero());
}

TEST(Place, StrictSpreadNeedsDistinctNodes) {
  auto v = three_nodes();
  auto p = must_place(v, many(3, req({{"gpu", 1}})), strategy::strict_spread);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(nodes_of(p).size(), 3u);
  auto wide = must_place(v, many(4, req({{"gpu", 1}})), strategy::strict_spread);
  EXPECT_EQ(wide.result, outcome::infeasible);
  EXPECT_EQ(wide.reason,
            "STRICT_SPREAD needs 4 nodes that can each hold a bundle; the cluster has 3 that can hold one");
}

TEST(Place, StrictSpreadWaitsWhenNodesAreBusy) {
  auto v = three_nodes();
  ASSERT_TRUE(v.allocate("a", req({{"gpu", 2}})));
  auto p = must_place(v, many(3, req({{"gpu", 1}})), strategy::strict_spread);
  EXPECT_EQ(p.result, outcome::not_now);
  EXPECT_EQ(p.reason, "waiting for 3 different nodes with room for a bundle; 2 have room now");
}

TEST(Place, StrictSpreadFindsAMatchingWhenGreedyWouldNot) {
  // x fits n1 and n2; y and z fit n2 and n3. n2 is the least loaded, so a greedy pass
  // gives it to x and then has one node for y and z: the matching puts x on n1.
  cluster_view v;
  ASSERT_TRUE(v.add_node("n1", make_node("1", 0, 16, 0, {{"x", 1}})));
  ASSERT_TRUE(v.add_node("n2", make_node("2", 0, 16, 0, {{"x", 1}, {"y", 1}, {"z", 1}})));
  ASSERT_TRUE(v.add_node("n3", make_node("3", 0, 16, 0, {{"y", 1}, {"z", 1}})));
  ASSERT_TRUE(v.allocate("n1", req({{"cpu", 8}})));
  ASSERT_TRUE(v.allocate("n3", req({{"cpu", 8}})));
  auto p = must_place(v, {req({{"x", 1}}), req({{"y", 1}}), req({{"z", 1}})}, strategy::strict_spread);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(p.bundles[0].node, "n1");
  EXPECT_EQ(nodes_of(p).size(), 3u);
}

TEST(Place, StrictSpreadPutsTheConstrainedBundleFirst) {
  cluster_view v;
  ASSERT_TRUE(v.add_node("gpu-box", make_node("g", 1)));
  ASSERT_TRUE(v.add_node("cpu-box", make_node("c", 0, 64)));
  // The CPU bundle fits both nodes and gpu-box is less loaded, but it must leave
  // gpu-box to the GPU bundle.
  ASSERT_TRUE(v.allocate("cpu-box", req({{"cpu", 32}})));
  auto p = must_place(v, {req({{"cpu", 2}}), req({{"gpu", 1}})}, strategy::strict_spread);
  ASSERT_EQ(p.result, outcome::placed);
  EXPECT_EQ(p.bundles[0].node, "cpu-box");
  EXPECT_EQ(p.bundles[1].node, "gpu-box");
}

TEST(Place, NotNowSaysWhatItWaitsFor) {
  auto v = three_nodes();
  for (auto n : {"a", "b", "c"}) ASSERT_TRUE(v.allocate(n, req({{"gpu", 1}})));
  auto p = must_place(v, {req({{"gpu", 2}})}, strategy::pack);
  EXPECT_EQ(p.result, outcome::placed);  // b still has three whole cards
  ASSERT_TRUE(commit(v, p));
  auto q = must_place(v, {req({{"gpu", 2}})}, strategy::pack);
  EXPECT_EQ(q.result, outcome::not_now);
  EXPECT_EQ(q.reason, "waiting for 2 free GPUs on one node");
}

TEST(Place, PoliciesNeverChangeTheView) {
  auto v = three_nodes();
  ASSERT_TRUE(v.allocate("b", req({{"gpu", 0.5}})));
  std::vector<resource_set> avail;
  for (size_t s = 0; s < v.size(); ++s) avail.push_back(v.node(s).available());
  for (auto s : {strategy::pack, strategy::spread, strategy::strict_pack, strategy::strict_spread})
    for (int k : {1, 2, 3, 9}) (void)place(v, many(k, req({{"gpu", 0.5}, {"cpu", 1}})), s);
  for (size_t s = 0; s < v.size(); ++s) EXPECT_EQ(v.node(s).available(), avail[s]);
  EXPECT_TRUE(v.summaries_consistent());
}

TEST(Commit, IsAllOrNothing) {
  auto v = three_nodes();
  auto p = must_place(v, many(2, req({{"gpu", 2}})), strategy::strict_spread);
  ASSERT_EQ(p.result, outcome::placed);
  // Someone takes the second bundle's node in between.
  ASSERT_TRUE(v.allocate(p.bundles[1].node, req({{"gpu", 2}})));
  std::vector<resource_set> avail;
  for (size_t s = 0; s < v.size(); ++s) avail.push_back(v.node(s).available());
  auto st = commit(v, p);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("bundle 1"), std::string::npos) << st.message();
  for (size_t s = 0; s < v.size(); ++s) EXPECT_EQ(v.node(s).available(), avail[s]);
}

TEST(ClusterView, AddRemoveAndUnknownNodes) {
  auto v = three_nodes();
  EXPECT_EQ(v.add_node("a", make_node("a", 1)).code(), errc::already_exists);
  EXPECT_EQ(v.remove_node("zzz").code(), errc::not_found);
  EXPECT_EQ(v.allocate("zzz", req({{"cpu", 1}})).error().code(), errc::not_found);
  ASSERT_TRUE(v.allocate("c", req({{"gpu", 0.5}})));
  ASSERT_TRUE(v.remove_node("a"));
  EXPECT_EQ(v.size(), 2u);
  EXPECT_TRUE(v.summaries_consistent());
  EXPECT_EQ(v.find("c")->card_free(0), quantity::from_units(5000));
  EXPECT_EQ(v.find("a"), nullptr);
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST(PlaceAvoiding, NoBundleLandsOnAnAvoidedNode) {
  auto v = three_nodes();
  ASSERT_TRUE(v.allocate("c", req({{"gpu", 0.5}})));  // c holds the fullest card...
  std::vector<node_id> avoid{"c"};
  auto p = place(v, std::vector{req({{"gpu", 0.5}})}, strategy::pack, avoid);  // ...but is avoided
  ASSERT_TRUE(p);
  ASSERT_EQ(p->result, outcome::placed);
  EXPECT_NE(p->bundles[0].node, "c");
  for (auto s : {strategy::pack, strategy::spread, strategy::strict_pack, strategy::strict_spread}) {
    auto q = place(v, many(2, req({{"gpu", 1}})), s, std::vector<node_id>{"b"});
    ASSERT_TRUE(q);
    ASSERT_EQ(q->result, outcome::placed) << to_string(s) << ": " << q->reason;
    for (auto& b : q->bundles) EXPECT_NE(b.node, "b") << to_string(s);
  }
}

TEST(PlaceAvoiding, InfeasibleOnTheNodesAllowed) {
  auto v = three_nodes();
  auto wide = place(v, many(3, req({{"gpu", 1}})), strategy::strict_spread, std::vector<node_id>{"a"});
  ASSERT_TRUE(wide);
  EXPECT_EQ(wide->result, outcome::infeasible);
  EXPECT_NE(wide->reason.find("the cluster has 2"), std::string::npos) << wide->reason;
  auto big = place(v, std::vector{req({{"gpu", 4}})}, strategy::pack, std::vector<node_id>{"b"});
  EXPECT_EQ(big->result, outcome::infeasible);
  EXPECT_EQ(big->reason, "bundle 0 asks 4 GPUs; the largest node allowed has 2");
  auto none = place(v, std::vector{req({{"cpu", 1}})}, strategy::pack, std::vector<node_id>{"a", "b", "c"});
  EXPECT_EQ(none->result, outcome::infeasible);
  EXPECT_NE(none->reason.find("every node"), std::string::npos);
}


// Other programs on the cards (card_others): a group they keep out waits (never
// infeasible), and says which card and who.
TEST(PlaceOthers, AGroupKeptOutByAnotherProgramWaitsNamingTheCardAndTheHolder) {
  cluster_view v;
  ASSERT_TRUE(v.add_node("a", make_node("a", 1)));
  std::vector<card_others> held(1);
  held[0] = {0, 50 * GiB, true, "pid 4711 python3 (user ann), 50 GiB"};
  ASSERT_TRUE(v.set_others("a", held));
  EXPECT_TRUE(v.any_others());
  EXPECT_TRUE(v.summaries_consistent());
  auto whole = must_place(v, {req({{"gpu", 1}})}, strategy::pack);
  EXPECT_EQ(whole.result, outcome::not_now);
  EXPECT_EQ(whole.reason, "waiting: GPU 0 (a-GPU-0) is in use by another program: pid 4711 python3 (user ann), 50 GiB");
  auto half = must_place(v, {req({{"gpu", 0.5}})}, strategy::pack);  // 40 GiB beside 50 of 80
  EXPECT_EQ(half.result, outcome::not_now);
  EXPECT_NE(half.reason.find("is in use by another program"), std::string::npos) << half.reason;
  auto quarter = must_place(v, {req({{"gpu", 0.25}})}, strategy::pack);  // 20 GiB fits beside
  EXPECT_EQ(quarter.result, outcome::placed);
  // Two cards asked of a node that has one: still infeasible, for that reason.
  auto two = must_place(v, {req({{"gpu", 2}})}, strategy::pack);
  EXPECT_EQ(two.result, outcome::infeasible);
  // The program ends: placed at once.
  ASSERT_TRUE(v.set_others("a", {}));
  EXPECT_FALSE(v.any_others());
  EXPECT_TRUE(v.summaries_consistent());
  EXPECT_EQ(must_place(v, {req({{"gpu", 1}})}, strategy::pack).result, outcome::placed);
}

TEST(PlaceOthers, AShareGoesToACardWhereItFitsBesideOthersAndEveryStrategyRespectsThem) {
  auto v = three_nodes();
  // Another cluster claims most of a's cards and c's first card.
  std::vector<card_others> a(2), c(2);
  a[0] = a[1] = {quantity::scale * 9 / 10, 72 * GiB, true, "libtune cluster x"};
  c[0] = {0, 79 * GiB, true, "pid 1 big"};
  ASSERT_TRUE(v.set_others("a", a));
  ASSERT_TRUE(v.set_others("c", c));
  ASSERT_TRUE(v.summaries_consistent());
  for (auto s : {strategy::pack, strategy::spread, strategy::strict_pack, strategy::strict_spread}) {
    auto p = must_place(v, many(2, req({{"gpu", 0.5}})), s);
    ASSERT_EQ(p.result, outcome::placed) << to_string(s) << ": " << p.reason;
    for (auto& b : p.bundles) {
      auto* n = v.find(b.node);
      ASSERT_TRUE(n);
      EXPECT_TRUE(n->beside_others(b.alloc)) << to_string(s) << " put a bundle on " << b.node;
    }
  }
  auto spread = must_place(v, many(3, req({{"gpu", 1}})), strategy::strict_spread);
  EXPECT_EQ(spread.result, outcome::not_now);  // a has no card free of others
  EXPECT_NE(spread.reason.find("is in use by another program"), std::string::npos) << spread.reason;
}

}  // namespace
}  // namespace tune
