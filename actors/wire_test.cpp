// The protocol's own parts: refusals (what travels, what a relay keeps), and the JSON the
// typed messages become where they leave the runtime (the store's events, status).
#include "wire.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tune {
namespace {

struct WireTest : ::testing::Test {
  wire::config cfg{false};
  caf::actor_system sys{cfg};

  // `err` through CAF's binary encoding, as it crosses a connection.
  caf::error sent(const caf::error& err) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    auto copy = err;
    EXPECT_FALSE(sink(copy));
    caf::binary_deserializer source{sys, buf};
    caf::error back;
    EXPECT_FALSE(source(back));
    return back;
  }
};

TEST_F(WireTest, ARefusalKeepsItsCodeAndWordsAcrossTheWire) {
  auto back = sent(wire::refusal(errc::already_exists, "placement group g exists already; remove it first"));
  EXPECT_TRUE(wire::is_refusal(back));
  EXPECT_EQ(wire::refusal_code(back), errc::already_exists);
  EXPECT_EQ(wire::refusal_reason(back), "placement group g exists already; remove it first");
  EXPECT_EQ(sys.render(back), "already exists: placement group g exists already; remove it first");
}

TEST_F(WireTest, CafsOwnErrorsAreNotRefusals) {
  caf::error timeout = caf::sec::request_timeout;
  EXPECT_FALSE(wire::is_refusal(timeout));
  EXPECT_EQ(wire::refusal_code(timeout), errc::ok);
  EXPECT_EQ(wire::refusal_reason(timeout), "");
  EXPECT_FALSE(wire::refusal_running(timeout));
  EXPECT_FALSE(wire::is_refusal(caf::error{}));
}

TEST_F(WireTest, ARelayPrefixesTheWordsAndKeepsTheCodeAndTheRunningTrial) {
  auto running = sys.spawn([]() -> caf::behavior { return {[](int) {}}; });
  auto relayed = wire::relayed(wire::start_refusal("trial t1 runs here already", running), "node n1: ");
  EXPECT_EQ(wire::refusal_code(relayed), errc::already_exists);
  EXPECT_EQ(wire::refusal_reason(relayed), "node n1: trial t1 runs here already");
  EXPECT_EQ(wire::refusal_running(relayed), running);
  auto plain = wire::relayed(wire::start_refusal("no such program"), "node n1: ");
  EXPECT_EQ(wire::refusal_code(plain), errc::invalid_argument);
  EXPECT_FALSE(wire::refusal_running(plain));
  // CAF's own error becomes a refusal in CAF's words.
  auto lost = wire::relayed(caf::sec::request_timeout, "node n1: ");
  EXPECT_EQ(wire::refusal_code(lost), errc::invalid_argument);
  EXPECT_NE(wire::refusal_reason(lost).find("node n1: "), std::string::npos);
  caf::anon_send_exit(running, caf::exit_reason::user_shutdown);
}

TEST_F(WireTest, TheStartedEventIsTheJsonTheStoreAlwaysKept) {
  wire::wire_trial_started s{"t1", "n1", "/work/trials/t1", "", 4711, {{0, 2, "GPU-a", "0000:01:00.0", 0.5, 1 << 30, false}}};
  auto j = wire::to_json(s);
  EXPECT_EQ(j["pid"], 4711);
  EXPECT_EQ(j["node"], "n1");
  EXPECT_EQ(j["trial_dir"], "/work/trials/t1");
  EXPECT_FALSE(j.contains("restore_dir")) << "only when it started from a checkpoint";
  ASSERT_EQ(j["gpus"].size(), 1u);
  EXPECT_EQ(j["gpus"][0]["local"], 0);
  EXPECT_EQ(j["gpus"][0]["index"], 2);
  EXPECT_EQ(j["gpus"][0]["share"], 0.5);
  EXPECT_EQ(j["gpus"][0]["memory_quota"], 1 << 30);
  s.restore_dir = "/work/trials/t1/ckpt-3";
  EXPECT_EQ(wire::to_json(s)["restore_dir"], "/work/trials/t1/ckpt-3");
}

TEST_F(WireTest, TheNodesReportIsTheStatusJsonItWasBefore) {
  wire::wire_node_report r;
  r.audited = true;
  r.cards = {{0, "GPU-a", 100, 200, 37, {{"t1", "alice", 64}}, {{99, 8, "python", "bob", {"t1"}}}}};
  r.trials = {{"t1", "alice", 1024, 2048, -1, 1.5}};
  auto cards = wire::cards_json(r.cards);
  ASSERT_EQ(cards.size(), 1u);
  EXPECT_EQ(cards[0]["memory_used"], 100);
  EXPECT_EQ(cards[0]["trials"][0]["owner"], "alice");
  EXPECT_EQ(cards[0]["foreign"][0]["beside"][0], "t1");
  auto host = wire::trial_host_json(r.trials);
  EXPECT_EQ(host["t1"]["memory_peak"], 2048);
  EXPECT_FALSE(host["t1"].contains("pids")) << "what was not measured is left out";
  EXPECT_EQ(host["t1"]["owner"], "alice");
}

TEST_F(WireTest, TheGpusLastLookIsInTheEndedEventOnlyWhenTaken) {
  wire::wire_trial_end e;
  EXPECT_FALSE(wire::to_json(e).contains("gpu_after_end"));
  e.gpu_after_end = {true, false, {"pid 7 (python) on GPU 0, 1 GiB"}, {"pid 8 (x) on GPU 0"}, 3000, ""};
  auto g = wire::to_json(e)["gpu_after_end"];
  EXPECT_EQ(g["freed"], false);
  EXPECT_EQ(g["killed"].size(), 1u);
  EXPECT_EQ(g["still"].size(), 1u);
  EXPECT_EQ(g["waited_ms"], 3000);
  EXPECT_FALSE(g.contains("error"));
}

}  // namespace
}  // namespace tune
