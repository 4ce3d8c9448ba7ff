// The head actor on CAF's deterministic scheduler: joins, refusals, heartbeats and
// their timeout, lost connections and rejoins, stepped through simulated time.
#include <gtest/gtest.h>

#include <caf/scheduler/test_coordinator.hpp>
#include <nlohmann/json.hpp>
#include <optional>

#include "head.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"
#include "deterministic.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
const std::string token = "0123456789abcdef0123456789abcdef";

struct HeadTest : ::testing::Test {
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::actor head = spawn_head(sys, {token, "test:6380", wire::heartbeat_timeout});

  void SetUp() override { sched.run(); }
  void TearDown() override {
    caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
    sched.run();
  }

  static wire::wire_ad ad(const std::string& id, const std::string& version = tune::version()) {
    resource_set host;
    host.set_cpu(quantity::whole(8)).set_memory(int64_t{32} << 30);
    auto n = *node_resources::make(host, logical_gpus(id, 2, int64_t{16} << 30));
    auto a = wire::make_ad(id, "host-" + id, "10.0.0.2", n);
    a.version = version;
    return a;
  }

  // A request from `who`, run on the deterministic scheduler: (true, the reply's text),
  // or (false, the refusal's words).
  template <class Atom, class... Ts>
  std::pair<bool, std::string> ask(caf::scoped_actor& who, Atom atom, Ts&&... xs) {
    auto handle = who->request(head, caf::infinite, atom, std::forward<Ts>(xs)...);
    sched.run();
    std::pair<bool, std::string> out{false, "no reply"};
    handle.receive([&](Atom, std::string& text) { out = {true, text}; },
                   [&](caf::error& err) { out = {false, wire::is_refusal(err) ? wire::refusal_reason(err) : to_string(err)}; });
    return out;
  }

  std::pair<bool, std::string> join(caf::scoped_actor& who, const wire::wire_ad& a, const std::string& tok = token) {
    return ask(who, wire::join_atom::value, tok, a);
  }

  nlohmann::json status() {
    caf::scoped_actor client{sys};
    auto [ok, text] = ask(client, wire::status_atom::value, token, version());
    EXPECT_TRUE(ok) << text;
    return ok ? nlohmann::json::parse(text) : nlohmann::json::object();
  }

  std::string state_of(const std::string& id) {
    auto s = status();
    for (auto& n : s["nodes"])
      if (n["id"] == id) return n["state"];
    return "absent";
  }

  void beat(caf::scoped_actor& who, const std::string& id) {
    resource_set host;
    host.set_cpu(quantity::whole(8)).set_memory(int64_t{32} << 30);
    auto n = *node_resources::make(host, logical_gpus(id, 2, int64_t{16} << 30));
    who->send(head, wire::heartbeat_atom::value, token, id, uint64_t{1}, wire::to_wire(n.availability()), std::vector<wire::wire_hold>{});
    sched.run();
  }

  // Advances simulated time in sweep-sized steps, running everything due.
  void pass(std::chrono::milliseconds d) {
    for (auto left = d; left.count() > 0; left -= wire::sweep_period) {
      sched.advance_time(std::min(left, std::chrono::milliseconds(wire::sweep_period)));
      sched.run();
    }
  }
};

TEST_F(HeadTest, JoinedNodeAppearsInStatus) {
  caf::scoped_actor node{sys};
  auto [ok, text] = join(node, ad("n1"));
  EXPECT_TRUE(ok) << text;
  EXPECT_EQ(text, version());
  auto s = status();
  ASSERT_EQ(s["nodes"].size(), 1u);
  EXPECT_EQ(s["nodes"][0]["id"], "n1");
  EXPECT_EQ(s["nodes"][0]["gpus"].size(), 2u);
  EXPECT_EQ(s["resources"]["total"]["cpu"], 8);
  EXPECT_EQ(s["head"]["address"], "test:6380");
}

TEST_F(HeadTest, WrongTokenIsRefusedAndNeverAppears) {
  caf::scoped_actor node{sys};
  auto [ok, text] = join(node, ad("n1"), "ffffffffffffffffffffffffffffffff");
  EXPECT_FALSE(ok);
  EXPECT_NE(text.find("token does not match"), std::string::npos) << text;
  EXPECT_EQ(status()["nodes"].size(), 0u);
  caf::scoped_actor client{sys};
  EXPECT_FALSE(ask(client, wire::status_atom::value, std::string{"wrong-token-wrong-token"}, version()).first);
  // Heartbeats with a wrong token are ignored, not answered.
  client->send(head, wire::heartbeat_atom::value, std::string{"bad"}, std::string{"n1"}, uint64_t{1}, wire::wire_avail{}, std::vector<wire::wire_hold>{});
  sched.run();
  EXPECT_EQ(status()["nodes"].size(), 0u);
}

TEST_F(HeadTest, OtherVersionIsRefusedNamingBoth) {
  caf::scoped_actor node{sys};
  auto [ok, text] = join(node, ad("n1", "9.9.9"));
  EXPECT_FALSE(ok);
  EXPECT_NE(text.find("9.9.9"), std::string::npos) << text;
  EXPECT_NE(text.find(version()), std::string::npos) << text;
  caf::scoped_actor client{sys};
  auto [refused_ok, refused] = ask(client, wire::status_atom::value, token, std::string{"0.0.1"});
  EXPECT_FALSE(refused_ok);
  EXPECT_NE(refused.find("0.0.1"), std::string::npos) << refused;
}

TEST_F(HeadTest, MalformedAdvertisementIsRefused) {
  caf::scoped_actor node{sys};
  auto a = ad("n1");
  a.gpus[1].uuid = a.gpus[0].uuid;
  auto [ok, text] = join(node, a);
  EXPECT_FALSE(ok);
  EXPECT_NE(text.find("appears twice"), std::string::npos) << text;
}

TEST_F(HeadTest, HeartbeatsKeepANodeAliveAndSilenceKillsIt) {
  caf::scoped_actor node{sys};
  ASSERT_TRUE(join(node, ad("n1")).first);
  for (int i = 0; i < 20; ++i) {  // 10 s of heartbeats every 500 ms
    pass(500ms);
    beat(node, "n1");
  }
  EXPECT_EQ(state_of("n1"), "alive");
  pass(2750ms);  // silent 2.75 s: not yet
  EXPECT_EQ(state_of("n1"), "alive");
  pass(500ms);   // silent 3.25 s: past the 3 s timeout
  EXPECT_EQ(state_of("n1"), "dead");
}

TEST_F(HeadTest, LostConnectionIsDeadAtOnceAndRejoinRevives) {
  {
    caf::scoped_actor node{sys};
    ASSERT_TRUE(join(node, ad("n1")).first);
  }  // the node's actor ends: its down message arrives
  sched.run();
  EXPECT_EQ(state_of("n1"), "dead");
  caf::scoped_actor again{sys};
  // Its heartbeat is answered with "join again"...
  again->send(head, wire::heartbeat_atom::value, token, std::string{"n1"}, uint64_t{9}, wire::wire_avail{}, std::vector<wire::wire_hold>{});
  sched.run();
  bool asked = false;
  again->receive([&](wire::rejoin_atom) { asked = true; }, caf::after(0s) >> [] {});
  EXPECT_TRUE(asked);
  // ...and joining again makes it alive with the same id.
  ASSERT_TRUE(join(again, ad("n1")).first);
  EXPECT_EQ(state_of("n1"), "alive");
}

TEST_F(HeadTest, AnOldConnectionsDownMessageDoesNotKillARejoinedNode) {
  std::optional<caf::scoped_actor> first;
  first.emplace(sys);
  ASSERT_TRUE(join(*first, ad("n1")).first);
  caf::scoped_actor second{sys};
  ASSERT_TRUE(join(second, ad("n1")).first);  // reconnected before the head saw the old link drop
  first.reset();
  sched.run();
  EXPECT_EQ(state_of("n1"), "alive");
}

TEST_F(HeadTest, LeaveMarksTheNodeLeft) {
  caf::scoped_actor node{sys};
  ASSERT_TRUE(join(node, ad("n1")).first);
  auto handle = node->request(head, caf::infinite, wire::leave_atom::value, token, std::string{"n1"});
  sched.run();
  bool left = false;
  handle.receive([&](wire::leave_atom, bool l) { left = l; }, [](caf::error&) {});
  EXPECT_TRUE(left);
  EXPECT_EQ(state_of("n1"), "left");
}

TEST_F(HeadTest, SubscribersHearAboutNodes) {
  caf::scoped_actor watcher{sys};
  ASSERT_TRUE(ask(watcher, wire::subscribe_atom::value, token).first);
  caf::scoped_actor node{sys};
  ASSERT_TRUE(join(node, ad("n1")).first);
  std::string state;
  watcher->receive([&](wire::node_event_atom, const std::string& id, const std::string& s, const std::string&) {
    EXPECT_EQ(id, "n1");
    state = s;
  }, caf::after(0s) >> [] {});
  EXPECT_EQ(state, "alive");
}

}  // namespace
}  // namespace tune
