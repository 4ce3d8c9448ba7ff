// Trials of several workers across hosts (docs/workers.md): the head in one network
// namespace (host 0), a node of 2 CPUs in each of two others (hosts 1 and 2), the
// experiment's driver in a fourth (host 3). A gang's workers meet at rank 0's node over
// the namespaces' link (tests/programs/gang.py: rank 0 listens at MASTER_ADDR:MASTER_PORT,
// the others connect), so a trial ends well only if every rank reached it. Needs root
// and iproute2; skips without.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "harness.hpp"
#include "tune/tuner/store.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string py() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

class GangNetnsTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::unique_ptr<netns_lab> lab;
  std::string head = netns_lab::address(0) + ":6380";
  std::string project, rec, exp;

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (run({"ip", "netns", "list"}).rc != 0) GTEST_SKIP() << "no `ip netns` here";
    lab = std::make_unique<netns_lab>(4);
    if (!lab->ok()) {
      auto why = lab->why();
      lab.reset();
      GTEST_SKIP() << "cannot make network namespaces here: " << why;
    }
    auto h = files.tune({"start", "--head", "--host", netns_lab::address(0)}, lab->on(0), runtime(0));
    ASSERT_EQ(h.rc, 0) << h.out << h.err;
    for (int host : {1, 2}) {
      auto n = files.tune({"start", "--address", head, "--num-cpus", "2", "--num-gpus", "0"}, lab->on(host), runtime(host));
      ASSERT_EQ(n.rc, 0) << n.out << n.err;
    }
    project = files.dir() + "/project";
    rec = files.dir() + "/record.jsonl";
    exp = files.dir() + "/exp";
    fs::create_directories(project);
    fs::copy_file(std::string{PROGRAMS_DIR} + "/gang.py", project + "/gang.py");
    std::ofstream(rec).flush();
    fs::permissions(rec, fs::perms::all);
  }
  void TearDown() override {
    if (!lab) return;
    for (int h : {2, 1, 0}) files.tune({"stop", "--grace", "3"}, lab->on(h), runtime(h));
    lab.reset();
  }
  std::string runtime(int host) const { return files.dir() + "/host" + std::to_string(host); }

  run_result experiment(const std::string& body) {
    std::ofstream(project + "/gang.yaml") << "metric: val_acc\nprogress: none\ncommand: [" << py()
                                          << ", gang.py, --record, " << rec << "]\n" << body;
    std::vector<std::string> argv = lab->on(3);
    argv.insert(argv.end(), {TUNE_BINARY, "run", "gang.yaml", "--address", head, "--token-file", files.token_file(),
                             "--experiment-dir", exp});
    return run(argv, {{"TUNE_RUNTIME_DIR", runtime(3)}, {"CUDA_VISIBLE_DEVICES", ""}}, 120s, project);
  }
};

TEST_F(GangNetnsTest, FourWorkersOnTwoHostsGetNodeAndLocalRanksAndMeetAtRankZerosHost) {
  auto r = experiment("workers: {count: 4, resources: {cpu: 1}, join_timeout_s: 60}\nstrategy: spread\n");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(last_json_line(r.out)["errors"], 0) << r.out << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 4u) << r.err;
  std::set<std::string> ranks, masters;
  std::map<std::string, std::set<std::string>> local_by_node;
  std::string master_host;
  for (auto& w : seen) {
    ranks.insert(w["RANK"].get<std::string>());
    masters.insert(w["MASTER_ADDR"].get<std::string>() + ":" + w["MASTER_PORT"].get<std::string>());
    EXPECT_EQ(w["WORLD_SIZE"], "4");
    EXPECT_EQ(w["LOCAL_WORLD_SIZE"], "2") << "two workers on each host";
    local_by_node[w["NODE_RANK"].get<std::string>()].insert(w["LOCAL_RANK"].get<std::string>());
    if (w["RANK"] == "0") master_host = w["MASTER_ADDR"];
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(masters.size(), 1u) << "one rendezvous";
  EXPECT_TRUE(master_host == netns_lab::address(1) || master_host == netns_lab::address(2)) << master_host;
  ASSERT_EQ(local_by_node.size(), 2u) << "node ranks 0 and 1";
  for (auto& [node, locals] : local_by_node) EXPECT_EQ(locals, (std::set<std::string>{"0", "1"})) << node;
  auto s = experiment_store::open(exp);
  ASSERT_TRUE(s);
  auto results = (*s)->results("trial-00001");
  ASSERT_TRUE(results);
  ASSERT_EQ(results->size(), 3u);
  for (auto& row : *results) EXPECT_EQ(row.metrics["rank"], 0) << "rank 0's results are the trial's";
}

TEST_F(GangNetnsTest, StrictSpreadPutsEachWorkerOnAHostOfItsOwnAndAThirdCannotFit) {
  auto r = experiment("workers: {count: 2, resources: {cpu: 1}}\nstrategy: strict_spread\n");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 2u) << r.err;
  EXPECT_NE(seen[0]["NODE_RANK"], seen[1]["NODE_RANK"]);
  for (auto& w : seen) EXPECT_EQ(w["LOCAL_RANK"], "0");
  fs::remove_all(exp);
  auto three = experiment("workers: {count: 3, resources: {cpu: 1}}\nstrategy: strict_spread\n");
  auto s = experiment_store::open(exp);
  ASSERT_TRUE(s);
  auto trials = (*s)->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_NE((*trials)[0].error.find("STRICT_SPREAD needs 3 nodes"), std::string::npos) << (*trials)[0].error;
  EXPECT_EQ(json_lines(rec).size(), 2u) << "a worker of the infeasible gang started";
}

}  // namespace
}  // namespace tune::test
