// Placement groups under chaos, with real processes: a head, node processes with
// logical GPUs, and client processes creating and removing random groups, while nodes
// are killed (SIGKILL), frozen (SIGSTOP, declared dead, then back) and replaced, and
// two clients die holding groups. Throughout, from the head's status: no card is
// promised beyond itself, every created group holds all its bundles. Afterwards:
// nothing is reserved anywhere, by the head's books and by what the nodes report.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "harness.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;

struct node_proc {
  std::string id;
  int pid = 0;
};

class PgChaosTest : public ::testing::Test {
 protected:
  cluster_files files;
  int port = free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  std::vector<node_proc> nodes;

  void SetUp() override {
    auto r = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1"});
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
  }
  void TearDown() override {
    for (auto& n : nodes) ::kill(n.pid, SIGCONT);
    files.tune({"stop", "--grace", "3"});
  }

  node_proc start_node() {
    auto r = files.tune({"start", "--address", address, "--num-gpus", "4", "--num-cpus", "4"});
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    node_proc n{node_id_in(r.out), pid_in(r.out)};
    nodes.push_back(n);
    return n;
  }

  // Invariants on one status snapshot; returns what is wrong.
  static std::vector<std::string> violations(const nlohmann::json& s) {
    std::vector<std::string> out;
    // Card capacity, from the nodes' own descriptions.
    std::map<std::string, int64_t> card_memory;  // "node/card" -> bytes
    for (auto& n : s["nodes"]) {
      int card = 0;
      for (auto& g : n["gpus"]) card_memory[n["id"].get<std::string>() + "/" + std::to_string(card++)] = g["memory_total"];
    }
    std::map<std::string, double> share;
    std::map<std::string, int64_t> memory;
    for (auto& g : s["placement_groups"]) {
      std::string state = g["state"];
      if (state == "removed" || state == "infeasible") continue;
      for (auto& b : g["bundles"]) {
        if (state == "created" && b["state"] != "held")
          out.push_back(g["id"].get<std::string>() + " is created but a bundle is " + b["state"].get<std::string>());
        if (!b["node"].is_string()) continue;
        for (auto& c : b["gpus"]) {
          auto key = b["node"].get<std::string>() + "/" + std::to_string(c["card"].get<int>());
          share[key] += c["share"].get<double>();
          memory[key] += c["memory"].get<int64_t>();
        }
      }
    }
    for (auto& [card, total] : share)
      if (total > 1.0 + 1e-9) out.push_back("card " + card + " promised " + std::to_string(total) + " GPUs");
    for (auto& [card, bytes] : memory)
      if (card_memory.count(card) && bytes > card_memory[card]) out.push_back("card " + card + " memory over-promised");
    return out;
  }
};

TEST_F(PgChaosTest, NothingOverCommittedAndNothingLeaks) {
  for (int i = 0; i < 4; ++i) start_node();
  ASSERT_TRUE(wait_until([&] { auto s = files.status(address); return !s.is_null() && s["alive_nodes"] == 4; }, 15s));

  const double client_seconds = 12;
  std::vector<std::future<run_result>> clients;
  for (int c = 0; c < 4; ++c) {
    std::vector<std::string> argv{built_or_moved("PG_CLIENT", PG_CLIENT), "--address", address, "--token-file", files.token_file(), "--seconds",
                                  std::to_string(client_seconds), "--seed", std::to_string(100 + c)};
    if (c >= 2) argv.push_back("--crash");
    clients.push_back(std::async(std::launch::async, [argv, env = files.env()] { return run(argv, env, 60s); }));
  }

  // Chaos, while checking every snapshot.
  std::mt19937 rng{7};
  auto start = std::chrono::steady_clock::now();
  auto at = [&](double s) { return start + std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  int snapshots = 0, max_live = 0;
  std::vector<std::string> seen;
  bool killed1 = false, frozen = false, thawed = false, killed2 = false;
  node_proc frozen_node;
  while (std::chrono::steady_clock::now() < at(client_seconds + 1)) {
    auto now = std::chrono::steady_clock::now();
    if (!killed1 && now > at(3)) {
      auto& victim = nodes[rng() % nodes.size()];
      ::kill(victim.pid, SIGKILL);
      victim.pid = 0;
      start_node();
      killed1 = true;
    }
    if (!frozen && now > at(5)) {
      for (auto& n : nodes)
        if (n.pid) frozen_node = n;
      if (frozen_node.pid > 0) ::kill(frozen_node.pid, SIGSTOP);  // never 0: this test's own group  // declared dead after the heartbeat timeout...
      frozen = true;
    }
    if (!killed2 && now > at(7)) {
      for (auto& n : nodes)
        if (n.pid && n.pid != frozen_node.pid) {
          ::kill(n.pid, SIGKILL);
          n.pid = 0;
          break;
        }
      start_node();
      killed2 = true;
    }
    if (!thawed && now > at(10)) {
      ::kill(frozen_node.pid, SIGCONT);  // ...then back, with what it held: released
      thawed = true;
    }
    auto s = files.status(address);
    if (!s.is_null()) {
      ++snapshots;
      int live = 0;
      for (auto& g : s["placement_groups"]) live += g["state"] == "created";
      max_live = std::max(max_live, live);
      for (auto& v : violations(s)) seen.push_back(v);
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(seen.empty()) << seen.size() << " violations, the first: " << seen.front();
  EXPECT_GT(snapshots, 20);
  std::cout << snapshots << " snapshots checked, up to " << max_live << " groups created at once\n";
  EXPECT_GT(max_live, 0) << "groups were created while the chaos ran";

  int total_ready = 0;
  for (size_t c = 0; c < clients.size(); ++c) {
    auto r = clients[c].get();
    if (c >= 2) {
      EXPECT_EQ(r.rc, 128 + SIGKILL) << "client " << c << ": " << r.out << r.err;
      continue;
    }
    ASSERT_EQ(r.rc, 0) << "client " << c << ": " << r.out << r.err;
    auto last = r.out.substr(r.out.rfind('{'));
    auto j = nlohmann::json::parse(last);
    EXPECT_TRUE(j["violations"].empty()) << last;
    std::cout << "client " << c << ": " << last;
    EXPECT_GT(j["created"].get<int>(), 10) << last;
    total_ready += j["ready"].get<int>();
  }
  EXPECT_GT(total_ready, 10);

  // Every group is gone (the crashed clients' too), and nothing is held: by the head's
  // books, and by what every node reports in its heartbeats.
  std::string left;
  auto clean = wait_until(
      [&] {
        auto s = files.status(address);
        if (s.is_null()) return false;
        left.clear();
        for (auto& g : s["placement_groups"])
          if (g["state"] != "removed" && g["state"] != "infeasible") left += " group " + g["id"].get<std::string>();
        if (!s["orphaned_bundles"].empty()) left += " orphans";
        for (auto& n : s["nodes"]) {
          if (!n["alive"].get<bool>()) continue;
          for (auto& g : n["gpus"])
            if (g["allocated"].get<double>() != 0 || g["memory_free"] != g["memory_total"])
              left += ' ' + n["id"].get<std::string>() + " gpu " + std::to_string(g["index"].get<int>());
        }
        if (s["resources"]["available"] != s["resources"]["total"]) left += " host resources";
        return left.empty();
      },
      20s, 200ms);
  EXPECT_TRUE(clean) << "still held:" << left;

  // The chaos was real: the head saw three nodes die (two killed, one frozen).
  std::string log;
  for (auto& e : std::filesystem::directory_iterator(files.dir()))
    if (e.path().filename().string().rfind("head-", 0) == 0 && e.path().extension() == ".log") {
      std::ifstream in(e.path());
      log.assign(std::istreambuf_iterator<char>(in), {});
    }
  size_t deaths = 0;
  for (size_t p = log.find(" is dead: "); p != std::string::npos; p = log.find(" is dead: ", p + 1)) ++deaths;
  EXPECT_GE(deaths, 3u) << log;

  // And the cluster still works.
  auto r = files.tune({"group", "create", "--address", address, "--bundles", R"([{"gpu": 1}, {"gpu": 1}])",
                       "--strategy", "STRICT_SPREAD", "--wait", "10"});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
}

}  // namespace
}  // namespace tune::test
