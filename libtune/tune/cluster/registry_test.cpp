#include "tune/cluster/registry.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tune {
namespace {

using namespace std::chrono_literals;
constexpr int64_t GiB = int64_t{1} << 30;

node_resources two_gpu_node(const std::string& id) {
  std::vector<gpu_instance> cards;
  for (int i = 0; i < 2; ++i) cards.push_back({i, id + "-GPU-" + std::to_string(i), "bus", "H200", 80 * GiB, false});
  resource_set host;
  host.set_cpu(quantity::whole(16)).set_memory(64 * GiB);
  return *node_resources::make(host, cards);
}

struct RegistryTest : ::testing::Test {
  node_registry reg;
  node_registry::time_point t0 = node_registry::clock::now();
  void join(const std::string& id, node_registry::time_point at) {
    ASSERT_TRUE(reg.join({id, "host-" + id, "10.0.0.1", "0.1.0"}, two_gpu_node(id), at));
  }
};

TEST_F(RegistryTest, JoinPutsTheNodeInTheView) {
  join("a", t0);
  join("b", t0);
  EXPECT_EQ(reg.alive(), 2u);
  EXPECT_NE(reg.view().find("a"), nullptr);
  EXPECT_EQ(reg.find("a")->state, node_state::alive);
  EXPECT_FALSE(reg.join({"", "h", "", "0.1.0"}, two_gpu_node("x"), t0));
}

TEST_F(RegistryTest, HeartbeatUpdatesWhatIsFree) {
  join("a", t0);
  auto n = two_gpu_node("a");
  ASSERT_TRUE(n.allocate(*resource_set::make({{"gpu", 0.5}, {"cpu", 2}})));
  EXPECT_EQ(reg.heartbeat("a", n.availability(), t0 + 500ms), node_registry::heard::ok);
  EXPECT_EQ(reg.view().find("a")->available(), n.available());
  EXPECT_TRUE(reg.view().summaries_consistent());
  EXPECT_EQ(reg.find("a")->heartbeats, 1u);
  EXPECT_EQ(reg.heartbeat("zz", n.availability(), t0), node_registry::heard::unknown);
  auto bad = n.availability();
  bad.card_free.pop_back();
  EXPECT_EQ(reg.heartbeat("a", bad, t0), node_registry::heard::bad_report);
  EXPECT_EQ(reg.view().find("a")->available(), n.available());  // unchanged
}

TEST_F(RegistryTest, SilentNodesDieAfterTheTimeout) {
  join("a", t0);
  join("b", t0);
  auto free = two_gpu_node("b").availability();
  EXPECT_EQ(reg.heartbeat("b", free, t0 + 2500ms), node_registry::heard::ok);
  EXPECT_TRUE(reg.sweep(t0 + 3000ms, 3000ms).empty());  // exactly at the timeout: still alive
  auto dead = reg.sweep(t0 + 3001ms, 3000ms);
  ASSERT_EQ(dead, std::vector<node_id>{"a"});
  EXPECT_EQ(reg.find("a")->state, node_state::dead);
  EXPECT_NE(reg.find("a")->reason.find("no heartbeat for 3001 ms"), std::string::npos);
  EXPECT_EQ(reg.view().find("a"), nullptr);
  EXPECT_EQ(reg.alive(), 1u);
  // A dead node's heartbeat does not revive it: it must join again.
  EXPECT_EQ(reg.heartbeat("a", free, t0 + 4s), node_registry::heard::not_alive);
  join("a", t0 + 5s);
  EXPECT_EQ(reg.find("a")->state, node_state::alive);
  EXPECT_EQ(reg.alive(), 2u);
}

TEST_F(RegistryTest, LinkDownAndLeave) {
  join("a", t0);
  join("b", t0);
  EXPECT_TRUE(reg.mark_dead("a", "connection lost", t0 + 1s));
  EXPECT_FALSE(reg.mark_dead("a", "again", t0 + 2s));
  EXPECT_EQ(reg.find("a")->reason, "connection lost");
  EXPECT_TRUE(reg.mark_left("b", t0 + 1s));
  EXPECT_EQ(reg.find("b")->state, node_state::left);
  EXPECT_EQ(reg.alive(), 0u);
}

TEST_F(RegistryTest, ForgetsOldDeadNodes) {
  for (int i = 0; i < 5; ++i) join('n' + std::to_string(i), t0);
  for (int i = 0; i < 4; ++i) reg.mark_dead('n' + std::to_string(i), "x", t0 + std::chrono::seconds(i));
  reg.forget_gone(t0 + 10s, 3600s, 2);  // keep at most 2 gone: the newest
  EXPECT_EQ(reg.find("n0"), nullptr);
  EXPECT_EQ(reg.find("n1"), nullptr);
  EXPECT_NE(reg.find("n2"), nullptr);
  reg.forget_gone(t0 + 3602500ms, 3600s, 100);  // n2 gone 3600.5 s, n3 3599.5 s
  EXPECT_EQ(reg.find("n2"), nullptr);
  EXPECT_NE(reg.find("n3"), nullptr);
  EXPECT_NE(reg.find("n4"), nullptr);  // alive: never forgotten
}

TEST_F(RegistryTest, StatusJsonHasWhatToolsNeed) {
  join("a", t0);
  join("b", t0);
  auto n = two_gpu_node("a");
  ASSERT_TRUE(n.allocate(*resource_set::make({{"gpu", 0.25}})));
  reg.heartbeat("a", n.availability(), t0 + 100ms);
  reg.mark_dead("b", "connection lost", t0 + 200ms);
  auto j = nlohmann::json::parse(reg.status_json(t0 + 300ms));
  ASSERT_EQ(j["nodes"].size(), 2u);
  auto& a = j["nodes"][0];
  EXPECT_EQ(a["id"], "a");
  EXPECT_EQ(a["host"], "host-a");
  EXPECT_EQ(a["alive"], true);
  EXPECT_EQ(a["gpus"][0]["uuid"], "a-GPU-0");
  EXPECT_DOUBLE_EQ(a["gpus"][0]["allocated"].get<double>(), 0.25);
  EXPECT_EQ(a["gpus"][1]["allocated"], 0);
  EXPECT_EQ(a["resources"]["total"]["gpu"], 2);
  EXPECT_DOUBLE_EQ(a["resources"]["available"]["gpu"].get<double>(), 1.75);
  EXPECT_DOUBLE_EQ(a["last_heartbeat_ms_ago"].get<double>(), 200);
  auto& b = j["nodes"][1];
  EXPECT_EQ(b["alive"], false);
  EXPECT_EQ(b["state"], "dead");
  EXPECT_EQ(b["reason"], "connection lost");
  EXPECT_EQ(j["resources"]["total"]["gpu"], 2);  // alive nodes only
  EXPECT_EQ(j["alive_nodes"], 1);
}

}  // namespace
}  // namespace tune
