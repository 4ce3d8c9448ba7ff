// The GPU audit's rules on made-up samples (the real NVML runs on the GPU machine:
// tests/gpu_isolation_test.cpp), and the /proc and NVML loading parts for real.
#include "tune/trial/audit.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

namespace tune {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;

class AuditTest : public ::testing::Test {
 protected:
  std::map<int, process_lineage> procs;
  gpu_audit audit{{"GPU-a", "GPU-b"}, {999}, [this](int pid) -> std::optional<process_lineage> {
                    auto it = procs.find(pid);
                    if (it == procs.end()) return std::nullopt;
                    return it->second;
                  }};

  void SetUp() override {
    // Trial t1: worker 100 in group 99 (its keeper), a child 101 in the group, a
    // grandchild 102 that left the group (setsid), one 103 reparented to init but
    // still in the group.
    procs[100] = {99, {99, 50}, "train"};
    procs[101] = {99, {100, 99, 50}, "helper"};
    procs[102] = {102, {101, 100, 99, 50}, "escaped"};
    procs[103] = {99, {}, "orphan"};
    procs[200] = {199, {199, 50}, "train"};
    procs[300] = {300, {1}, "python3"};
    audit.add({"t1", 100, 99, {{"GPU-a", 4 * GiB}}});
    audit.add({"t2", 200, 199, {{"GPU-a", 4 * GiB}, {"GPU-b", 4 * GiB}}});
  }
  static gpu_card_sample card(int index, std::string uuid, std::vector<gpu_process_sample> p) {
    gpu_card_sample c;
    c.index = index;
    c.uuid = std::move(uuid);
    c.total = 80 * GiB;
    c.processes = std::move(p);
    return c;
  }
};

TEST_F(AuditTest, TrialsOnTheirCardsWithinQuotaAreCountedNotStopped) {
  auto r = audit.check({card(0, "GPU-a", {{100, 1 * GiB}, {101, 1 * GiB}, {200, 3 * GiB}}),
                        card(1, "GPU-b", {{200, 2 * GiB}})});
  EXPECT_TRUE(r.violations.empty());
  EXPECT_EQ(r.trials["t1"].total, 2 * GiB);
  EXPECT_EQ(r.trials["t1"].memory["GPU-a"], 2 * GiB);
  EXPECT_EQ(r.trials["t2"].total, 5 * GiB);
  EXPECT_EQ(r.trials["t2"].memory["GPU-b"], 2 * GiB);
  EXPECT_TRUE(r.foreign.empty());
  // The peak is the most ever seen at once, across its cards.
  r = audit.check({card(0, "GPU-a", {{100, 1 * GiB}})});
  EXPECT_EQ(r.trials["t1"].total, 1 * GiB);
  EXPECT_EQ(r.trials["t1"].peak, 2 * GiB);
  EXPECT_EQ(r.trials["t2"].total, 0);
  EXPECT_EQ(r.trials["t2"].peak, 5 * GiB);
}

TEST_F(AuditTest, AProcessOnACardItWasNotGivenIsFoundThroughItsParentsOrGroup) {
  for (int pid : {100, 101, 102, 103}) {
    gpu_audit a{{"GPU-a", "GPU-b"}, {}, [this](int p) -> std::optional<process_lineage> { return procs.at(p); }};
    a.add({"t1", 100, 99, {{"GPU-a", 4 * GiB}}});
    auto r = a.check({card(1, "GPU-b", {{pid, 1 * GiB}})});
    ASSERT_EQ(r.violations.size(), 1u) << "pid " << pid;
    EXPECT_EQ(r.violations[0].trial, "t1");
    auto& m = r.violations[0].message;
    EXPECT_NE(m.find("process " + std::to_string(pid)), std::string::npos) << m;
    EXPECT_NE(m.find("GPU 1 (GPU-b), a card it was not given (it holds GPU-a)"), std::string::npos) << m;
    EXPECT_TRUE(r.foreign.empty());
  }
}

// Containment (docs/containment.md): a process in the trial's cgroup is the trial's,
// however it was started (its own session, parents gone, reparented to init); and a
// subreaper keeper's orphans (their parent is the keeper, the group's leader) too.
TEST_F(AuditTest, AProcessInTheTrialsCgroupOrBelowItsKeeperIsTheTrials) {
  procs[400] = {400, {1}, "daemon", "/libtune/n.1/t3"};        // setsid, parents gone: only its cgroup says
  procs[401] = {401, {1}, "daemon", "/libtune/n.1/t3/inner"};  // a cgroup the trial made inside its own
  procs[402] = {402, {1}, "other", "/libtune/n.1/t30"};        // a prefix of another trial's is not its
  procs[500] = {500, {98, 50}, "orphan"};                      // reparented to t4's subreaper keeper 98
  audit.add({"t3", 600, 599, {{"GPU-a", 4 * GiB}}, "/libtune/n.1/t3"});
  audit.add({"t4", 601, 98, {{"GPU-a", 4 * GiB}}});
  auto r = audit.check({card(0, "GPU-a", {{400, 1 * GiB}, {401, 1 * GiB}, {402, 1 * GiB}, {500, 2 * GiB}})});
  EXPECT_EQ(r.trials["t3"].total, 2 * GiB);
  EXPECT_EQ(r.trials["t3"].peak, 2 * GiB);  // its recorded peak includes the escaped process
  EXPECT_EQ(r.trials["t4"].total, 2 * GiB);
  ASSERT_EQ(r.foreign.size(), 1u);
  EXPECT_EQ(r.foreign[0].pid, 402);
  // On a card it was not given, the escaped process breaks its trial's rule.
  r = audit.check({card(1, "GPU-b", {{400, 1 * GiB}})});
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].trial, "t3");
}

TEST_F(AuditTest, OverQuotaIsAViolationOnceWithTheNumbers) {
  auto r = audit.check({card(0, "GPU-a", {{100, 3 * GiB}, {101, 2 * GiB}, {200, 4 * GiB}})});
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].trial, "t1");
  EXPECT_NE(r.violations[0].message.find("using 5 GiB on GPU GPU-a, over its quota of 4 GiB"), std::string::npos)
      << r.violations[0].message;
  // Reported once: the node kills it; until it is gone it still counts.
  r = audit.check({card(0, "GPU-a", {{100, 6 * GiB}})});
  EXPECT_TRUE(r.violations.empty());
  EXPECT_EQ(r.trials["t1"].peak, 6 * GiB);
  // Exactly at the quota is within it; memory NVML cannot report breaks no rule.
  r = audit.check({card(0, "GPU-a", {{200, 4 * GiB}}), card(1, "GPU-b", {{200, -1}})});
  EXPECT_TRUE(r.violations.empty());
}

TEST_F(AuditTest, ForeignProcessesOnTheNodesCardsAreListed) {
  gpu_card_sample other = card(2, "GPU-c", {{301, GiB}});  // not this node's card
  auto r = audit.check({card(0, "GPU-a", {{300, 7 * GiB}, {999, GiB}, {4242, 2 * GiB}}), other});
  ASSERT_EQ(r.foreign.size(), 2u);  // 999 is the node itself
  EXPECT_EQ(r.foreign[0].pid, 300);
  EXPECT_EQ(r.foreign[0].name, "python3");
  EXPECT_EQ(r.foreign[0].memory, 7 * GiB);
  EXPECT_EQ(r.foreign[0].card, 0);
  EXPECT_EQ(r.foreign[1].pid, 4242);  // not visible in /proc here: no name
  EXPECT_EQ(r.foreign[1].name, "");
  EXPECT_TRUE(r.violations.empty());
  // What the node itself started (its MPS server) is not foreign either.
  procs[500] = {500, {499, 999}, "nvidia-cuda-mps-server"};
  r = audit.check({card(0, "GPU-a", {{500, GiB}})});
  EXPECT_TRUE(r.foreign.empty());

}

TEST_F(AuditTest, ARemovedTrialsLeftoversAreForeign) {
  audit.remove("t1");
  EXPECT_EQ(audit.size(), 1u);
  auto r = audit.check({card(0, "GPU-a", {{100, GiB}})});
  ASSERT_EQ(r.foreign.size(), 1u);
  EXPECT_EQ(r.foreign[0].pid, 100);
  EXPECT_FALSE(r.trials.count("t1"));
}

TEST(Lineage, ReadsThisProcessFromProc) {
  auto l = read_lineage(::getpid());
  ASSERT_TRUE(l);
  EXPECT_EQ(l->pgid, ::getpgid(0));
  ASSERT_FALSE(l->ancestors.empty());
  EXPECT_EQ(l->ancestors[0], ::getppid());
  EXPECT_FALSE(l->name.empty());
  EXPECT_FALSE(read_lineage(0));
  EXPECT_FALSE(read_lineage(1 << 30));
}

TEST(Nvml, AMissingLibraryIsAClearError) {
  auto n = nvml::load("libnvidia-ml-missing.so.1");
  ASSERT_FALSE(n);
  EXPECT_NE(n.error().message().find("cannot load libnvidia-ml-missing.so.1"), std::string::npos) << n.error().message();
}

TEST(Nvml, SamplesTheCardsWhereThereIsADriver) {
  auto n = nvml::load();
  if (!n) GTEST_SKIP() << n.error().message();
  auto cards = (*n)->sample();
  ASSERT_TRUE(cards) << cards.error().message();
  for (auto& c : *cards) {
    EXPECT_EQ(c.uuid.rfind("GPU-", 0), 0u) << c.uuid;
    EXPECT_GT(c.total, 0);
    EXPECT_FALSE(c.pci_bus_id.empty());
  }
}

}  // namespace
}  // namespace tune
