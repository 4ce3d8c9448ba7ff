// Trials as worker processes, for real: a head and a node process with logical GPUs,
// and this test as the client that reserves bundles, ships the trainable
// (tests/trial_worker.cpp) and starts, stops, kills and watches trials.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "trial_cluster.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;

std::string worker_binary() { return built_or_moved("TRIAL_WORKER", TRIAL_WORKER); }

std::string train_worker_binary() { return built_or_moved("TRAIN_WORKER", TRAIN_WORKER); }

class TrialTest : public trial_cluster_test {
 protected:
  void SetUp() override {
    // The node's own environment has a variable no trial may see.
    start_cluster({"--num-gpus", "4"}, worker_binary(), {}, {{"TUNE_CANARY", "leaked"}});
  }
};

TEST_F(TrialTest, AWorkerSeesExactlyItsCardsAndNothingElse) {
  auto g = group({*resource_set::make({{"gpu", 2}})});
  auto where = client->get_group(g);
  ASSERT_TRUE(where);
  auto& cards = where->bundles[0].gpus;
  ASSERT_EQ(cards.size(), 2u);
  auto started = start("t-env", g, {{"mode", "report"}, {"count", 3}, {"junk", 1}});
  ASSERT_TRUE(started) << started.error().message();
  EXPECT_GT((*started)["pid"].get<int>(), 0);
  EXPECT_EQ((*started)["node"], node_id);
  auto events = until_ended("t-env");
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().kind, "started");
  int results = 0;
  nlohmann::json seen;
  for (auto& e : events) {
    if (e.kind == "result") ++results;
    if (e.kind == "done")  // the worker's real summary; a junk "done" line carries none
      if (auto m = nlohmann::json::parse(body(e)["message"].get<std::string>(), nullptr, false); m.is_object()) seen = m;
  }
  // Three results, and the one junk line that is still a usable result (its iteration
  // is not a number); the other junk lines are ignored, and the node lives on.
  EXPECT_EQ(results, 4);
  std::string all_events;
  for (auto& e : events) all_events += e.kind + " " + e.json + "\n";
  ASSERT_TRUE(seen.is_object()) << all_events;
  EXPECT_EQ(seen["CUDA_VISIBLE_DEVICES"], cards[0].uuid + "," + cards[1].uuid) << seen.dump();
  EXPECT_EQ(seen["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
  EXPECT_EQ(seen["TUNE_TRIAL_ID"], "t-env");
  EXPECT_TRUE(seen["TUNE_CANARY"].is_null()) << "the node's environment leaked into the trial";
  ASSERT_EQ(seen["gpus"].size(), 2u);
  EXPECT_EQ(seen["gpus"][0]["local"], 0);
  EXPECT_EQ(seen["gpus"][1]["local"], 1);
  EXPECT_EQ(seen["gpus"][1]["uuid"], cards[1].uuid);
  EXPECT_EQ(seen["gpus"][0]["quota"], int64_t{16} << 30);
  EXPECT_NE(seen["cwd"].get<std::string>().find("/trials/t-env"), std::string::npos);
  auto end = body(events.back());
  EXPECT_EQ(events.back().kind, "ended");
  EXPECT_TRUE(end["ok"]) << end.dump();
  EXPECT_EQ(end["results"], 4);
}

// Results that are all numbers travel as columns, the rest as JSON: the client sees
// every one, in the order written, with the values and iterations the worker wrote.
TEST_F(TrialTest, ResultsOfEveryShapeArriveInOrderAndIntact) {
  auto g = group({*resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-mixed", g, {{"mode", "mixed"}}));
  auto events = until_ended("t-mixed");
  std::vector<nlohmann::json> results;
  for (auto& e : events)
    if (e.kind == "result") results.push_back(body(e));
  ASSERT_EQ(results.size(), 7u);
  auto expect = [&](size_t i, int64_t iteration, const nlohmann::json& metrics) {
    EXPECT_EQ(results[i]["iteration"], iteration) << results[i].dump();
    EXPECT_EQ(results[i]["metrics"], metrics) << results[i].dump();
  };
  expect(0, 1, {{"a", 1.5}, {"b", 2.0}});
  expect(1, 2, {{"a", 2.5}, {"b", 3.0}});                 // names in another order
  expect(2, 3, {{"a", 3.5}, {"note", "text"}});           // a metric that is not a number
  expect(3, 4, {{"a", 4.5}});                             // no iteration: the count so far
  expect(4, 6, {{"a", 7.5}});                             // a repeated name: the last one
  expect(5, 7, {{"a", 7}});                               // a key the fast path does not know
  expect(6, 8, {{"a", -0.0}, {"b", 1e-300}});
  EXPECT_TRUE(std::signbit(results[6]["metrics"]["a"].get<double>()));
  auto end = body(events.back());
  EXPECT_TRUE(end["ok"]) << end.dump();
  EXPECT_EQ(end["results"], 7);
}

TEST_F(TrialTest, CheckpointsAreRelayedWithTheirSizeAndOnlyFromTheTrialsFolder) {
  auto g = group({*resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-ckpt", g, {{"mode", "checkpoint"}}));
  auto events = until_ended("t-ckpt");
  std::vector<nlohmann::json> ckpts;
  std::string done;
  for (auto& e : events) {
    if (e.kind == "checkpoint") ckpts.push_back(body(e));
    if (e.kind == "done") done = body(e)["message"];
  }
  ASSERT_EQ(ckpts.size(), 2u) << "the one outside its folder must be ignored";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ckpts[static_cast<size_t>(i)]["iteration"], i + 1);
    EXPECT_EQ(ckpts[static_cast<size_t>(i)]["files"], 2);
    EXPECT_EQ(ckpts[static_cast<size_t>(i)]["bytes"], 1000 * (i + 1) + 2);
    auto path = ckpts[static_cast<size_t>(i)]["path"].get<std::string>();
    EXPECT_NE(path.find("/trials/t-ckpt/checkpoints/" + std::to_string(i + 1)), std::string::npos) << path;
    EXPECT_TRUE(std::filesystem::exists(path + "/model.bin"));
  }
  EXPECT_EQ(done, "refused") << "reporting a checkpoint that was never written must fail in the trial";
  auto end = body(events.back());
  EXPECT_TRUE(end["ok"]) << end.dump();
  EXPECT_EQ(end["checkpoint"]["iteration"], 2) << end.dump();
}

TEST_F(TrialTest, ATrialStartsFromACheckpointOfThisNodeAndNothingElse) {
  auto g = group({*resource_set::make({{"gpu", 0.5}}), *resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-first", g, {{"mode", "checkpoint"}}));
  std::string path;
  for (auto& e : until_ended("t-first"))
    if (e.kind == "checkpoint") path = body(e)["path"];
  ASSERT_FALSE(path.empty());
  auto r = client->start_trial({"t-second", g, 1, program, {}, R"({"mode": "restore"})", path});
  ASSERT_TRUE(r) << r.error().message();
  nlohmann::json metrics;
  for (auto& e : until_ended("t-second"))
    if (e.kind == "result") metrics = body(e)["metrics"];
  EXPECT_EQ(metrics["restored_bytes"], 2000) << "the second checkpoint's model.bin";
  // Not a checkpoint, or not on this node: refused before anything runs.
  for (std::string bad : {std::string{"/etc"}, path + "/../../..", files.dir(), path + "-missing"}) {
    auto no = client->start_trial({"t-bad", g, 1, program, {}, R"({"mode": "restore"})", bad});
    ASSERT_FALSE(no) << bad;
    EXPECT_NE(no.error().message().find("is not a trial's checkpoint on this node"), std::string::npos)
        << no.error().message();
  }
}

// A checkpoint that is not on the trial's node comes as a copy the client serves: the
// node fetches its files by SHA-256 into the trial's folder and checks them.
TEST_F(TrialTest, ATrialStartsFromACheckpointCopyTheClientServes) {
  auto g = group({*resource_set::make({{"gpu", 0.5}}), *resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-origin", g, {{"mode", "checkpoint"}}));
  std::string path;
  for (auto& e : until_ended("t-origin"))
    if (e.kind == "checkpoint") path = body(e)["path"];
  ASSERT_FALSE(path.empty());
  // The copy: its two files, elsewhere (as if kept in an experiment folder).
  auto copy = files.dir() + "/copy/2";
  std::filesystem::create_directories(copy + "/sub");
  std::filesystem::copy_file(path + "/model.bin", copy + "/model.bin");
  std::ofstream(copy + "/sub/extra.txt") << "ok";
  nlohmann::json manifest{{"iteration", 2}, {"files", nlohmann::json::array()}};
  for (std::string name : {"model.bin", "sub/extra.txt"}) {
    auto served = client->serve_program(copy + "/" + name);
    ASSERT_TRUE(served) << served.error().message();
    manifest["files"].push_back({{"name", name}, {"size", served->size}, {"sha256", served->sha256}});
  }
  // A folder of another node (here: none of this node's) with the copy: the copy is used.
  trial_request req{"t-copy", g, 1, program, {}, R"({"mode": "restore"})", "/nonexistent/checkpoints/2", manifest.dump()};
  auto r = client->start_trial(req);
  ASSERT_TRUE(r) << r.error().message();
  auto info = nlohmann::json::parse(*r);
  nlohmann::json metrics;
  for (auto& e : until_ended("t-copy"))
    if (e.kind == "result") metrics = body(e)["metrics"];
  EXPECT_EQ(metrics["restored_bytes"], 2000) << "the copy's model.bin";
  auto fetched = info["trial_dir"].get<std::string>() + "/restore/2";
  EXPECT_TRUE(std::filesystem::exists(fetched + "/sub/extra.txt")) << fetched;
  // A wrong hash, a name out of the folder: refused, saying why.
  auto bad = manifest;
  bad["files"][0]["sha256"] = std::string(64, 'a');
  req.trial_id = "t-badsha";
  req.restore_files = bad.dump();
  auto no = client->start_trial(req);
  ASSERT_FALSE(no);
  EXPECT_NE(no.error().message().find("cannot fetch checkpoint file model.bin"), std::string::npos) << no.error().message();
  bad = manifest;
  bad["files"][0]["name"] = "../../escape";
  req.trial_id = "t-escape";
  req.restore_files = bad.dump();
  no = client->start_trial(req);
  ASSERT_FALSE(no);
  EXPECT_NE(no.error().message().find("outside it"), std::string::npos) << no.error().message();
}

// CPU time (ms) a process has used, from /proc.
double cpu_ms(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST_F(TrialTest, AWorkerThatClosesItsChannelsCostsTheNodeNothing) {
  auto g = group({*resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-silent", g, {{"mode", "silent"}}));
  events_until([&](const trial_event& e) { return e.kind == "result"; }, 5s);
  std::this_thread::sleep_for(200ms);
  double before = cpu_ms(node_pid);
  std::this_thread::sleep_for(1s);
  EXPECT_LT(cpu_ms(node_pid) - before, 200.0) << "ms of the node's CPU in one second of a silent trial";
  auto events = until_ended("t-silent", 10s);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, "ended");
  EXPECT_TRUE(body(events.back())["ok"]) << events.back().json;
}

TEST_F(TrialTest, StopIsGracefulAndAWorkerIgnoringItIsKilledAfterTheGrace) {
  auto g = group({*resource_set::make({{"gpu", 0.5}}), *resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-polite", g, {{"mode", "until-stop"}}, 0));
  bool asked = false;
  nlohmann::json last_result;
  auto events = until_ended("t-polite", 10s, [&](const trial_event& e) {
    if (e.kind == "result") last_result = body(e);
    if (e.kind == "result" && !asked && body(e)["iteration"] >= 3) {
      client->stop_trial(e.trial, 5000ms);
      asked = true;
    }
  });
  ASSERT_EQ(events.back().kind, "ended");
  auto end = body(events.back());
  EXPECT_TRUE(end["ok"]) << end.dump();
  EXPECT_TRUE(end["stopped"]);
  EXPECT_EQ(last_result["metrics"]["stopped"], 1) << "it finished its step and reported";

  ASSERT_TRUE(start("t-stubborn", g, {{"mode", "ignore-stop"}}, 1));
  std::chrono::steady_clock::time_point asked_at;
  events = until_ended("t-stubborn", 10s, [&](const trial_event& e) {
    if (e.kind == "result") {
      client->stop_trial(e.trial, 300ms);
      asked_at = std::chrono::steady_clock::now();
    }
  });
  ASSERT_EQ(events.back().kind, "ended");
  auto took = std::chrono::steady_clock::now() - asked_at;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
  EXPECT_NE(body(events.back())["exit"].get<std::string>().find("signal 9"), std::string::npos) << events.back().json;
  EXPECT_EQ(body(events.back())["error"], "did not stop within the grace period: killed");
}

TEST_F(TrialTest, KilledTrialsLeaveNoProcessBehind) {
  auto g = group({*resource_set::make({{"gpu", 1}})});
  auto started = start("t-parent", g, {{"mode", "spawn-child"}});
  ASSERT_TRUE(started) << started.error().message();
  int worker = (*started)["pid"];
  int child = 0;
  auto events = until_ended("t-parent", 10s, [&](const trial_event& e) {
    if (e.kind == "result") {
      child = static_cast<int>(body(e)["metrics"]["child"].get<double>());
      client->kill_trial(e.trial);
    }
  });
  ASSERT_EQ(events.back().kind, "ended");
  EXPECT_EQ(body(events.back())["error"], "killed on request");
  ASSERT_GT(child, 0);
  EXPECT_TRUE(wait_until([&] { return process_gone(worker) && process_gone(child); }, 3s)) << "worker or its child outlived the kill";
}

TEST_F(TrialTest, ANodeThatDiesTakesItsTrialsWithIt) {
  auto g = group({*resource_set::make({{"gpu", 1}})});
  auto started = start("t-orphan", g, {{"mode", "spawn-child"}});
  ASSERT_TRUE(started) << started.error().message();
  int worker = (*started)["pid"];
  int child = 0;
  for (int i = 0; i < 50 && !child; ++i)
    if (auto e = client->next_trial_event(100ms); e && e->kind == "result")
      child = static_cast<int>(body(*e)["metrics"]["child"].get<double>());
  ASSERT_GT(child, 0);
  ASSERT_EQ(::kill(node_pid, SIGKILL), 0);
  EXPECT_TRUE(wait_until([&] { return process_gone(worker); }, 3s)) << "the worker outlived its node";
  EXPECT_TRUE(wait_until([&] { return process_gone(child); }, 3s)) << "the worker's child outlived its node";
  if (!process_gone(child)) ::kill(child, SIGKILL);
}

// A start on its way to a node that stops answering fails when the head declares the
// node dead (a few seconds), not when the request times out (minutes).
TEST_F(TrialTest, AStartToANodeThatDiesFailsWhenItIsDeclaredDead) {
  auto g = group({*resource_set::make({{"gpu", 1}})});
  ASSERT_GT(node_pid, 0);  // kill(0, SIGSTOP) would stop this test's own process group
  ASSERT_EQ(::kill(node_pid, SIGSTOP), 0);
  auto t0 = std::chrono::steady_clock::now();
  auto started = start("t-frozen", g, {{"mode", "report"}});
  auto took = std::chrono::steady_clock::now() - t0;
  ::kill(node_pid, SIGKILL);  // a node declared dead does not come back here (its return is the resilience work's)
  ::kill(node_pid, SIGCONT);
  ASSERT_FALSE(started);
  EXPECT_NE(started.error().message().find("died before trial t-frozen started"), std::string::npos)
      << started.error().message();
  EXPECT_LT(took, 10s);
}

TEST_F(TrialTest, StoppingTheNodeEndsItsTrials) {
  auto g = group({*resource_set::make({{"gpu", 1}})});
  auto started = start("t-busy", g, {{"mode", "ignore-stop"}});
  ASSERT_TRUE(started) << started.error().message();
  int worker = (*started)["pid"];
  auto r = files.tune({"stop", "--grace", "5"});
  EXPECT_EQ(r.out.find("killed"), std::string::npos) << "the node did not stop cleanly: " << r.out;
  EXPECT_TRUE(wait_until([&] { return process_gone(worker); }, 3s));
}

TEST_F(TrialTest, ACrashIsAnErrorWithItsStderr) {
  auto g = group({*resource_set::make({{"gpu", 0.25}})});
  ASSERT_TRUE(start("t-crash", g, {{"mode", "crash"}}));
  auto events = until_ended("t-crash");
  ASSERT_EQ(events.back().kind, "ended");
  auto end = body(events.back());
  EXPECT_FALSE(end["ok"]);
  EXPECT_NE(end["error"].get<std::string>().find("signal 6"), std::string::npos) << end.dump();
  EXPECT_NE(end["stderr_tail"].get<std::string>().find("broke on purpose"), std::string::npos) << end.dump();
}

TEST_F(TrialTest, BadStartsSayWhy) {
  auto g = group({*resource_set::make({{"gpu", 1}})});
  auto r = start("t1", "no-such-group", {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("no placement group no-such-group"), std::string::npos) << r.error().message();
  r = start("t1", g, {}, 5);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("has 1 bundles"), std::string::npos) << r.error().message();
  r = start("../escape", g, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("bad trial id"), std::string::npos) << r.error().message();
  ASSERT_TRUE(start("t-twice", g, {{"mode", "ignore-stop"}}));
  r = start("t-twice", g, {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("already runs here"), std::string::npos) << r.error().message();
  auto bad = client->start_trial({"t-nohash", g, 0, program_ref{"x", "not-a-hash", 1}, {}, "{}"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("SHA-256"), std::string::npos) << bad.error().message();
}

TEST_F(TrialTest, TheProgramIsFetchedOnceAndCachedByItsHash) {
  auto g = group({*resource_set::make({{"gpu", 0.5}}), *resource_set::make({{"gpu", 0.5}})});
  ASSERT_TRUE(start("t-a", g, {{"count", 1}}, 0));
  until_ended("t-a");
  auto second = start("t-b", g, {{"count", 1}}, 1);
  ASSERT_TRUE(second) << second.error().message();
  until_ended("t-b");
  auto cached = files.dir() + "/" + node_id + "/programs/" + program.sha256;
  EXPECT_TRUE(std::filesystem::exists(cached));
  std::ifstream log(files.dir() + "/" + node_id + ".log");
  std::string all((std::istreambuf_iterator<char>(log)), {});
  size_t fetched = 0;
  for (size_t p = all.find("fetched"); p != std::string::npos; p = all.find("fetched", p + 1)) ++fetched;
  EXPECT_EQ(fetched, 1u) << all;
}

// libtune's own workload as a trial: Fashion-MNIST on the CPU here (the node's GPUs
// are logical), one result per epoch, stopped within a step when asked.
TEST_F(TrialTest, TheTrainingWorkloadRunsAsATrial) {
  auto trainer = client->serve_program(train_worker_binary());
  ASSERT_TRUE(trainer) << trainer.error().message();
  auto g = group({*resource_set::make({{"gpu", 0.5}}), *resource_set::make({{"gpu", 0.5}})});
  auto r = client->start_trial({"t-mlp", g, 0, *trainer, {}, R"({"model": "mlp", "epochs": 1, "width": 256})"});
  ASSERT_TRUE(r) << r.error().message();
  nlohmann::json done;
  int results = 0;
  auto events = until_ended("t-mlp", 120s, [&](const trial_event& e) {
    if (e.kind == "result") {
      ++results;
      EXPECT_GT(body(e)["metrics"]["val_acc"].get<double>(), 0.8) << e.json;
    }
    if (e.kind == "done") done = nlohmann::json::parse(body(e)["message"].get<std::string>());
  });
  ASSERT_EQ(events.back().kind, "ended");
  EXPECT_TRUE(body(events.back())["ok"]) << events.back().json;
  EXPECT_EQ(results, 1);
  EXPECT_EQ(done["device"], "cpu");
  EXPECT_GT(done["test_acc"].get<double>(), 0.8) << done.dump();

  // A long run, stopped after its first epoch: it ends cleanly, without a test score.
  r = client->start_trial({"t-long", g, 1, *trainer, {}, R"({"model": "mlp", "epochs": 50, "width": 128})"});
  ASSERT_TRUE(r) << r.error().message();
  std::chrono::steady_clock::time_point asked;
  events = until_ended("t-long", 120s, [&](const trial_event& e) {
    if (e.kind == "result" && asked == std::chrono::steady_clock::time_point{}) {
      client->stop_trial(e.trial, 10000ms);
      asked = std::chrono::steady_clock::now();
    }
    if (e.kind == "done") done = nlohmann::json::parse(body(e)["message"].get<std::string>());
  });
  ASSERT_EQ(events.back().kind, "ended");
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s) << "stopping took longer than a step or two";
  EXPECT_TRUE(body(events.back())["ok"]) << events.back().json;
  EXPECT_TRUE(done["stopped"]) << done.dump();
  EXPECT_FALSE(done.contains("test_acc"));

  // A value of the wrong type is an error naming the key, not the default.
  r = client->start_trial({"t-typo", g, 1, *trainer, {}, R"({"model": "mlp", "lr": "0.1"})"});
  ASSERT_TRUE(r) << r.error().message();
  events = until_ended("t-typo", 30s);
  ASSERT_EQ(events.back().kind, "ended");
  auto end = body(events.back());
  EXPECT_FALSE(end["ok"]);
  EXPECT_EQ(end["exit"], "exit code 2");
  EXPECT_NE(end["stderr_tail"].get<std::string>().find("\"lr\" is not a number"), std::string::npos) << end.dump();
}

}  // namespace
}  // namespace tune::test
