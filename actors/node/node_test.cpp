// The node actor on CAF's deterministic scheduler: a head played by the test (it takes
// the join, hears heartbeats and reports, asks to join again), reservations prepared,
// committed, aborted and expired, starts and standby copies refused, a client's
// checkpoint reads refused, the node leaving; simulated time, no network. Trials'
// processes are tested over real processes (tests/trial_test.cpp and others).
#include "node.hpp"

#include <gtest/gtest.h>

#include <caf/scheduler/test_coordinator.hpp>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tune/host/detect.hpp"
#include "wire.hpp"
#include "deterministic.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
const std::string token = "0123456789abcdef0123456789abcdef";

// What the head played by the test saw.
struct head_log {
  std::vector<wire::wire_ad> joins;
  int heartbeats = 0;
  std::vector<wire::wire_hold> last_holdings;
  std::vector<wire::wire_node_report> reports;
  int leaves = 0;
  bool refuse = false;
};

caf::behavior fake_head(caf::event_based_actor*, std::shared_ptr<head_log> log) {
  return {
      [=](wire::join_atom, const std::string&, const wire::wire_ad& ad) -> wire::join_answer {
        log->joins.push_back(ad);
        if (log->refuse) return wire::refusal(errc::invalid_argument, "a test's no");
        return {wire::join_atom::value, std::string{"test"}};
      },
      [=](wire::heartbeat_atom, const std::string&, const std::string&, uint64_t, const wire::wire_avail&,
          const std::vector<wire::wire_hold>& holdings) {
        ++log->heartbeats;
        log->last_holdings = holdings;
      },
      [=](wire::gpu_audit_atom, const std::string&, const std::string&, const wire::wire_node_report& report) {
        log->reports.push_back(report);
      },
      [=](wire::leave_atom, const std::string&, const std::string&) {
        ++log->leaves;
        return caf::make_message(wire::leave_atom::value, true);
      },
  };
}

struct NodeTest : ::testing::Test {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("node_test_" + std::to_string(::getpid()));
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  std::shared_ptr<head_log> log = std::make_shared<head_log>();
  caf::actor head = sys.spawn(fake_head, log);
  std::optional<status> first_join;
  caf::actor node;

  void SetUp() override {
    ::setenv("LIBTUNE_FRESH_PROCESS", "1", 1);  // no warm spawners: this test starts no process
    ::setenv("LIBTUNE_FRESH_PYTHON", "1", 1);
    std::filesystem::create_directories(dir);
  }
  void TearDown() override {
    for (auto& a : {node, head})
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched.run();
    std::filesystem::remove_all(dir);
  }

  void start(std::chrono::milliseconds ttl = 10000ms) {
    node_options o;
    o.head_host = "test";
    o.head_port = 1;
    o.token = token;
    o.node_id = "n1";
    o.hostname = "host-n1";
    resource_set host;
    host.set_cpu(quantity::whole(8)).set_memory(int64_t{32} << 30);
    o.resources = *node_resources::make(host, logical_gpus("n1", 2, int64_t{16} << 30));
    o.prepare_ttl = ttl;
    o.work_dir = dir.string();
    o.head_actor = head;
    o.on_first_join = [this](const status& s) { first_join = s; };
    node = spawn_node(sys, std::move(o));
    sched.run();
  }

  void pass(std::chrono::milliseconds d, std::chrono::milliseconds step = 100ms) {
    for (auto left = d; left.count() > 0; left -= step) {
      sched.advance_time(step);
      sched.run();
    }
  }

  // A request from the test (in the head's process, so the node takes it as the
  // head's), run on the deterministic scheduler: (true, the reply's text) or (false, the
  // refusal's words).
  template <class Atom, class... Ts>
  std::pair<bool, std::string> ask(Atom atom, Ts&&... xs) {
    caf::scoped_actor me{sys};
    auto handle = me->request(node, caf::infinite, atom, std::forward<Ts>(xs)...);
    sched.run();
    std::pair<bool, std::string> out{false, "no reply"};
    handle.receive([&](Atom, std::string& text) { out = {true, text}; },
                   [&](caf::error& err) { out = {false, wire::is_refusal(err) ? wire::refusal_reason(err) : to_string(err)}; });
    return out;
  }

  // A trial's start, answered (ok, why not).
  std::pair<bool, std::string> start_trial(const wire::wire_trial_spec& spec, const std::string& key) {
    caf::scoped_actor me{sys};
    auto handle = me->request(node, caf::infinite, wire::trial_start_atom::value, spec, key, spec.bundle, caf::actor{},
                              caf::actor{});
    sched.run();
    std::pair<bool, std::string> out{false, "no reply"};
    handle.receive([&](wire::trial_start_atom, wire::wire_trial_started&, caf::actor&) { out = {true, ""}; },
                   [&](caf::error& err) { out = {false, wire::is_refusal(err) ? wire::refusal_reason(err) : to_string(err)}; });
    return out;
  }

  // A prepare from `me`, and the node's answer to it: (ok, reason).
  std::pair<bool, std::string> prepare(caf::scoped_actor& me, const std::string& key, uint32_t bundle, int gpus) {
    resource_set r;
    r.set_cpu(quantity::whole(1)).set_gpu(quantity::whole(gpus));
    me->send(node, wire::prepare_atom::value, key, bundle, wire::to_wire_request(r), wire::wire_alloc{});
    sched.run();
    std::pair<bool, std::string> out{false, "no answer"};
    me->receive([&](wire::prepare_atom, const std::string&, const std::string&, uint32_t, bool ok, const wire::wire_alloc&,
                    const std::string& why, uint64_t) { out = {ok, why}; },
                caf::after(0ms) >> [] {});
    return out;
  }
};

TEST_F(NodeTest, JoinsTheHeadWithItsAdvertisementAndHeartbeats) {
  start();
  ASSERT_TRUE(first_join.has_value());
  EXPECT_TRUE(*first_join) << first_join->message();
  ASSERT_EQ(log->joins.size(), 1u);
  EXPECT_EQ(log->joins[0].node_id, "n1");
  EXPECT_EQ(log->joins[0].gpus.size(), 2u);
  EXPECT_EQ(log->reports.size(), 1u) << "its first report goes with the join";
  int before = log->heartbeats;
  pass(wire::heartbeat_period * 4, wire::heartbeat_period);
  EXPECT_GE(log->heartbeats - before, 4);
}

TEST_F(NodeTest, ARefusedJoinIsSaidOnceAndTheNodeEnds) {
  log->refuse = true;
  start();
  ASSERT_TRUE(first_join.has_value());
  EXPECT_FALSE(*first_join);
  EXPECT_NE(first_join->message().find("refused this node: a test's no"), std::string::npos) << first_join->message();
  pass(3s);
  EXPECT_EQ(log->joins.size(), 1u) << "a refusal is not tried again";
}

TEST_F(NodeTest, AskedToJoinAgainItJoinsAgainWithItsHoldings) {
  start();
  caf::scoped_actor me{sys};
  ASSERT_TRUE(prepare(me, "g1/1/alice", 0, 1).first);
  me->send(node, wire::commit_atom::value, std::string{"g1/1/alice"}, uint32_t{0});
  me->send(node, wire::rejoin_atom::value);
  sched.run();
  ASSERT_EQ(log->joins.size(), 2u);
  ASSERT_EQ(log->joins[1].holdings.size(), 1u) << "a restarted head learns what the node holds";
  EXPECT_EQ(log->joins[1].holdings[0].key, "g1/1/alice");
}

TEST_F(NodeTest, PreparesCommitsAndAbortsBundles) {
  start();
  caf::scoped_actor me{sys};
  EXPECT_TRUE(prepare(me, "g1/1/alice", 0, 1).first);
  EXPECT_TRUE(prepare(me, "g1/1/alice", 1, 1).first);
  auto full = prepare(me, "g2/1/alice", 0, 1);
  EXPECT_FALSE(full.first) << "two cards, both prepared";
  EXPECT_FALSE(full.second.empty());
  me->send(node, wire::commit_atom::value, std::string{"g1/1/alice"}, uint32_t{0});
  me->send(node, wire::abort_atom::value, std::string{"g1/1/alice"}, uint32_t{1});
  sched.run();
  EXPECT_TRUE(prepare(me, "g2/1/alice", 0, 1).first) << "the aborted bundle's card is free again";
  me->send(node, wire::commit_atom::value, std::string{"g9/1/alice"}, uint32_t{0});
  sched.run();
  bool refused = false;
  me->receive([&](wire::commit_atom, const std::string&, const std::string&, uint32_t, bool ok, const std::string&) {
    refused = !ok;
  }, caf::after(0ms) >> [] {});
  EXPECT_TRUE(refused) << "a commit of a bundle never prepared is answered, not taken";
}

TEST_F(NodeTest, APrepareNeverCommittedIsReleasedAfterItsTimeToLive) {
  start(1000ms);
  caf::scoped_actor me{sys};
  ASSERT_TRUE(prepare(me, "g1/1/alice", 0, 2).first);
  pass(500ms);
  EXPECT_EQ(log->last_holdings.size(), 1u);
  pass(1500ms);
  EXPECT_EQ(log->last_holdings.size(), 0u) << "the head never committed: nothing leaks";
  EXPECT_TRUE(prepare(me, "g2/1/alice", 0, 2).first);
}

TEST_F(NodeTest, AStartWithoutACommittedBundleOrWithABadIdIsRefused) {
  start();
  wire::wire_trial_spec spec;
  spec.trial_id = "t1";
  spec.group = "g1";
  spec.program_sha256 = std::string(64, 'a');
  auto [ok, text] = start_trial(spec, "g1/1/alice");
  EXPECT_FALSE(ok);
  EXPECT_EQ(text, "node n1: it holds no committed bundle 0 of group g1");
  spec.trial_id = ".hidden";
  std::tie(ok, text) = start_trial(spec, "g1/1/alice");
  EXPECT_EQ(text, "node n1: bad trial id \".hidden\": no slashes, spaces or leading dot");
}

TEST_F(NodeTest, AStartWhoseProgramNobodyServesFailsAndTheBundleStaysHeld) {
  start();
  caf::scoped_actor me{sys};
  ASSERT_TRUE(prepare(me, "g1/1/alice", 0, 1).first);
  me->send(node, wire::commit_atom::value, std::string{"g1/1/alice"}, uint32_t{0});
  sched.run();
  wire::wire_trial_spec spec;
  spec.trial_id = "t1";
  spec.group = "g1";
  spec.program_name = "train";
  spec.program_sha256 = std::string(64, 'a');
  auto [ok, text] = start_trial(spec, "g1/1/alice");
  EXPECT_FALSE(ok);
  EXPECT_EQ(text, "node n1: program train is not on this node and nobody serves it");
  pass(wire::heartbeat_period, wire::heartbeat_period);
  EXPECT_EQ(log->last_holdings.size(), 1u);
}

TEST_F(NodeTest, StandbyCopiesAreCheckedAndDropped) {
  start();
  auto no_manifest = ask(wire::stage_atom::value, std::string{"alice/t1"}, std::string{"{}"}, std::string{}, uint64_t{0},
                         caf::actor{});
  EXPECT_EQ(no_manifest, std::make_pair(false, std::string{"the checkpoint to restore is not a manifest"}));
  auto nobody = ask(wire::stage_atom::value, std::string{"alice/t1"},
                    R"({"iteration":1,"files":[{"name":"a","size":1,"sha256":")" + std::string(64, 'c') + "\"}]}",
                    std::string{}, uint64_t{0}, caf::actor{});
  EXPECT_EQ(nobody, std::make_pair(false, std::string{"nobody serves the checkpoint"}));
  auto dropped = ask(wire::stage_atom::value, std::string{"alice/t1"}, std::string{R"({"iteration":1,"files":[]})"},
                     std::string{}, uint64_t{0}, caf::actor{});
  EXPECT_EQ(dropped, std::make_pair(true, std::string{"dropped"}));
}

TEST_F(NodeTest, CheckpointsAreReadOnlyWithTheNodesTokenOrTheTrialsSecret) {
  start();
  auto refused = ask(wire::ckpt_list_atom::value, std::string{"not-the-token"}, std::string{"t1"}, std::string{"/x"});
  EXPECT_FALSE(refused.first);
  EXPECT_NE(refused.second.find("not allowed to read trial t1's checkpoints"), std::string::npos) << refused.second;
  auto missing = ask(wire::ckpt_list_atom::value, token, std::string{"t1"}, std::string{"/x"});
  EXPECT_EQ(missing, std::make_pair(false, std::string{"no trial t1 on node n1"}));
}

TEST_F(NodeTest, LeavingTellsTheHead) {
  start();
  caf::scoped_actor me{sys};
  auto handle = me->request(node, caf::infinite, wire::leave_atom::value);
  sched.run();
  bool left = false;
  handle.receive([&](wire::leave_atom, bool ok) { left = ok; }, [&](caf::error&) {});
  EXPECT_TRUE(left);
  EXPECT_EQ(log->leaves, 1);
  int before = log->heartbeats;
  pass(wire::heartbeat_period * 3, wire::heartbeat_period);
  EXPECT_EQ(log->heartbeats, before) << "a node that left beats no more";
}

}  // namespace
}  // namespace tune
