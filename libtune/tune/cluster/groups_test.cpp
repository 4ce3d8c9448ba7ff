// The head's placement-group table against simulated nodes (reservation tables),
// with messages delivered, repeated, delayed or lost on purpose.
#include "tune/cluster/groups.hpp"

#include <gtest/gtest.h>

#include <random>

namespace tune {
namespace {

using namespace std::chrono_literals;
constexpr int64_t GiB = int64_t{1} << 30;

node_resources gpus(const std::string& id, int n) {
  std::vector<gpu_instance> cards;
  for (int i = 0; i < n; ++i) cards.push_back({i, id + "-GPU-" + std::to_string(i), "bus", "H200", 80 * GiB, false});
  resource_set host;
  host.set_cpu(quantity::whole(32)).set_memory(256 * GiB);
  return *node_resources::make(host, cards);
}

resource_set req(std::initializer_list<std::pair<std::string_view, double>> a) { return *resource_set::make(a); }

// The head's table, its view, and the nodes' reservation tables, wired by hand.
struct GroupsTest : ::testing::Test {
  group_table table;
  cluster_view view;
  std::map<node_id, reservation_table> nodes;
  group_table::time_point now = group_table::time_point{} + 1h;
  std::vector<group_message> outbox;

  void add_node(const std::string& id, int n) {
    ASSERT_TRUE(view.add_node(id, gpus(id, n)));
    nodes.emplace(id, reservation_table{gpus(id, n)});
  }
  void lose_node(const std::string& id) {
    nodes.erase(id);
    ASSERT_TRUE(view.remove_node(id));
    append(table.node_lost(id, view, now));
  }
  void append(std::vector<group_message> m) { outbox.insert(outbox.end(), m.begin(), m.end()); }

  // Delivers one message to its node and feeds the answer back.
  void deliver(const group_message& m) {
    auto it = nodes.find(m.node);
    if (it == nodes.end()) return;  // a lost node
    auto& n = it->second;
    switch (m.what) {
      case group_message::kind::prepare: {
        auto a = n.prepare(m.key, m.request, m.preferred, now);
        append(table.on_prepared(m.key, m.attempt, m.node, a, view, now, n.version()));
        break;
      }
      case group_message::kind::commit:
        append(table.on_committed(m.key, m.attempt, m.node, n.commit(m.key), view, now));
        break;
      case group_message::kind::abort: n.abort(m.key); break;
    }
  }
  // Schedules and delivers everything until nothing is left to send.
  void settle() {
    append(table.schedule(view, now));
    while (!outbox.empty()) {
      auto m = outbox.front();
      outbox.erase(outbox.begin());
      deliver(m);
      if (outbox.empty()) append(table.schedule(view, now));
    }
  }
  group_state state(const std::string& id) { return table.find(id)->state; }
  // What the nodes hold, summed, must equal what the head's view has reserved.
  void expect_books_agree() {
    for (auto& [id, n] : nodes) {
      auto held = view.find(id)->availability();
      EXPECT_EQ(held, n.resources().availability()) << "node " << id;
    }
  }
};

TEST_F(GroupsTest, AllNodesSayYesAndTheGroupIsCreated) {
  add_node("a", 2);
  add_node("b", 2);
  ASSERT_EQ(*table.create({"g1", strategy::strict_spread, {req({{"gpu", 1}}), req({{"gpu", 1}})}}, view, now),
            group_state::pending);
  settle();
  EXPECT_EQ(state("g1"), group_state::created);
  auto& g = *table.find("g1");
  EXPECT_NE(g.site[0]->node, g.site[1]->node);
  for (auto& [id, n] : nodes) {
    ASSERT_EQ(n.holdings().size(), 1u);
    EXPECT_EQ(n.holdings()[0].state, hold_state::committed);
  }
  expect_books_agree();
}

TEST_F(GroupsTest, InfeasibleFailsAtOnceWithTheReason) {
  add_node("a", 2);
  add_node("b", 2);
  auto wide = table.create({"wide", strategy::strict_spread, std::vector<resource_set>(3, req({{"gpu", 1}}))}, view, now);
  ASSERT_TRUE(wide);
  EXPECT_EQ(*wide, group_state::infeasible);
  EXPECT_NE(table.find("wide")->reason.find("STRICT_SPREAD needs 3 nodes"), std::string::npos);
  auto big = table.create({"big", strategy::pack, {req({{"gpu", 3}})}}, view, now);
  EXPECT_EQ(*big, group_state::infeasible);
  EXPECT_EQ(table.find("big")->reason, "bundle 0 asks 3 GPUs; the largest node has 2");
  EXPECT_FALSE(table.create({"bad", strategy::pack, {req({{"gpu", 1.5}})}}, view, now));
  EXPECT_EQ(table.create({"wide", strategy::pack, {req({{"gpu", 1}})}}, view, now).error().code(), errc::already_exists);
  settle();
  EXPECT_TRUE(outbox.empty());
}

TEST_F(GroupsTest, ARefusedPrepareAbortsTheOthersAndRetries) {
  add_node("a", 1);
  add_node("b", 1);
  // Someone the head does not know about holds b's card (e.g. a stale view).
  ASSERT_TRUE(nodes.at("b").prepare({"outsider", 0}, req({{"gpu", 1}}), {}, now));
  ASSERT_TRUE(table.create({"g", strategy::strict_spread, {req({{"gpu", 1}}), req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  ASSERT_EQ(outbox.size(), 2u);
  while (!outbox.empty()) {
    auto m = outbox.front();
    outbox.erase(outbox.begin());
    deliver(m);
  }
  EXPECT_EQ(state("g"), group_state::pending);
  EXPECT_NE(table.find("g")->reason.find("refused"), std::string::npos) << table.find("g")->reason;
  EXPECT_TRUE(nodes.at("a").holdings().empty()) << "a's prepare must be aborted";
  nodes.at("b").abort({"outsider", 0});  // the outsider the head never knew of goes away
  expect_books_agree();
  append(table.schedule(view, now));
  EXPECT_TRUE(outbox.empty()) << "it backs off before retrying";
  now += group_table::first_backoff + 1ms;
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  expect_books_agree();
}

TEST_F(GroupsTest, ANodeLostBetweenPrepareAndCommit) {
  add_node("a", 1);
  add_node("b", 1);
  add_node("c", 1);
  ASSERT_TRUE(table.create({"g", strategy::strict_spread, {req({{"gpu", 1}}), req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  ASSERT_EQ(outbox.size(), 2u);
  auto first = outbox[0], second = outbox[1];
  outbox.clear();
  deliver(first);  // prepared on its node
  lose_node(second.node);  // the other node dies before answering
  while (!outbox.empty()) {  // the abort for the first
    auto m = outbox.front();
    outbox.erase(outbox.begin());
    deliver(m);
  }
  EXPECT_TRUE(nodes.at(first.node).holdings().empty());
  now += 1s;
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  for (auto& s : table.find("g")->site) EXPECT_NE(s->node, second.node);
  expect_books_agree();
}

TEST_F(GroupsTest, DuplicateAndLateAnswersDoNoHarm) {
  add_node("a", 2);
  ASSERT_TRUE(table.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  auto prep = outbox.at(0);
  outbox.clear();
  auto a = nodes.at("a").prepare(prep.key, prep.request, prep.preferred, now);
  append(table.on_prepared(prep.key, prep.attempt, "a", a, view, now));
  ASSERT_EQ(outbox.size(), 1u);  // the commit
  append(table.on_prepared(prep.key, prep.attempt, "a", a, view, now));  // a duplicate answer...
  EXPECT_EQ(outbox.size(), 1u);  // ...must neither commit twice nor abort the live reservation
  // An answer from an attempt that no longer exists is answered with an abort.
  auto stale_key = node_key("g", 0, 99);
  auto stale = nodes.at("a").prepare(stale_key, prep.request, {}, now);
  append(table.on_prepared(stale_key, 99, "a", stale, view, now));
  ASSERT_EQ(outbox.size(), 2u);
  EXPECT_EQ(outbox[1].what, group_message::kind::abort);
  EXPECT_EQ(outbox[1].key, stale_key);
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  EXPECT_EQ(nodes.at("a").holdings().size(), 1u);
  expect_books_agree();
}

TEST_F(GroupsTest, RemovalInEveryStateLeavesNothing) {
  add_node("a", 4);
  ASSERT_TRUE(table.create({"created", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  settle();
  ASSERT_TRUE(table.create({"preparing", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  ASSERT_TRUE(table.create({"pending", strategy::pack, {req({{"gpu", 4}})}}, view, now));
  append(table.schedule(view, now));
  EXPECT_EQ(state("created"), group_state::created);
  EXPECT_EQ(state("preparing"), group_state::preparing);
  EXPECT_EQ(state("pending"), group_state::pending);
  EXPECT_NE(table.find("pending")->reason.find("waiting for 4 free GPUs"), std::string::npos);
  for (auto id : {"created", "preparing", "pending"}) append(table.remove(id, view, now));
  settle();  // the preparing group's prepare arrives after its removal: aborted too
  for (auto id : {"created", "preparing", "pending"}) EXPECT_EQ(state(id), group_state::removed);
  EXPECT_TRUE(nodes.at("a").holdings().empty());
  EXPECT_TRUE(view.find("a")->is_empty());
}

TEST_F(GroupsTest, FirstComeFirstServedWithoutStarvingTheBigGroup) {
  add_node("a", 4);
  ASSERT_TRUE(table.create({"small-1", strategy::pack, {req({{"gpu", 2}})}}, view, now));
  settle();
  ASSERT_TRUE(table.create({"big", strategy::strict_pack, std::vector<resource_set>(4, req({{"gpu", 1}}))}, view, now));
  ASSERT_TRUE(table.create({"small-2", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  settle();
  EXPECT_EQ(state("big"), group_state::pending);
  EXPECT_EQ(state("small-2"), group_state::pending) << "a later small group must not overtake the waiting big one";
  append(table.remove("small-1", view, now));
  settle();
  EXPECT_EQ(state("big"), group_state::created);
  EXPECT_EQ(state("small-2"), group_state::pending);
}

TEST_F(GroupsTest, ANodeLostAfterCommitMovesItsBundles) {
  add_node("a", 2);
  add_node("b", 2);
  add_node("c", 2);
  ASSERT_TRUE(table.create({"g", strategy::strict_spread, {req({{"gpu", 1}}), req({{"gpu", 1}})}}, view, now));
  settle();
  auto lost = table.find("g")->site[1]->node, kept = table.find("g")->site[0]->node;
  lose_node(lost);
  EXPECT_EQ(state("g"), group_state::rescheduling);
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  EXPECT_EQ(table.find("g")->site[0]->node, kept);
  EXPECT_NE(table.find("g")->site[1]->node, kept);  // still spread
  auto moved = table.take_moved();
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].group, "g");
  EXPECT_EQ(moved[0].bundles, std::vector<uint32_t>{1});
  expect_books_agree();
}

TEST_F(GroupsTest, SilentNodesTimeOut) {
  add_node("a", 1);
  ASSERT_TRUE(table.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  outbox.clear();  // the prepare is lost
  append(table.expire(view, now + 1s, 2000ms));
  EXPECT_TRUE(outbox.empty());
  append(table.expire(view, now + 3s, 2000ms));
  ASSERT_EQ(outbox.size(), 1u);
  EXPECT_EQ(outbox[0].what, group_message::kind::abort);
  EXPECT_NE(table.find("g")->reason.find("no answer from a"), std::string::npos);
  now += 4s;
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  expect_books_agree();
}

std::vector<bundle_key> keys(const reservation_table& n) {
  std::vector<bundle_key> out;
  for (auto& h : n.holdings()) out.push_back(h.key);
  return out;
}

TEST_F(GroupsTest, ReconcileAbortsWhatTheHeadDidNotMake) {
  add_node("a", 2);
  ASSERT_TRUE(table.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  settle();
  // Left over on the node: an old attempt of g, a group the head never heard of, and
  // a key that is not ours at all.
  for (auto k : {node_key("g", 0, 12345), node_key("other", 0, 7), bundle_key{"junk", 3}})
    ASSERT_TRUE(nodes.at("a").prepare(k, req({{"gpu", 0.1}}), {}, now)) << k.to_string();
  append(table.reconcile("a", keys(nodes.at("a")), view, now));
  ASSERT_EQ(outbox.size(), 3u);
  for (auto& m : outbox) EXPECT_EQ(m.what, group_message::kind::abort);
  settle();
  EXPECT_EQ(nodes.at("a").holdings().size(), 1u);
  EXPECT_EQ(state("g"), group_state::created);
  expect_books_agree();
}

TEST_F(GroupsTest, ReconcilePlacesALostBundleAgain) {
  add_node("a", 1);
  add_node("b", 1);
  ASSERT_TRUE(table.create({"g", strategy::spread, {req({{"gpu", 1}}), req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  for (auto& m : std::vector<group_message>(outbox)) {  // both prepares answered yes...
    outbox.erase(outbox.begin());
    deliver(m);
  }
  ASSERT_EQ(state("g"), group_state::created);
  outbox.clear();  // ...but both commits are lost; the prepares expire on the nodes
  now += 10s;
  for (auto& [id, n] : nodes) EXPECT_EQ(n.expire(now, 5000ms).size(), 1u);
  append(table.reconcile("a", keys(nodes.at("a")), view, now));
  EXPECT_EQ(state("g"), group_state::rescheduling);
  EXPECT_NE(table.find("g")->reason.find("no longer held on node a"), std::string::npos);
  append(table.reconcile("b", keys(nodes.at("b")), view, now));
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  for (auto& [id, n] : nodes) EXPECT_EQ(n.holdings().size(), 1u);
  auto moved = table.take_moved();
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved[0].bundles.size(), 2u);
  expect_books_agree();
}

TEST_F(GroupsTest, ReconcileLeavesAPrepareInFlightAlone) {
  add_node("a", 1);
  ASSERT_TRUE(table.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  append(table.schedule(view, now));
  auto prep = outbox.at(0);
  outbox.clear();
  // A heartbeat written before the prepare arrived: the node holds nothing yet.
  append(table.reconcile("a", {}, view, now));
  EXPECT_TRUE(outbox.empty());
  EXPECT_EQ(state("g"), group_state::preparing);
  deliver(prep);
  settle();
  EXPECT_EQ(state("g"), group_state::created);
  expect_books_agree();
}

TEST_F(GroupsTest, ReconcileIgnoresAListOlderThanTheAnswer) {
  add_node("a", 1);
  ASSERT_TRUE(table.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  auto before = nodes.at("a").version();  // a heartbeat's list, taken before the prepare...
  settle();
  ASSERT_EQ(state("g"), group_state::created);
  append(table.reconcile("a", {}, view, now, before));  // ...arrives after the answer
  EXPECT_TRUE(outbox.empty());
  EXPECT_EQ(state("g"), group_state::created) << "an old list must not make a held bundle look lost";
  append(table.reconcile("a", keys(nodes.at("a")), view, now, nodes.at("a").version()));
  EXPECT_EQ(state("g"), group_state::created);
}

TEST_F(GroupsTest, AttemptNumbersAreNeverReused) {
  group_table seeded{1000};
  add_node("a", 1);
  ASSERT_TRUE(seeded.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  auto first = seeded.schedule(view, now);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].attempt, 1000u);
  (void)seeded.remove("g", view, now);
  EXPECT_TRUE(seeded.forget("g"));
  ASSERT_TRUE(seeded.create({"g", strategy::pack, {req({{"gpu", 1}})}}, view, now));
  auto second = seeded.schedule(view, now);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].attempt, 1001u);
  EXPECT_NE(first[0].key, second[0].key) << "a reused id must not reuse a node key";
}

TEST_F(GroupsTest, AdoptAndForget) {
  add_node("a", 2);
  auto alloc = *view.allocate("a", req({{"gpu", 1}}));
  ASSERT_TRUE(table.adopt({"old", strategy::pack, {req({{"gpu", 1}})}}, {{"a", alloc, 77}}, now));
  EXPECT_EQ(state("old"), group_state::created);
  EXPECT_FALSE(table.adopt({"old", strategy::pack, {req({{"gpu", 1}})}}, {{"a", alloc, 77}}, now));
  EXPECT_FALSE(table.adopt({"two", strategy::pack, {req({{"gpu", 1}}), req({{"gpu", 1}})}}, {{"a", alloc, 77}}, now))
      << "one site per bundle";
  EXPECT_FALSE(table.forget("old")) << "a created group holds something: remove it first";
  append(table.remove("old", view, now));
  ASSERT_EQ(outbox.size(), 1u);
  EXPECT_EQ(outbox[0].key, node_key("old", 0, 77));
  EXPECT_TRUE(view.find("a")->is_empty());
  table.forget_ended(now + 1s, 60s, 1000);
  EXPECT_NE(table.find("old"), nullptr);
  table.forget_ended(now + 61s, 60s, 1000);
  EXPECT_EQ(table.find("old"), nullptr);
}

TEST(NodeKeys, ParseIsTheInverse) {
  std::string g;
  uint64_t a = 0;
  ASSERT_TRUE(parse_node_key(node_key("pg-1/x", 3, 42), g, a));
  EXPECT_EQ(g, "pg-1/x");
  EXPECT_EQ(a, 42u);
  for (auto bad : {"plain", "/5", "g/", "g/12a", "g/99999999999999999999999", "g/~ann", "g/5~"})
    EXPECT_FALSE(parse_node_key({bad, 0}, g, a)) << bad;
  // With its owner: the node's key says whose it is (claimed after a head restart).
  std::string owner = "x";
  ASSERT_TRUE(parse_node_key(node_key("pg-2", 0, 7, "ann"), g, a, &owner));
  EXPECT_EQ(g, "pg-2");
  EXPECT_EQ(a, 7u);
  EXPECT_EQ(owner, "ann");
  ASSERT_TRUE(parse_node_key(node_key("pg-2", 0, 7), g, a, &owner));
  EXPECT_EQ(owner, "") << "a key made before owners were in keys: nobody's in particular";
}

TEST(GroupIds, ClientsNameGroupsWithoutTheNodeKeysSeparators) {
  for (std::string ok : {std::string{"pg-1"}, std::string{"exp_3.trial:0007"}, std::string{"A"}, std::string(128, 'x')})
    EXPECT_TRUE(check_group_id(ok)) << ok;
  auto too_long = check_group_id(std::string(129, 'x'));
  EXPECT_EQ(too_long.code(), errc::invalid_argument);
  EXPECT_EQ(too_long.message(), "a placement group id has at most 128 characters");
  for (auto bad : {"pg/1", "pg~ann", "a b", "\xc3\xa9t\xc3\xa9", "pg\n"}) {
    auto s = check_group_id(bad);
    EXPECT_EQ(s.code(), errc::invalid_argument) << bad;
    EXPECT_EQ(s.message(), std::string{"placement group id \""} + bad +
                               "\" has a character other than letters, digits, '-', '_', '.', ':'");
  }
}

// A group's reservations carry its user into their node keys (the nodes report them
// after a head restart); a key the head did not make is aborted.
TEST_F(GroupsTest, AGroupsNodeKeysNameItsUser) {
  add_node("a", 2);
  group_spec spec{"ann-g", strategy::pack, {req({{"gpu", 1}})}};
  spec.user = "ann";
  ASSERT_TRUE(table.create(spec, view, now));
  settle();
  EXPECT_EQ(state("ann-g"), group_state::created);
  auto held = nodes.at("a").holdings();
  ASSERT_EQ(held.size(), 1u);
  std::string id, owner;
  uint64_t attempt = 0;
  ASSERT_TRUE(parse_node_key(held[0].key, id, attempt, &owner));
  EXPECT_EQ(id, "ann-g");
  EXPECT_EQ(owner, "ann");
  // The same group and attempt under another owner's key is not the head's reservation.
  auto forged = node_key("ann-g", 0, attempt, "bob");
  auto out = table.reconcile("a", {held[0].key, forged}, view, now, nodes.at("a").version());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].what, group_message::kind::abort);
  EXPECT_EQ(out[0].key, forged);
}

// Groups created and removed at random, nodes lost, messages duplicated, delayed and
// lost, prepares expiring on the nodes: the books of head and nodes never over-commit,
// created groups hold every bundle, and once everything is removed and expired,
// nothing is held anywhere.
TEST_F(GroupsTest, RandomChaos) {
  std::mt19937 rng{5};
  int next_node = 0, next_group = 0;
  for (int i = 0; i < 5; ++i) add_node('n' + std::to_string(next_node++), 1 + static_cast<int>(rng() % 4));
  std::vector<std::string> live;
  const std::vector<strategy> strategies{strategy::pack, strategy::spread, strategy::strict_pack, strategy::strict_spread};
  for (int step = 0; step < 4000; ++step) {
    now += std::chrono::milliseconds(rng() % 200);
    switch (rng() % 10) {
      case 0: case 1: {
        std::string id = 'g' + std::to_string(next_group++);
        std::vector<resource_set> b(1 + rng() % 3, rng() % 2 ? req({{"gpu", 1}}) : req({{"gpu", 0.5}, {"cpu", 1}}));
        auto st = table.create({id, strategies[rng() % 4], b}, view, now);
        ASSERT_TRUE(st);
        if (*st != group_state::infeasible) live.push_back(id);
        break;
      }
      case 2:
        if (!live.empty()) {
          size_t i = rng() % live.size();
          append(table.remove(live[i], view, now));
          live.erase(live.begin() + static_cast<long>(i));
        }
        break;
      case 3:
        if (rng() % 4 == 0 && nodes.size() > 2) {
          lose_node(std::next(nodes.begin(), static_cast<long>(rng() % nodes.size()))->first);
        } else if (nodes.size() < 6) {
          add_node('n' + std::to_string(next_node++), 1 + static_cast<int>(rng() % 4));
        }
        break;
      case 4: append(table.expire(view, now, 2000ms)); break;
      case 5:
        for (auto& [id, n] : nodes)
          for (auto& k : n.expire(now, 5000ms)) (void)k;
        break;
      case 6: {  // a heartbeat: a node says what it holds
        auto& [id, n] = *std::next(nodes.begin(), static_cast<long>(rng() % nodes.size()));
        append(table.reconcile(id, keys(n), view, now, n.version()));
        break;
      }
      default: {
        append(table.schedule(view, now));
        for (int k = 0; k < 4 && !outbox.empty(); ++k) {
          size_t i = rng() % outbox.size();
          auto m = outbox[i];
          int fate = static_cast<int>(rng() % 10);
          if (fate != 0) outbox.erase(outbox.begin() + static_cast<long>(i));  // 1 in 10: delivered again later
          if (fate == 1) continue;                                              // 1 in 10: lost
          deliver(m);
        }
      }
    }
    // Nothing over-committed on any node (apply() refuses over-commitment, so the
    // tables' own books are exact); created groups hold every bundle.
    for (auto& [id, g] : table.groups()) {
      if (g.state != group_state::created) continue;
      for (auto& s : g.site) ASSERT_TRUE(s.has_value()) << id << " at step " << step;
    }
    ASSERT_TRUE(view.summaries_consistent());
  }
  // After every node reported what it holds and the retries ran, every created group
  // is held, bundle by bundle, on the node the head says.
  for (int round = 0; round < 40; ++round) {
    now += 3s;
    for (auto& [id, n] : nodes) {
      n.expire(now, 5000ms);
      append(table.reconcile(id, keys(n), view, now, n.version()));
    }
    append(table.expire(view, now, 2000ms));
    settle();
  }
  for (auto& [id, g] : table.groups()) {
    if (g.state != group_state::created) continue;
    for (uint32_t b = 0; b < g.site.size(); ++b)
      EXPECT_NE(nodes.at(g.site[b]->node).find(node_key(id, b, g.site[b]->attempt)), nullptr) << id << "#" << b;
  }
  expect_books_agree();
  for (auto& id : live) append(table.remove(id, view, now));
  while (!outbox.empty()) {
    auto m = outbox.front();
    outbox.erase(outbox.begin());
    if (m.what == group_message::kind::abort) deliver(m);
  }
  now += 10s;
  for (auto& [id, n] : nodes) {
    n.expire(now, 5000ms);
    EXPECT_TRUE(n.holdings().empty()) << "node " << id << " still holds " << n.holdings().size();
    EXPECT_TRUE(view.find(id)->is_empty()) << "the head still books something on " << id;
  }
}

// --- users: quotas, fair share, priorities (docs/users.md) ---------------------

user_limits limits(std::optional<double> gpus, double weight = 1, int64_t priority = 0,
                   std::optional<int64_t> max_trials = std::nullopt) {
  user_limits l;
  if (gpus) l.gpus = *quantity::from_double(*gpus, "gpus");
  l.weight = weight;
  l.priority = priority;
  l.max_trials = max_trials;
  return l;
}

group_spec of(const std::string& user, const std::string& id, double gpu) {
  return {id, strategy::pack, {req({{"gpu", gpu}})}, {}, user};
}

// A request over its user's quota waits and says why, counted exactly in shares; other
// users' groups go on past it; it goes once the user gives some back.
TEST_F(GroupsTest, AGroupOverItsUsersQuotaWaitsSayingWhyAndOthersGoOn) {
  add_node("n1", 8);
  table.set_users({{"ann", limits(4)}, {"bob", limits(std::nullopt)}});
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(table.create(of("ann", 'a' + std::to_string(i), 0.5), view, now));
  ASSERT_TRUE(table.create(of("ann", "a-big", 1), view, now));  // 3.5 + 1 > 4: waits
  ASSERT_TRUE(table.create(of("bob", "b1", 1), view, now));
  settle();
  for (int i = 0; i < 7; ++i) EXPECT_EQ(state('a' + std::to_string(i)), group_state::created);
  EXPECT_EQ(state("a-big"), group_state::pending);
  EXPECT_EQ(table.find("a-big")->reason,
            "over ann's quota of 4 gpus: 3.5 in use, it asks 1 (it waits until ann's other groups give some back)");
  EXPECT_EQ(state("b1"), group_state::created) << "bob's group goes on past ann's";
  EXPECT_EQ(table.holdings().at("ann").gpus, *quantity::from_double(3.5, "gpus"));
  // Ann gives one share back: 3 + 1 fits.
  append(table.remove("a0", view, now));
  settle();
  EXPECT_EQ(state("a-big"), group_state::created);
  EXPECT_EQ(table.holdings().at("ann").gpus, quantity::whole(4));
  // More than the quota at all: infeasible at once, with what to do.
  ASSERT_TRUE(table.create(of("ann", "a-huge", 5), view, now));
  settle();
  EXPECT_EQ(state("a-huge"), group_state::infeasible);
  EXPECT_NE(table.find("a-huge")->reason.find("more than ann's quota of 4 (the admin can raise it: tune user set ann --gpus N)"),
            std::string::npos)
      << table.find("a-huge")->reason;
  // Trials at once.
  table.set_users({{"ann", limits(std::nullopt, 1, 0, 7)}});  // she holds 7
  ASSERT_TRUE(table.create(of("ann", "a-ninth", 0.1), view, now));
  settle();
  EXPECT_EQ(state("a-ninth"), group_state::pending);
  EXPECT_NE(table.find("a-ninth")->reason.find("quota of 7 trials at once"), std::string::npos) << table.find("a-ninth")->reason;
  expect_books_agree();
}

// When the cluster is full, each freed GPU goes to the user furthest below their
// weighted share: over a run, the GPUs each user holds follow the weights.
TEST_F(GroupsTest, FreedGpusGoToTheUserFurthestBelowTheirWeightedShare) {
  add_node("n1", 6);
  table.set_users({{"ann", limits(std::nullopt, 2)}, {"bob", limits(std::nullopt, 1)}});
  // Bob came first and asked for everything; ann asks for as much after him.
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(table.create(of("bob", 'b' + std::to_string(i), 1), view, now));
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(table.create(of("ann", 'a' + std::to_string(i), 1), view, now));
  settle();
  // Both were empty: ties go by share then arrival, so the first card is bob's, then
  // each next card goes to whoever is lower by GPUs over weight: ann gets 2 per bob's 1.
  auto h = table.holdings();
  EXPECT_EQ(h["ann"].gpus, quantity::whole(4)) << "ann (weight 2) holds 4 of 6";
  EXPECT_EQ(h["bob"].gpus, quantity::whole(2));
  // Bob's trials end one by one: each freed card goes to the one below their share.
  for (int round = 0; round < 2; ++round) {
    std::string victim;
    for (auto& [id, g] : table.groups())
      if (g.spec.user == "bob" && g.state == group_state::created) victim = id;
    append(table.remove(victim, view, now));
    settle();
    h = table.holdings();
    EXPECT_EQ(h["ann"].gpus + h["bob"].gpus, quantity::whole(6)) << "no card idles";
  }
  h = table.holdings();
  EXPECT_EQ(h["ann"].gpus, quantity::whole(4)) << "ann is at her share: the freed cards went back to bob";
  EXPECT_EQ(h["bob"].gpus, quantity::whole(2));
  expect_books_agree();
}

// Within one user, the freed GPUs go to the experiment holding the least, so a user's
// second experiment is not starved by their first; the user's share against others is
// unchanged.
TEST_F(GroupsTest, AUsersShareIsSplitFairlyBetweenTheirExperiments) {
  add_node("n1", 8);
  table.set_users({{"ann", limits(std::nullopt, 1)}, {"bob", limits(std::nullopt, 1)}});
  auto exp = [](const std::string& user, const std::string& experiment, const std::string& id) {
    auto s = of(user, id, 1);
    s.experiment = experiment;
    return s;
  };
  // Ann's first experiment asks for everything, then her second, then bob's.
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(table.create(exp("ann", "e1", "a1-" + std::to_string(i)), view, now));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(table.create(exp("ann", "e2", "a2-" + std::to_string(i)), view, now));
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(table.create(exp("bob", "e3", "b-" + std::to_string(i)), view, now));
  settle();
  auto held_by = [&](const std::string& e) {
    auto& h = table.experiment_holdings();
    auto it = h.find({"ann", e});
    return it == h.end() ? quantity{} : it->second.gpus;
  };
  EXPECT_EQ(table.holdings().at("ann").gpus, quantity::whole(4));
  EXPECT_EQ(table.holdings().at("bob").gpus, quantity::whole(4));
  EXPECT_EQ(held_by("e1"), quantity::whole(2)) << "ann's 4 cards split between her experiments";
  EXPECT_EQ(held_by("e2"), quantity::whole(2));
  // An experiment's trials end: the freed card goes to ann's experiment below its share
  // (ann is below bob once she gives one back).
  append(table.remove("a2-0", view, now));
  append(table.remove("a2-1", view, now));
  settle();
  EXPECT_EQ(held_by("e1"), quantity::whole(2));
  EXPECT_EQ(held_by("e2"), quantity::whole(2)) << "e2 refills to its half of ann's share";
  EXPECT_EQ(table.holdings().at("bob").gpus, quantity::whole(4));
  expect_books_agree();
}

// Dominant-resource fairness: when memory is the bottleneck, a user's share is the
// memory they hold, whatever their GPUs. Ann's groups take a quarter of the node's
// memory and no card, bob's a card and a sixteenth of the memory: ann's three groups
// (3/4 of the memory) and bob's four cards (1/2 of the cards) are the fair split; counted
// by GPUs and CPUs only, ann's groups would look small and take the memory bob needs.
TEST_F(GroupsTest, WhenMemoryIsTheBottleneckTheShareIsTheMemoryHeld) {
  add_node("n1", 8);  // 8 cards, 32 CPUs, 256 GiB
  table.set_users({{"ann", limits(std::nullopt, 1)}, {"bob", limits(std::nullopt, 1)}});
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(table.create({'a' + std::to_string(i), strategy::pack, {req({{"cpu", 1}, {"memory", 64.0 * GiB}})}, {}, "ann"},
                             view, now));
  for (int i = 0; i < 8; ++i)
    ASSERT_TRUE(table.create(
        {'b' + std::to_string(i), strategy::pack, {req({{"gpu", 1}, {"cpu", 1}, {"memory", 16.0 * GiB}})}, {}, "bob"}, view,
        now));
  settle();
  auto h = table.holdings();
  EXPECT_EQ(h["ann"].memory, 192 * GiB) << "ann: 3 groups";
  EXPECT_EQ(h["bob"].gpus, quantity::whole(4)) << "bob: 4 cards (by GPUs and CPUs only he would get 1)";
  EXPECT_EQ(h["ann"].memory + h["bob"].memory, 256 * GiB) << "the memory is the bottleneck: all of it is used";
  expect_books_agree();
}

// A higher priority goes first, whatever the shares.
TEST_F(GroupsTest, AHigherPriorityIsPlacedFirst) {
  add_node("n1", 2);
  table.set_users({{"low", limits(std::nullopt, 1, 0)}, {"high", limits(std::nullopt, 1, 10)}});
  ASSERT_TRUE(table.create(of("low", "l1", 2), view, now));
  settle();
  ASSERT_EQ(state("l1"), group_state::created);
  ASSERT_TRUE(table.create(of("low", "l2", 1), view, now));
  ASSERT_TRUE(table.create(of("high", "h1", 1), view, now));
  ASSERT_TRUE(table.create(of("high", "h2", 1), view, now));
  settle();
  append(table.remove("l1", view, now));
  settle();
  EXPECT_EQ(state("h1"), group_state::created);
  EXPECT_EQ(state("h2"), group_state::created);
  EXPECT_EQ(state("l2"), group_state::pending) << "low waits behind high, though it came first";
}

// A higher-priority group waiting on a full cluster names the fewest lower-priority
// groups whose release lets it fit, and asks nothing again while they move.
TEST_F(GroupsTest, PreemptionNamesTheFewestLowerPriorityGroupsThatMakeRoom) {
  add_node("n1", 4);
  add_node("n2", 4);
  table.set_users({{"low", limits(std::nullopt, 1, 0)}, {"mid", limits(std::nullopt, 1, 5)}, {"high", limits(std::nullopt, 1, 10)}});
  // n1: four low 1-GPU groups; n2: a mid 4-GPU group (STRICT_PACK keeps each on one node).
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(table.create({'l' + std::to_string(i), strategy::strict_pack, {req({{"gpu", 1}})}, {}, "low"}, view, now));
  settle();
  ASSERT_TRUE(table.create({"m", strategy::strict_pack, {req({{"gpu", 4}})}, {}, "mid"}, view, now));
  settle();
  for (auto id : {"l0", "l1", "l2", "l3", "m"}) ASSERT_EQ(state(id), group_state::created) << id;
  EXPECT_FALSE(table.preempt(view, now)) << "nothing waits";
  // High asks 2 GPUs on one node: two of low's groups make room; mid's is never touched
  // while low's suffice.
  ASSERT_TRUE(table.create({"h", strategy::strict_pack, {req({{"gpu", 2}})}, {}, "high"}, view, now));
  settle();
  ASSERT_EQ(state("h"), group_state::pending);
  auto p = table.preempt(view, now);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->for_group, "h");
  ASSERT_EQ(p->victims.size(), 2u) << "the fewest";
  for (auto& v : p->victims) EXPECT_EQ(v[0], 'l') << v;
  EXPECT_NE(p->reason.find("preempted for placement group h of high (priority 10, above 0)"), std::string::npos) << p->reason;
  EXPECT_FALSE(table.preempt(view, now)) << "asked once while they move";
  // Still waiting 6 s later (a victim could not move): two others are asked, never the
  // same ones again within 30 s.
  auto again = table.preempt(view, now + 6s);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->victims.size(), 2u);
  for (auto& v : again->victims)
    EXPECT_EQ(std::count(p->victims.begin(), p->victims.end(), v), 0) << v << " asked twice";
  // The victims give their groups back (their owners paused them) and ask again: high
  // is placed first, the victims' new groups wait behind it.
  for (auto& v : p->victims) append(table.remove(v, view, now));
  ASSERT_TRUE(table.create({"l0b", strategy::strict_pack, {req({{"gpu", 1}})}, {}, "low"}, view, now));
  settle();
  EXPECT_EQ(state("h"), group_state::created);
  EXPECT_EQ(state("l0b"), group_state::pending);
  // A same-priority group never preempts; nor a lower one.
  ASSERT_TRUE(table.create({"l-more", strategy::strict_pack, {req({{"gpu", 4}})}, {}, "low"}, view, now + 1min));
  settle();
  EXPECT_FALSE(table.preempt(view, now + 1min));
  expect_books_agree();
}

// Between equal candidates, the victim is the one whose trial checkpointed most
// recently (the least work to redo); unknown ones come last.
TEST_F(GroupsTest, PreemptionPicksTheMostRecentlyCheckpointedVictims) {
  add_node("n1", 4);
  table.set_users({{"low", limits(std::nullopt, 1, 0)}, {"high", limits(std::nullopt, 1, 10)}});
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(table.create({'l' + std::to_string(i), strategy::pack, {req({{"gpu", 1}})}, {}, "low"}, view, now));
  settle();
  ASSERT_TRUE(table.create({"h", strategy::pack, {req({{"gpu", 2}})}, {}, "high"}, view, now));
  settle();
  ASSERT_EQ(state("h"), group_state::pending);
  std::map<std::string, int64_t> since{{"l0", 40}, {"l1", -1}, {"l2", 3}, {"l3", 0}};
  auto redo = [&](const std::string& id) { return since.at(id); };
  auto p = table.preempt(view, now, 30s, {}, 5s, redo);
  ASSERT_TRUE(p);
  std::set<std::string> victims(p->victims.begin(), p->victims.end());
  EXPECT_EQ(victims, (std::set<std::string>{"l3", "l2"})) << "0 and 3 iterations to redo, not 40 or unknown";
  expect_books_agree();
}

}  // namespace
}  // namespace tune
