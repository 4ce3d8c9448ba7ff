// Head and nodes as separate hosts: each in its own network namespace, wired to a
// bridge in a switch namespace (veth pairs). Needs root and iproute2; skips without.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "harness.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;

class NetnsTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::unique_ptr<netns_lab> lab;
  std::string head = netns_lab::address(0) + ":6380";

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (run({"ip", "netns", "list"}).rc != 0) GTEST_SKIP() << "no `ip netns` here";
    lab = std::make_unique<netns_lab>(3);
    ASSERT_TRUE(lab->ok()) << "could not build the namespaces: " << lab->why();
    auto r = files.tune({"start", "--head", "--host", netns_lab::address(0)}, lab->on(0), runtime(0));
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
  }
  void TearDown() override {
    if (!lab || !lab->ok()) return;  // nothing was started
    for (int h = 0; h < 3; ++h) files.tune({"stop", "--grace", "3"}, lab->on(h), runtime(h));
    lab.reset();
  }

  std::string runtime(int host) const { return files.dir() + "/host" + std::to_string(host); }

  struct node {
    std::string id;
    int pid = 0;
  };
  node start_node(int host, std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"start", "--address", head};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = files.tune(args, lab->on(host), runtime(host));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    return {node_id_in(r.out), pid_in(r.out)};
  }
  std::string state(const node& n, int from = 0) { return files.state_of(head, n.id, lab->on(from)); }
};

TEST_F(NetnsTest, NodesOnOtherHostsJoin) {
  auto a = start_node(1, {"--num-gpus", "4"});
  auto b = start_node(2, {"--num-cpus", "3"});
  for (int from : {0, 1}) {  // from the head's host and from a node's host
    auto s = files.status(head, lab->on(from));
    ASSERT_FALSE(s.is_null());
    ASSERT_EQ(s["alive_nodes"], 2);
    for (auto& n : s["nodes"]) {
      if (n["id"] == a.id) {
        EXPECT_EQ(n["address"], netns_lab::address(1));
        EXPECT_EQ(n["gpus"].size(), 4u);
      } else {
        EXPECT_EQ(n["id"], b.id);
        EXPECT_EQ(n["address"], netns_lab::address(2));
      }
    }
  }
}

TEST_F(NetnsTest, CutLinkIsDeadWithinFiveSecondsAndRejoinsWhenRestored) {
  auto a = start_node(1);
  auto b = start_node(2);
  ASSERT_TRUE(lab->link(1, false));
  auto took = wait_until([&] { return state(a) == "dead"; }, 8s, 50ms);
  ASSERT_TRUE(took) << "a cut-off node was not declared dead";
  EXPECT_LT(took->count(), 5000);
  EXPECT_EQ(state(b), "alive");
  ASSERT_TRUE(lab->link(1, true));
  EXPECT_TRUE(wait_until([&] { return state(a) == "alive"; }, 15s, 100ms)) << "did not rejoin after the link came back";
}

TEST_F(NetnsTest, KilledNodeOnAnotherHostIsDeadWithinOneSecond) {
  auto a = start_node(1);
  ASSERT_GT(a.pid, 0);
  ASSERT_EQ(::kill(a.pid, SIGKILL), 0);
  auto took = wait_until([&] { return state(a) == "dead"; }, 3s, 10ms);
  ASSERT_TRUE(took);
  EXPECT_LT(took->count(), 1000);
}

TEST_F(NetnsTest, FrozenNodeOnAnotherHostIsDeadWithinFiveSeconds) {
  auto a = start_node(2);
  ASSERT_GT(a.pid, 0);  // kill(0, SIGSTOP) would stop this test's own process group
  ASSERT_EQ(::kill(a.pid, SIGSTOP), 0);
  auto took = wait_until([&] { return state(a) == "dead"; }, 8s, 50ms);
  ::kill(a.pid, SIGCONT);
  ASSERT_TRUE(took);
  EXPECT_LT(took->count(), 5000);
}

TEST_F(NetnsTest, RestartedHeadIsRejoinedAcrossHosts) {
  auto a = start_node(1);
  auto b = start_node(2);
  auto stopped = files.tune({"stop", "--grace", "3"}, lab->on(0), runtime(0));
  ASSERT_EQ(stopped.rc, 0) << stopped.err;
  ASSERT_NE(stopped.out.find("stopped head-6380"), std::string::npos) << stopped.out;
  auto r = files.tune({"start", "--head", "--host", netns_lab::address(0)}, lab->on(0), runtime(0));
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(wait_until([&] {
    auto s = files.status(head, lab->on(0));
    return !s.is_null() && s["alive_nodes"] == 2;
  }, 10s, 100ms)) << "nodes on other hosts did not rejoin the restarted head";
}

TEST_F(NetnsTest, WrongTokenFromAnotherHostIsRefused) {
  std::string bad = files.dir() + "/bad-token";
  run({"sh", "-c", "echo eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee > " + bad});
  auto r = files.tune({"start", "--address", head, "--token-file", bad}, lab->on(1), runtime(1));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("token does not match"), std::string::npos) << r.err;
  auto s = files.status(head, lab->on(2));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["nodes"].size(), 0u);
}

TEST_F(NetnsTest, HostThatDoesNotExistFailsFast) {
  auto r = files.tune({"status", "--address", "10.213.0.99:6380", "--timeout", "2"}, lab->on(1), runtime(1));
  EXPECT_EQ(r.rc, 1);
  EXPECT_FALSE(r.err.empty());
  EXPECT_LT(r.took.count(), 6000) << r.err;
}

}  // namespace
}  // namespace tune::test
