// Head and nodes as separate processes on loopback, through the real `tune` CLI.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <filesystem>
#include <sstream>
#include <set>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "harness.hpp"
#include "tune/host/detect.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;

// A TCP connection to 127.0.0.1:port.
int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class ClusterTest : public ::testing::Test {
 protected:
  cluster_files files;
  int port = free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  int head_pid = 0;

  void SetUp() override { start_head(); }

  void start_head(std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = files.tune(args);
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("head started at 127.0.0.1:" + std::to_string(port)), std::string::npos) << r.out;
    head_pid = pid_in(r.out);
    ASSERT_GT(head_pid, 0) << r.out;
  }

  struct node {
    std::string id;
    int pid = 0;
  };
  node start_node(std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> args{"start", "--address", address};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = files.tune(args, {}, "", env);
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    node n{node_id_in(r.out), pid_in(r.out)};
    EXPECT_FALSE(n.id.empty()) << r.out;
    return n;
  }

  std::string state(const node& n) { return files.state_of(address, n.id); }
};

TEST_F(ClusterTest, NodesJoinAndStatusShowsThem) {
  auto a = start_node({"--num-gpus", "2", "--num-cpus", "4", "--resources", R"({"tpu": 2})"});
  auto b = start_node({"--num-cpus", "2.5"});
  auto s = files.status(address);
  ASSERT_FALSE(s.is_null());
  ASSERT_EQ(s["nodes"].size(), 2u);
  EXPECT_EQ(s["alive_nodes"], 2);
  EXPECT_EQ(s["head"]["version"], s["nodes"][0]["version"]);
  for (auto& n : s["nodes"]) {
    EXPECT_EQ(n["alive"], true);
    EXPECT_EQ(n["address"], "127.0.0.1");
    if (n["id"] == a.id) {
      ASSERT_EQ(n["gpus"].size(), 2u);
      EXPECT_EQ(n["gpus"][0]["logical"], true);
      EXPECT_EQ(n["gpus"][0]["uuid"], "LOGICAL-" + a.id + "-0");
      EXPECT_EQ(n["gpus"][1]["allocated"], 0);
      EXPECT_EQ(n["resources"]["total"]["cpu"], 4);
      EXPECT_EQ(n["resources"]["total"]["tpu"], 2);
      EXPECT_EQ(n["resources"]["total"]["gpu"], 2);
      EXPECT_EQ(n["resources"]["available"]["gpu"], 2);
    } else {
      EXPECT_EQ(n["id"], b.id);
      EXPECT_EQ(n["gpus"].size(), 0u);
      EXPECT_DOUBLE_EQ(n["resources"]["total"]["cpu"].get<double>(), 2.5);
    }
  }
  EXPECT_DOUBLE_EQ(s["resources"]["total"]["cpu"].get<double>(), 6.5);
  // The text view names both nodes and draws the GPU map.
  auto text = files.tune({"status", "--address", address});
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("Nodes: 2 alive"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(a.id), std::string::npos);
  EXPECT_NE(text.out.find("[..........]"), std::string::npos) << text.out;
}

// On a machine with GPUs: nodes advertise the real cards, --gpus picks some, and an
// inherited CUDA_VISIBLE_DEVICES is honoured. Skips where there is no GPU.
TEST_F(ClusterTest, NodesAdvertiseRealGpus) {
  auto probe = detect_gpus();
  if (probe.gpus.empty()) GTEST_SKIP() << "no GPU here: " << probe.note;
  const auto& last = probe.gpus.back();
  auto every = start_node({"--num-cpus", "1"}, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}});
  auto picked = start_node({"--gpus", std::to_string(last.index)}, {{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}});
  auto inherited = start_node({}, {{"CUDA_VISIBLE_DEVICES", last.uuid}});
  auto s = files.status(address);
  ASSERT_FALSE(s.is_null());
  for (auto& n : s["nodes"]) {
    if (n["id"] == every.id) {
      ASSERT_EQ(n["gpus"].size(), probe.gpus.size());
      for (size_t i = 0; i < probe.gpus.size(); ++i) {
        EXPECT_EQ(n["gpus"][i]["uuid"], probe.gpus[i].uuid);
        EXPECT_EQ(n["gpus"][i]["pci_bus_id"], probe.gpus[i].pci_bus_id);
        EXPECT_EQ(n["gpus"][i]["logical"], false);
      }
    } else if (n["id"] == picked.id) {
      ASSERT_EQ(n["gpus"].size(), 1u);
      EXPECT_EQ(n["gpus"][0]["uuid"], last.uuid);
      EXPECT_EQ(n["gpus"][0]["index"], last.index);
    } else if (n["id"] == inherited.id) {
      ASSERT_EQ(n["gpus"].size(), 1u);  // the process sees only that card, numbered 0
      EXPECT_EQ(n["gpus"][0]["uuid"], last.uuid);
      EXPECT_EQ(n["gpus"][0]["index"], 0);
    }
  }
}

TEST_F(ClusterTest, HeartbeatsArrive) {
  auto a = start_node();
  auto count = [&] {
    auto s = files.status(address);
    return s.is_null() ? 0 : s["nodes"][0]["heartbeats"].get<int>();
  };
  int first = count();
  std::this_thread::sleep_for(1600ms);
  EXPECT_GE(count() - first, 2);  // one every 500 ms
  auto s = files.status(address);
  EXPECT_LT(s["nodes"][0]["last_heartbeat_ms_ago"].get<double>(), 1000);
}

TEST_F(ClusterTest, KilledNodeIsDeadWithinOneSecond) {
  auto a = start_node();
  auto b = start_node();
  ASSERT_EQ(::kill(a.pid, SIGKILL), 0);
  auto took = wait_until([&] { return state(a) == "dead"; }, 3s, 10ms);
  ASSERT_TRUE(took) << "not marked dead";
  EXPECT_LT(took->count(), 1000);
  EXPECT_EQ(state(b), "alive");
  auto s = files.status(address);
  for (auto& n : s["nodes"])
    if (n["id"] == a.id) {
      EXPECT_NE(n["reason"].get<std::string>().find("connection lost"), std::string::npos);
    }
}

TEST_F(ClusterTest, FrozenNodeIsDeadWithinFiveSecondsAndComesBack) {
  auto a = start_node();
  ASSERT_GT(a.pid, 0);  // kill(0, SIGSTOP) would stop this test's own process group
  ASSERT_EQ(::kill(a.pid, SIGSTOP), 0);
  auto took = wait_until([&] { return state(a) == "dead"; }, 8s, 50ms);
  ::kill(a.pid, SIGCONT);
  ASSERT_TRUE(took) << "not marked dead";
  EXPECT_LT(took->count(), 5000);
  EXPECT_GE(took->count(), 2500);  // not before the heartbeat timeout
  EXPECT_TRUE(wait_until([&] { return state(a) == "alive"; }, 8s, 100ms)) << "did not rejoin after SIGCONT";
}

TEST_F(ClusterTest, RestartedHeadIsRejoined) {
  auto a = start_node({"--num-gpus", "1"});
  auto b = start_node();
  ASSERT_EQ(::kill(head_pid, SIGKILL), 0);
  ASSERT_TRUE(wait_until([&] { return ::kill(head_pid, 0) != 0; }, 5s));
  start_head();
  auto took = wait_until([&] {
    auto s = files.status(address);
    return !s.is_null() && s["alive_nodes"] == 2;
  }, 10s, 100ms);
  ASSERT_TRUE(took) << "nodes did not rejoin the new head";
  auto s = files.status(address);
  for (auto& n : s["nodes"])
    if (n["id"] == a.id) {
      EXPECT_EQ(n["gpus"].size(), 1u);  // rebuilt from what the node advertises
    }
}

// Nodes keep what they hold through a head restart; the new head keeps it booked for
// its owner to claim, and releases what nobody claims after the grace period.
TEST_F(ClusterTest, PlacementGroupsThroughAHeadRestart) {
  start_node({"--num-gpus", "2"});
  start_node({"--num-gpus", "2"});
  std::string spread = R"([{"gpu": 1}, {"gpu": 1}])";
  auto keep = files.tune({"group", "create", "--address", address, "--id", "keep", "--bundles", spread, "--strategy",
                          "STRICT_SPREAD", "--wait", "5"});
  ASSERT_EQ(keep.rc, 0) << keep.out << keep.err;
  auto drop = files.tune({"group", "create", "--address", address, "--id", "drop", "--bundles", R"([{"gpu": 0.5}])",
                          "--wait", "5"});
  ASSERT_EQ(drop.rc, 0) << drop.out << drop.err;
  ASSERT_EQ(::kill(head_pid, SIGKILL), 0);
  ASSERT_TRUE(wait_until([&] { return ::kill(head_pid, 0) != 0; }, 5s));
  start_head({"--orphan-grace", "3"});
  ASSERT_TRUE(wait_until([&] {
    auto s = files.status(address);
    return !s.is_null() && s["alive_nodes"] == 2 && s["orphaned_bundles"].size() == 3;
  }, 10s, 100ms)) << files.status(address).dump();
  auto text = files.tune({"status", "--address", address});
  EXPECT_NE(text.out.find("groups this head does not know"), std::string::npos) << text.out;
  // Nothing is promised twice meanwhile: 4 GPUs, 2.5 held, so 2 whole ones cannot fit.
  auto big = files.tune({"group", "create", "--address", address, "--bundles", R"([{"gpu": 2}])"});
  EXPECT_NE(big.out.find("pending"), std::string::npos) << big.out << big.err;
  auto big_id = big.out.substr(0, big.out.find(' '));
  EXPECT_EQ(files.tune({"group", "remove", big_id, "--address", address}).rc, 0);
  // The owner claims its group: created at once, on the cards it already held.
  auto again = files.tune({"group", "create", "--address", address, "--id", "keep", "--bundles", spread, "--strategy",
                           "STRICT_SPREAD", "--json"});
  ASSERT_EQ(again.rc, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("\"created\""), std::string::npos) << again.out;
  // The unclaimed one is released after the grace: the nodes report 2 GPUs held.
  EXPECT_TRUE(wait_until([&] {
    auto s = files.status(address);
    if (s.is_null() || !s["orphaned_bundles"].empty()) return false;
    double held = 0;
    for (auto& n : s["nodes"])
      for (auto& g : n["gpus"]) held += g["allocated"].get<double>();
    return held == 2.0;
  }, 10s, 200ms)) << files.status(address).dump();
}

TEST_F(ClusterTest, WrongTokenIsRefusedAndNeverAppears) {
  std::string bad = files.dir() + "/bad-token";
  std::ofstream{bad} << "ffffffffffffffffffffffffffffffff\n";
  auto r = files.tune({"start", "--address", address, "--token-file", bad});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("refused this node: the cluster token does not match"), std::string::npos) << r.err;
  auto st = files.tune({"status", "--address", address, "--token-file", bad});
  EXPECT_EQ(st.rc, 1);
  EXPECT_NE(st.err.find("token does not match"), std::string::npos) << st.err;
  auto s = files.status(address);
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["nodes"].size(), 0u);
  auto missing = files.tune({"start", "--address", address, "--token-file", files.dir() + "/none"});
  EXPECT_EQ(missing.rc, 1);
  EXPECT_NE(missing.err.find("no token file"), std::string::npos) << missing.err;
}

TEST_F(ClusterTest, OtherVersionIsRefusedNamingBoth) {
  auto r = files.tune({"start", "--address", address}, {}, "", {{"LIBTUNE_VERSION_OVERRIDE", "9.9.9"}});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("this process runs libtune 9.9.9, the head runs libtune"), std::string::npos) << r.err;
  auto st = files.tune({"status", "--address", address}, {}, "", {{"LIBTUNE_VERSION_OVERRIDE", "9.9.9"}});
  EXPECT_EQ(st.rc, 1);
  EXPECT_NE(st.err.find("9.9.9"), std::string::npos) << st.err;
  EXPECT_EQ(files.status(address)["nodes"].size(), 0u);
}

TEST_F(ClusterTest, GarbageBytesLeaveTheHeadRunning) {
  auto a = start_node();
  std::mt19937 rng{7};
  for (int round = 0; round < 20; ++round) {
    int fd = connect_loopback(port);
    ASSERT_GE(fd, 0);
    std::string junk = round == 0 ? std::string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n"} : std::string(4096, '\0');
    if (round > 0)
      for (auto& c : junk) c = static_cast<char>(rng());
    (void)!::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(::kill(head_pid, 0), 0) << "the head died";
  auto s = files.status(address);
  ASSERT_FALSE(s.is_null()) << files.tune({"status", "--address", address}).err;
  EXPECT_EQ(s["alive_nodes"], 1);
  EXPECT_EQ(state(a), "alive");
}

// CAF 0.17 trusts a BASP header's length: without the gate, one header claiming a
// 4 GiB message makes the head allocate 4 GiB and stall.
TEST_F(ClusterTest, HeaderClaimingHugeMessageIsRefused) {
  auto a = start_node();
  for (uint8_t op : {1, 2, 6}) {
    unsigned char hdr[32] = {};
    hdr[0] = op;
    hdr[4] = hdr[5] = hdr[6] = 0xff;
    hdr[7] = 0xf0;
    int fd = connect_loopback(port);
    ASSERT_GE(fd, 0);
    (void)!::send(fd, hdr, sizeof hdr, MSG_NOSIGNAL);
    auto r = files.tune({"status", "--address", address, "--json", "--timeout", "2"});
    EXPECT_EQ(r.rc, 0) << "op " << int(op) << ": " << r.err;
    EXPECT_LT(r.took.count(), 3000);  // stalled, it would time out (2 s) and fail above
    ::close(fd);
  }
  long rss_kib = resident_kib(head_pid);
  EXPECT_LT(rss_kib, 200 * 1024) << "the head holds " << rss_kib << " KiB";
  EXPECT_EQ(state(a), "alive");
}

// The TCP ports process `pid` listens on (its sockets in /proc/net/tcp{,6} in state LISTEN).
std::set<int> listening_ports(int pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    auto target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  for (auto table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in{table};
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f{line};
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st == "0A" && inodes.count(inode)) ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
    }
  }
  return ports;
}

// No unguarded entry: the head listens on its gate's port and the dashboard's, nothing
// else (CAF gets each connection through a socketpair the gate feeds), and a node
// listens on nothing.
TEST_F(ClusterTest, TheHeadListensOnlyOnItsGateAndTheDashboardAndANodeOnNothing) {
  auto a = start_node();
  auto s = files.status(address);
  ASSERT_FALSE(s.is_null());
  std::set<int> expected{port};
  std::smatch m;
  auto dashboard = s["head"].value("dashboard", "");
  ASSERT_TRUE(std::regex_search(dashboard, m, std::regex{R"(:(\d+)/?$)"})) << dashboard;
  expected.insert(std::stoi(m[1]));
  EXPECT_EQ(listening_ports(head_pid), expected);
  EXPECT_TRUE(listening_ports(a.pid).empty()) << "the node listens on " << listening_ports(a.pid).size() << " port(s)";
  EXPECT_EQ(state(a), "alive");
}

// Hundreds of idle and slow connections, held open by a peer that sends no token,
// neither stop the dashboard nor the head's port: authenticated requests through both
// are answered within a second throughout (for longer than the gate's 10 s first-frame
// deadline).
TEST_F(ClusterTest, IdleAndSlowConnectionsDoNotStopAuthenticatedRequests) {
  auto s = files.status(address);
  ASSERT_FALSE(s.is_null());
  std::smatch m;
  auto dashboard = s["head"].value("dashboard", "");
  ASSERT_TRUE(std::regex_search(dashboard, m, std::regex{R"(:(\d+)/?$)"})) << dashboard;
  std::ifstream in{files.token_file()};
  std::string token;
  std::getline(in, token);
  const std::string script = R"(
import socket, sys, time, urllib.request, subprocess, os
host, dport, gport, token, tune, token_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
held = []
for port, first in ((dport, b"G"), (gport, b"\x01")):
    for i in range(300):
        held.append(socket.create_connection((host, port)))      # idle: not a byte
    for i in range(50):
        s = socket.create_connection((host, port)); s.sendall(first); held.append(s)  # slow: one byte
    for i in range(50):
        s = socket.create_connection((host, port)); s.shutdown(socket.SHUT_WR); held.append(s)  # half-open
worst_d = worst_g = 0.0
end = time.time() + 13
while time.time() < end:
    t = time.time()
    req = urllib.request.Request("http://%s:%d/api/nodes" % (host, dport), headers={"Authorization": "Bearer " + token})
    urllib.request.urlopen(req, timeout=5).read()
    worst_d = max(worst_d, time.time() - t)
    t = time.time()
    r = subprocess.run([tune, "status", "--address", "%s:%d" % (host, gport), "--token-file", token_file, "--timeout", "5"],
                       capture_output=True, env=dict(os.environ))
    if r.returncode != 0:
        print("status failed:", r.stderr.decode()); sys.exit(1)
    worst_g = max(worst_g, time.time() - t)
    time.sleep(0.1)
print("%.3f %.3f %d" % (worst_d, worst_g, len(held)))
)";
  auto env = files.env();
  auto r = run({"python3", "-c", script, "127.0.0.1", m[1], std::to_string(port), token, tune_binary(), files.token_file()}, env,
               60s);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  std::istringstream out{r.out};
  double worst_dashboard = 9, worst_gate = 9;
  int held = 0;
  out >> worst_dashboard >> worst_gate >> held;
  EXPECT_EQ(held, 800);
  EXPECT_LT(worst_dashboard, 1.0) << "the dashboard's slowest authenticated answer under the flood";
  EXPECT_LT(worst_gate, 1.0) << "tune status's slowest answer under the flood";
  EXPECT_EQ(::kill(head_pid, 0), 0);
}

TEST_F(ClusterTest, StoppedNodeLeavesAndStopEndsEverything) {
  auto a = start_node();
  auto b = start_node();
  ::kill(a.pid, SIGTERM);
  ASSERT_TRUE(wait_until([&] { return state(a) == "left"; }, 5s));
  auto r = files.tune({"stop"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("stopped " + b.id), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stopped head-" + std::to_string(port)), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("killed"), std::string::npos) << "a clean stop should not need SIGKILL: " << r.out;
  EXPECT_TRUE(wait_until([&] { return ::kill(head_pid, 0) != 0 && ::kill(b.pid, 0) != 0; }, 5s));
  auto again = files.tune({"stop"});
  EXPECT_NE(again.out.find("nothing running"), std::string::npos) << again.out;
}

// Regression: a head started on port 0 reported ":0" as its address in tune status.
TEST_F(ClusterTest, HeadOnAnyFreePortReportsItsRealAddress) {
  cluster_files other;
  auto r = other.tune({"start", "--head", "--host", "127.0.0.1", "--port", "0"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex{R"(head started at (127\.0\.0\.1:(\d+)))"})) << r.out;
  EXPECT_NE(m[2], "0");
  auto s = other.status(m[1]);
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["head"]["address"], m[1].str());
}

TEST_F(ClusterTest, SecondHeadOnTheSamePortIsRefused) {
  auto r = files.tune({"start", "--head", "--port", std::to_string(port)});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("already running"), std::string::npos) << r.err;
}

// Input errors: exit code 2 and a message that says what to do.
TEST_F(ClusterTest, BadCommandLinesSayWhatIsWrong) {
  struct bad {
    std::vector<std::string> args;
    int rc;
    std::string says;
  };
  for (auto& [args, rc, says] : std::vector<bad>{
           {{"start", "--head", "--frobnicate"}, 2, "unknown option '--frobnicate'"},
           {{"start"}, 2, "give --head"},
           {{"start", "--head", "--address", "127.0.0.1:1"}, 2, "give --head"},
           {{"start", "--address", "nohost"}, 2, "no port"},
           {{"start", "--address", "127.0.0.1:99999"}, 2, "between 1 and 65535"},
           {{"start", "--address", "127.0.0.1:1", "--gpus", "0"}, 2, "this machine has no GPU"},
           {{"start", "--address", "127.0.0.1:1", "--num-gpus", "1", "--gpus", "0"}, 2, "not both"},
           {{"start", "--address", "127.0.0.1:1", "--resources", R"({"cpu": 2})"}, 2, "--num-cpus"},
           {{"start", "--address", "127.0.0.1:1", "--resources", "{tpu: 2}"}, 2, "not valid JSON"},
           {{"start", "--address", "127.0.0.1:1", "--num-cpus", "-1"}, 2, "negative"},
           {{"start", "--head", "--num-gpus", "2"}, 2, "is for a node"},
           {{"start", "--address", "127.0.0.1:1", "--port", "7000"}, 2, "--port is for the head"},
           {{"status"}, 2, "give --address"},
           {{"status", "--address", "127.0.0.1:1", "--timeout", "0"}, 2, "--timeout"},
           {{"frobnicate"}, 2, "unknown command 'frobnicate'"},
           {{"stop", "--runtime-dir", "/tmp"}, 1, "others may write to it"},
       }) {
    auto r = files.tune(args);
    std::string shown;
    for (auto& a : args) shown += a + " ";
    EXPECT_EQ(r.rc, rc) << shown << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << shown << "\n" << r.err;
  }
  for (auto cmd : {"start", "status", "stop"}) {
    auto r = files.tune({cmd, "--help"});
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("usage: tune"), std::string::npos) << r.out;
  }
}

TEST_F(ClusterTest, AddressThatDoesNotAnswerFailsFast) {
  // Nothing listens.
  auto closed = files.tune({"status", "--address", "127.0.0.1:" + std::to_string(free_port())});
  EXPECT_EQ(closed.rc, 1);
  EXPECT_NE(closed.err.find("cannot reach a libtune head"), std::string::npos) << closed.err;
  EXPECT_LT(closed.took.count(), 3000);
  // Something accepts the connection and never speaks.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string silent = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto mute = files.tune({"status", "--address", silent, "--timeout", "2"});
  EXPECT_EQ(mute.rc, 1);
  EXPECT_FALSE(mute.err.empty());
  EXPECT_LT(mute.took.count(), 6000) << mute.err;
  auto node = files.tune({"start", "--address", silent});
  EXPECT_EQ(node.rc, 1);
  EXPECT_NE(node.err.find("cannot reach the head"), std::string::npos) << node.err;
  EXPECT_LT(node.took.count(), 20000);
  ::close(fd);
}

}  // namespace
}  // namespace tune::test
