// Trials on real GPUs (the GPU machine; skipped where there is no card or no NVML): a
// trial sees only its card; the node's GPU audit kills a trial over its memory quota
// while its neighbour on the card runs on, kills a trial found on a card it was not
// given, records each trial's peak GPU memory, shows other people's processes in
// `tune status`; a stopped trial leaves nothing on the card.
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "trial_cluster.hpp"
#include "tune/host/detect.hpp"
#include "tune/host/nvml.hpp"
#include "tune/trial/process.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;

std::string train_worker() { return built_or_moved("TRAIN_WORKER", TRAIN_WORKER); }

std::string gpu_worker() { return built_or_moved("GPU_WORKER", GPU_WORKER); }

class GpuIsolationTest : public trial_cluster_test {
 protected:
  std::shared_ptr<nvml> lib;
  bool mps = std::getenv("TUNE_TEST_MPS") && std::string{std::getenv("TUNE_TEST_MPS")} == "1";

  void SetUp() override {
    auto probe = detect_gpus();
    if (probe.gpus.empty()) GTEST_SKIP() << "no GPU here: " << probe.note;
    auto l = nvml::load();
    if (!l) GTEST_SKIP() << l.error().message();
    lib = *l;
    // The harness hides every card from what it starts; this node gets the machine's.
    // TUNE_TEST_MPS=1: the same tests with the node's trials under CUDA MPS.
    std::vector<std::string> args{"--gpu-audit-ms", "100"};
    if (mps) args.push_back("--mps");
    start_cluster(args, gpu_worker(), {"env", "-u", "CUDA_VISIBLE_DEVICES"});
  }
  void TearDown() override {
    if (client) trial_cluster_test::TearDown();
  }

  bool on_any_card(int pid) {
    auto cards = lib->sample();
    if (!cards) return true;
    for (auto& c : *cards)
      for (auto& p : c.processes)
        if (p.pid == pid) return true;
    return false;
  }
};

TEST_F(GpuIsolationTest, ATrialSeesOnlyItsCardAndCannotOpenAnother) {
  auto g = group({*resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("probe", g, {{"mode", "probe"}}));
  nlohmann::json metrics;
  std::string tail;
  events_until([&](const trial_event& e) {
    if (e.kind == "result") metrics = body(e)["metrics"];
    if (e.kind == "ended") tail = body(e)["stderr_tail"];
    return e.kind == "ended";
  });
  ASSERT_TRUE(metrics.is_object()) << tail;
  EXPECT_EQ(metrics["devices"], 1) << tail;
  EXPECT_EQ(metrics["uuid_matches"], 1) << "device 0 of the trial is not the card of its bundle: " << tail;
  EXPECT_EQ(metrics["set_device_1_ok"], 0) << "the trial could open a second card: " << tail;
  EXPECT_EQ(metrics["set_device_0_ok"], 1) << tail;
  EXPECT_EQ(metrics["malloc_ok"], 1) << tail;
}

TEST_F(GpuIsolationTest, OverQuotaIsKilledAndItsNeighbourOnTheCardRunsOn) {
  auto g = group({*resource_set::make({{"gpu", 0.25}}), *resource_set::make({{"gpu", 0.25}})});
  auto a = start("calm", g, {{"mode", "hold"}, {"mib", 1024}}, 0);
  ASSERT_TRUE(a) << a.error().message();
  int64_t quota = (*a)["gpus"][0]["memory_quota"];
  ASSERT_GT(quota, int64_t{2} << 30);
  int calm_results = 0;
  caf::actor calm;
  events_until([&](const trial_event& e) {
    if (e.trial_id == "calm") calm = e.trial;
    return e.trial_id == "calm" && e.kind == "result" && ++calm_results >= 3;
  });
  ASSERT_GE(calm_results, 3);
  auto b = start("greedy", g, {{"mode", "hold"}, {"mib", (quota >> 20) + 2048}}, 1);
  ASSERT_TRUE(b) << b.error().message();
  EXPECT_EQ((*b)["gpus"][0]["uuid"], (*a)["gpus"][0]["uuid"]) << "the two bundles are not on one card";
  nlohmann::json greedy_end;
  int calm_after = 0;
  int64_t calm_memory = 0;
  events_until([&](const trial_event& e) {
    if (e.trial_id == "greedy" && e.kind == "ended") greedy_end = body(e);
    if (e.trial_id == "calm" && e.kind == "result" && greedy_end.is_object()) {
      ++calm_after;
      calm_memory = body(e)["gpu_memory"];
    }
    return calm_after >= 5;
  });
  ASSERT_TRUE(greedy_end.is_object()) << "the trial over its quota was not stopped";
  EXPECT_FALSE(greedy_end["ok"]);
  if (mps) {  // the driver refuses the allocation past the quota: the worker says so and exits
    EXPECT_NE(greedy_end["stderr_tail"].get<std::string>().find("cannot allocate"), std::string::npos) << greedy_end.dump();
    EXPECT_LE(greedy_end["gpu_memory_peak"].get<int64_t>(), quota + (int64_t{1} << 30));
  } else {
    EXPECT_NE(greedy_end["error"].get<std::string>().find("over its quota"), std::string::npos) << greedy_end.dump();
    EXPECT_GT(greedy_end["gpu_memory_peak"].get<int64_t>(), quota);
  }
  EXPECT_GE(calm_after, 5) << "the neighbour stopped reporting";
  EXPECT_GE(calm_memory, int64_t{1} << 30) << "the audit did not measure the neighbour";
  client->stop_trial(calm, 5s);
  nlohmann::json calm_end;
  events_until([&](const trial_event& e) {
    if (e.trial_id == "calm" && e.kind == "ended") calm_end = body(e);
    return calm_end.is_object();
  });
  ASSERT_TRUE(calm_end.is_object());
  EXPECT_TRUE(calm_end["ok"]) << calm_end.dump();
  EXPECT_TRUE(calm_end["gpu_audited"]);
  EXPECT_GE(calm_end["gpu_memory_peak"].get<int64_t>(), int64_t{1} << 30);
  EXPECT_LT(calm_end["gpu_memory_peak"].get<int64_t>(), quota);
}

TEST_F(GpuIsolationTest, ATrialFoundOnACardItWasNotGivenIsKilled) {
  // No card at all: its child unsets CUDA_VISIBLE_DEVICES and opens card 0 anyway.
  auto g = group({*resource_set::make({{"cpu", 1}})});
  ASSERT_TRUE(start("sneaky", g, {{"mode", "escape"}, {"card", 0}}));
  nlohmann::json end;
  int child = 0;
  events_until([&](const trial_event& e) {
    if (e.kind == "result") child = static_cast<int>(body(e)["metrics"]["child"].get<double>());
    if (e.kind == "ended") end = body(e);
    return end.is_object();
  });
  ASSERT_TRUE(end.is_object()) << "the trial was not stopped";
  EXPECT_FALSE(end["ok"]);
  EXPECT_NE(end["error"].get<std::string>().find("a card it was not given"), std::string::npos) << end.dump();
  ASSERT_GT(child, 0);
  EXPECT_TRUE(wait_until([&] { return process_gone(child) && !on_any_card(child); }, 5s));
}

TEST_F(GpuIsolationTest, AStoppedTrialLeavesNothingOnTheCard) {
  auto g = group({*resource_set::make({{"gpu", 0.5}})});
  auto s = start("tidy", g, {{"mode", "hold"}, {"mib", 2048}});
  ASSERT_TRUE(s) << s.error().message();
  int pid = (*s)["pid"];
  caf::actor tidy;
  events_until([&](const trial_event& e) {
    tidy = e.trial;
    return e.kind == "result";
  });
  EXPECT_TRUE(on_any_card(pid));
  client->stop_trial(tidy, 5s);
  nlohmann::json end;
  events_until([&](const trial_event& e) {
    if (e.kind == "ended") end = body(e);
    return end.is_object();
  });
  ASSERT_TRUE(end.is_object());
  EXPECT_TRUE(end["ok"]) << end.dump();
  EXPECT_GE(end["gpu_memory_peak"].get<int64_t>(), int64_t{2} << 30);
  EXPECT_TRUE(wait_until([&] { return !on_any_card(pid); }, 3s)) << "the stopped trial's memory is still on the card";
}

TEST_F(GpuIsolationTest, ATrialWithTwoCardsSeesTwoAndTrainsDataParallel) {
  if (detect_gpus().gpus.size() < 2) GTEST_SKIP() << "needs two cards";
  auto g = group({*resource_set::make({{"gpu", 2}})});
  ASSERT_TRUE(start("probe2", g, {{"mode", "probe"}}));
  nlohmann::json metrics;
  events_until([&](const trial_event& e) {
    if (e.kind == "result") metrics = body(e)["metrics"];
    return e.kind == "ended";
  });
  ASSERT_TRUE(metrics.is_object());
  EXPECT_EQ(metrics["devices"], 2);
  EXPECT_EQ(metrics["uuid_matches"], 1);
  EXPECT_EQ(metrics["set_device_1_ok"], 1);
  auto train = client->serve_program(train_worker());
  ASSERT_TRUE(train) << train.error().message();
  auto r = client->start_trial({"dp", g, 0, *train, {}, R"({"model": "mlp", "epochs": 2})"});
  ASSERT_TRUE(r) << r.error().message();
  nlohmann::json last, end;
  events_until([&](const trial_event& e) {
    if (e.trial_id == "dp" && e.kind == "result") last = body(e);
    if (e.trial_id == "dp" && e.kind == "ended") end = body(e);
    return end.is_object();
  }, 120s);
  ASSERT_TRUE(end.is_object());
  EXPECT_TRUE(end["ok"]) << end.dump();
  ASSERT_TRUE(last.is_object()) << end.dump();
  EXPECT_EQ(last["metrics"]["devices"], 2) << last.dump();
  EXPECT_GT(last["metrics"]["val_acc"].get<double>(), 0.8) << last.dump();
  EXPECT_GT(end["gpu_memory_peak"].get<int64_t>(), 0);
}

TEST_F(GpuIsolationTest, SomeoneElsesProcessShowsInStatus) {
  std::map<std::string, std::string> env{{"PATH", "/usr/bin:/bin"}};
  if (const char* l = std::getenv("LD_LIBRARY_PATH")) env["LD_LIBRARY_PATH"] = l;
  auto other = worker_process::start({{gpu_worker(), "--foreign", "512"}, env, ""});
  ASSERT_TRUE(other) << other.error().message();
  std::vector<std::string> lines;
  ASSERT_TRUE(wait_until([&] { (*other)->poll(50ms, lines); return (*other)->stdout_tail().find("ready") != std::string::npos; }, 20s))
      << (*other)->stderr_tail();
  int pid = (*other)->pid();
  bool seen = false;
  std::string text;
  wait_until([&] {
    auto r = files.tune({"status", "--address", "127.0.0.1:" + std::to_string(port), "--json"});
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded()) return false;
    for (auto& n : j["nodes"])
      for (auto& c : n.value("gpu_audit", nlohmann::json::array()))
        for (auto& f : c["foreign"]) seen |= f["pid"] == pid;
    return seen;
  }, 10s);
  EXPECT_TRUE(seen) << "pid " << pid << " is not in the status";
  auto t = files.tune({"status", "--address", "127.0.0.1:" + std::to_string(port)});
  EXPECT_NE(t.out.find("not this cluster's: pid " + std::to_string(pid)), std::string::npos) << t.out;
  (*other)->kill();
}

}  // namespace
}  // namespace tune::test
