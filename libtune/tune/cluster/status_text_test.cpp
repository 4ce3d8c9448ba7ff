#include "tune/cluster/status_text.hpp"

#include <gtest/gtest.h>

#include "tune/cluster/registry.hpp"

#include <nlohmann/json.hpp>

namespace tune {
namespace {

using namespace std::chrono_literals;

TEST(StatusText, ShowsNodesResourcesAndTheGpuMap) {
  node_registry reg;
  auto t0 = node_registry::clock::now();
  std::vector<gpu_instance> cards{{0, "GPU-aaaa", "0000:06:00.0", "NVIDIA H200", int64_t{140} << 30, false},
                                  {1, "GPU-bbbb", "0000:07:00.0", "NVIDIA H200", int64_t{140} << 30, false}};
  resource_set host;
  host.set_cpu(quantity::whole(32)).set_memory(int64_t{256} << 30).set_custom("tpu", quantity::whole(2));
  auto n = *node_resources::make(host, cards);
  ASSERT_TRUE(reg.join({"node-1", "box", "10.0.0.2", "0.1.0"}, n, t0));
  ASSERT_TRUE(n.allocate(*resource_set::make({{"gpu", 0.25}, {"cpu", 4}})));
  reg.heartbeat("node-1", n.availability(), t0 + 100ms);
  ASSERT_TRUE(reg.join({"node-2", "other", "10.0.0.3", "0.1.0"}, *node_resources::make(host, {}), t0));
  reg.mark_dead("node-2", "connection lost", t0 + 1s);
  auto json = reg.status_json(t0 + 1500ms);
  auto text = render_status_text(json);
  ASSERT_TRUE(text) << text.error().message();
  const auto& s = *text;
  EXPECT_NE(s.find("Nodes: 1 alive, 1 dead or stopped"), std::string::npos) << s;
  EXPECT_NE(s.find("alive  node-1"), std::string::npos) << s;
  EXPECT_NE(s.find("box (10.0.0.2)"), std::string::npos) << s;
  EXPECT_NE(s.find("dead   node-2"), std::string::npos) << s;
  EXPECT_NE(s.find("connection lost"), std::string::npos) << s;
  EXPECT_NE(s.find("gpu         0.25 / 2"), std::string::npos) << s;
  EXPECT_NE(s.find("cpu         4 / 32"), std::string::npos) << s;
  EXPECT_NE(s.find("tpu         0 / 2"), std::string::npos) << s;
  EXPECT_NE(s.find("GPU-aaaa"), std::string::npos) << s;
  EXPECT_NE(s.find("[##........] 0.25"), std::string::npos) << s;
  EXPECT_NE(s.find("[..........] 0 "), std::string::npos) << s;
}

TEST(StatusText, ListsPlacementGroups) {
  node_registry reg;
  auto j = nlohmann::json::parse(reg.status_json(node_registry::clock::now()));
  j["placement_groups"] = nlohmann::json::parse(R"([
    {"id": "train-1", "state": "created", "strategy": "STRICT_SPREAD", "reason": "",
     "bundles": [{"index": 0, "request": "{\"gpu\":1}", "state": "held", "node": "n1",
                  "gpus": [{"card": 1, "index": 1, "uuid": "GPU-b", "share": 1, "memory": 1}]},
                 {"index": 1, "request": "{\"gpu\":1}", "state": "held", "node": "n2",
                  "gpus": [{"card": 0, "index": 0, "uuid": "GPU-c", "share": 1, "memory": 1}]}]},
    {"id": "wide", "state": "pending", "strategy": "PACK", "reason": "waiting for 4 free GPUs on one node",
     "bundles": [{"index": 0, "request": "{\"gpu\":4}", "state": "waiting", "node": null}]},
    {"id": "gone", "state": "removed", "strategy": "PACK", "reason": "", "bundles": []}])");
  j["orphaned_bundles"] = nlohmann::json::parse(R"([{"key": "old/7", "bundle": 0, "node": "n1", "request": "{\"gpu\":1}"}])");
  auto text = render_status_text(j.dump());
  ASSERT_TRUE(text) << text.error().message();
  const auto& s = *text;
  EXPECT_NE(s.find("Placement groups: 1 created, 1 pending, 1 removed"), std::string::npos) << s;
  EXPECT_NE(s.find("train-1"), std::string::npos) << s;
  EXPECT_NE(s.find("@ n1 gpu 1; {\"gpu\":1} @ n2 gpu 0"), std::string::npos) << s;
  EXPECT_NE(s.find("waiting for 4 free GPUs on one node"), std::string::npos) << s;
  EXPECT_EQ(s.find("gone "), std::string::npos) << "removed groups are counted, not listed: " << s;
  EXPECT_NE(s.find("old/7#0 on n1"), std::string::npos) << s;
}

TEST(StatusText, ShowsWhatTheGpuAuditFoundOnACard) {
  node_registry reg;
  auto t0 = node_registry::clock::now();
  std::vector<gpu_instance> cards{{0, "GPU-aaaa", "0000:06:00.0", "NVIDIA H200", int64_t{140} << 30, false}};
  ASSERT_TRUE(reg.join({"node-1", "box", "10.0.0.2", "0.1.0"}, *node_resources::make(resource_set{}, cards), t0));
  auto j = nlohmann::json::parse(reg.status_json(t0));
  j["nodes"][0]["gpu_audit"] = nlohmann::json::parse(R"([{"index": 0, "uuid": "GPU-aaaa",
      "memory_used": 12884901888, "memory_total": 150323855360,
      "trials": [{"trial": "t-7", "memory": 2147483648}],
      "foreign": [{"pid": 4242, "name": "python3", "memory": 9663676416}, {"pid": 17, "name": "", "memory": -1}]}])");
  auto text = render_status_text(j.dump());
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_NE(text->find("in use 12 GiB of 140 GiB; trial t-7 2 GiB"), std::string::npos) << *text;
  EXPECT_NE(text->find("not this cluster's: pid 4242 (python3) 9 GiB"), std::string::npos) << *text;
  EXPECT_NE(text->find("not this cluster's: pid 17\n"), std::string::npos) << *text;
}

// What a user sees of others (status_for_user's marks): who holds, how many, how much.
TEST(StatusText, ShowsOtherUsersHoldingsAsHeldByTheirOwner) {
  node_registry reg;
  auto t0 = node_registry::clock::now();
  std::vector<gpu_instance> cards{{0, "GPU-aaaa", "0000:06:00.0", "NVIDIA H200", int64_t{140} << 30, false}};
  ASSERT_TRUE(reg.join({"node-1", "box", "10.0.0.2", "0.1.0"}, *node_resources::make(resource_set{}, cards), t0));
  auto j = nlohmann::json::parse(reg.status_json(t0));
  j["nodes"][0]["trial_host"] = nlohmann::json::parse(R"({"t-1@x": {"memory": 1048576, "owner": "bob"}})");
  j["nodes"][0]["trials_held_by"] = nlohmann::json::parse(R"({"ann": 3, "cy": 1})");
  j["nodes"][0]["gpu_audit"] = nlohmann::json::parse(R"([{"index": 0, "uuid": "GPU-aaaa",
      "memory_used": 4294967296, "memory_total": 150323855360,
      "trials": [{"held_by": "ann", "memory": 2147483648}, {"trial": "t-1@x", "memory": 1073741824, "owner": "bob"}]}])");
  j["placement_groups"] = nlohmann::json::parse(R"([
    {"id": "g-ann", "state": "created", "strategy": "PACK", "owner": "ann", "held_by": "ann", "bundles": []},
    {"id": "g-bob", "state": "created", "strategy": "PACK", "owner": "bob", "bundles": []}])");
  auto text = render_status_text(j.dump());
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_NE(text->find("held by ann (3 trials)"), std::string::npos) << *text;
  EXPECT_NE(text->find("held by cy (1 trial)\n"), std::string::npos) << *text;
  EXPECT_NE(text->find("trial t-1@x: host memory 1 MiB"), std::string::npos) << *text;
  EXPECT_NE(text->find("in use 4 GiB of 140 GiB; held by ann 2 GiB; trial t-1@x 1 GiB"), std::string::npos) << *text;
  EXPECT_NE(text->find("(held by ann)"), std::string::npos) << *text;
  EXPECT_NE(text->find("(bob's)"), std::string::npos) << *text;
}

TEST(StatusText, ShowsRunningExperimentsAndTheirAutoPackingShare) {
  auto j = nlohmann::json::parse(R"({"nodes": [], "experiments": [
    {"name": "fmnist-auto", "state": "running", "owner": "ana", "trials_by_state": {"running": 16, "terminated": 3},
     "auto_packing": {"phase": "sized", "share": 0.0625, "trials_per_card": 16, "peak": 1288490188, "margin": 0.25,
                      "util": 31, "outgrown": 1}},
    {"name": "probing", "state": "running", "auto_packing": {"phase": "probing", "probe_share": 0.25}},
    {"name": "old", "state": "done"}]})");
  auto text = render_status_text(j.dump());
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_NE(text->find("Experiments running: 2"), std::string::npos) << *text;
  EXPECT_NE(text->find("16 running, 3 terminated  (ana's)"), std::string::npos) << *text;
  EXPECT_NE(text->find("auto-packing: share 0.0625 of a GPU (16 per card) for a peak of 1.2 GiB + 25%, probe SM "
                       "utilisation 31%, 1 restarted on a bigger share"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("auto-packing: probing on 0.25 of a GPU"), std::string::npos) << *text;
  EXPECT_EQ(text->find("old"), std::string::npos) << *text;
}

TEST(StatusText, RefusesOtherJson) {
  EXPECT_FALSE(render_status_text("{}"));
  EXPECT_FALSE(render_status_text("not json"));
}

}  // namespace
}  // namespace tune

namespace tune {
namespace {

TEST(StatusText, ShowsTheDashboardsAddress) {
  node_registry reg;
  auto j = nlohmann::json::parse(reg.status_json(node_registry::clock::now()));
  j["head"] = {{"address", "h:6380"}, {"version", "0.1.0"}, {"uptime_s", 3.0}, {"dashboard", "http://h:8265/"}};
  auto text = render_status_text(j.dump());
  ASSERT_TRUE(text) << text.error().message();
  EXPECT_NE(text->find("dashboard: http://h:8265/"), std::string::npos) << *text;
  j["head"].erase("dashboard");
  EXPECT_EQ(render_status_text(j.dump())->find("dashboard:"), std::string::npos);
}

}  // namespace
}  // namespace tune
