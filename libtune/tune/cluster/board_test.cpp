#include "board.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

nlohmann::json first_report() {
  return nlohmann::json::parse(R"({
    "id": "e1", "full": true, "name": "mnist", "metric": "acc", "mode": "max", "dir": "/tmp/x",
    "state": "running", "results": 3,
    "trials": [
      {"id": "t1", "state": "running", "iteration": 2, "value": 0.5, "config": {"lr": 0.1}, "node": "n1",
       "group": "pg-1", "pid": 42, "gpus": ["GPU-a"], "bogus": 1},
      {"id": "t2", "state": "pending", "config": {"lr": 0.01}}
    ],
    "points": {"t1": [[1, 0.4], [2, 0.5]]},
    "last": {"t1": {"acc": 0.5, "loss": 1.2}}
  })");
}

TEST(BoundedSeries, HalvesTheOlderPointsAndKeepsTheNewest) {
  bounded_series s{8};
  for (int i = 1; i <= 9; ++i) s.add(i, i * 1.0);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s.points().front().first, 1);
  EXPECT_EQ(s.points().back().first, 9);
  for (int i = 10; i <= 1000; ++i) s.add(i, i * 1.0);
  EXPECT_LE(s.size(), 8u);
  EXPECT_EQ(s.points().back().first, 1000);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_LT(s.points()[i - 1].first, s.points()[i].first);
}

TEST(BoundedSeries, AnIterationAgainReplacesTheCurveFromThere) {
  bounded_series s{16};
  for (int i = 1; i <= 6; ++i) s.add(i, i * 1.0);
  s.add(4, 40);  // restarted from the checkpoint of iteration 3
  s.add(5, 50);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s.points()[3], (std::pair<int64_t, double>{4, 40}));
  EXPECT_EQ(s.points().back(), (std::pair<int64_t, double>{5, 50}));
  s.add(5, 55);  // the same iteration twice: the later one
  EXPECT_EQ(s.size(), 5u);
  EXPECT_EQ(s.points().back().second, 55);
}

TEST(ExperimentBoard, FullReportThenDeltas) {
  experiment_board b;
  ASSERT_TRUE(b.apply(first_report(), 100));
  auto e = b.experiment_json("e1", true);
  ASSERT_FALSE(e.is_null());
  EXPECT_EQ(e["name"], "mnist");
  EXPECT_EQ(e["trials"], 2);
  EXPECT_EQ(e["trials_by_state"]["running"], 1);
  EXPECT_EQ(e["best"]["trial"], "t1");
  EXPECT_DOUBLE_EQ(e["best"]["value"].get<double>(), 0.5);
  auto& rows = e["trial_table"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["id"], "t1");
  EXPECT_FALSE(rows[0].contains("bogus"));  // unknown fields are not kept
  EXPECT_EQ(rows[0]["curve"].size(), 2u);

  // A delta: t2 starts, t1 reports one more point and ends.
  auto delta = nlohmann::json::parse(R"({"id": "e1", "results": 5,
    "trials": [{"id": "t2", "state": "running", "group": "pg-2"}, {"id": "t1", "state": "terminated"}],
    "points": {"t1": [[3, 0.7]], "t2": [[1, 0.2]]}})");
  ASSERT_TRUE(b.apply(delta, 101));
  auto t1 = b.trial_json("e1", "t1");
  EXPECT_EQ(t1["state"], "terminated");
  EXPECT_EQ(t1["pid"], 42);
  EXPECT_EQ(t1["config"]["lr"], 0.1);
  EXPECT_EQ(t1["curve"].size(), 3u);
  EXPECT_EQ(t1["last_result"]["loss"], 1.2);
  EXPECT_EQ(t1["metric"], "acc");
  EXPECT_EQ(b.results_total(), 5);
  auto h = b.holders();
  ASSERT_EQ(h.size(), 1u);  // only running trials hold their groups
  EXPECT_EQ(h["pg-2"].second, "t2");
  EXPECT_TRUE(b.trial_json("e1", "nope").is_null());
  EXPECT_TRUE(b.experiment_json("nope", false).is_null());
}

TEST(ExperimentBoard, AnEndedTrialKeepsWhatItsCgroupMeasured) {
  experiment_board b;
  ASSERT_TRUE(b.apply(first_report(), 100));
  auto end = nlohmann::json::parse(R"({"id": "e1", "trials": [{"id": "t1", "state": "terminated",
    "containment": "cgroup", "host_memory_peak": 1048576, "cpu_seconds": 2.5, "gpu_memory_peak": 2097152,
    "left_behind_count": 1}, {"id": "t2", "state": "running", "host_memory_peak": "lots", "containment": 3}]})");
  ASSERT_TRUE(b.apply(end, 101));
  auto t1 = b.trial_json("e1", "t1");
  EXPECT_EQ(t1["containment"], "cgroup");
  EXPECT_EQ(t1["host_memory_peak"], 1048576);
  EXPECT_DOUBLE_EQ(t1["cpu_seconds"].get<double>(), 2.5);
  EXPECT_EQ(t1["gpu_memory_peak"], 2097152);
  EXPECT_EQ(t1["left_behind_count"], 1);
  auto t2 = b.trial_json("e1", "t2");  // wrong types are left out
  EXPECT_FALSE(t2.contains("host_memory_peak"));
  EXPECT_FALSE(t2.contains("containment"));
}

TEST(ExperimentBoard, MalformedReportsChangeNothing) {
  experiment_board b;
  EXPECT_FALSE(b.apply(nlohmann::json::array(), 1));
  EXPECT_FALSE(b.apply({{"full", true}}, 1));
  auto s = b.apply({{"id", "e9"}, {"trials", nlohmann::json::array()}}, 1);
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("first report must be full"), std::string::npos);
  ASSERT_TRUE(b.apply(first_report(), 1));
  auto bad = nlohmann::json::parse(R"({"id": "e1", "trials": [{"id": "t1", "state": "error"}, {"state": "x"}]})");
  EXPECT_FALSE(b.apply(bad, 2));
  EXPECT_EQ(b.trial_json("e1", "t1")["state"], "running");  // the good entry was not applied either
  EXPECT_FALSE(b.apply({{"id", "e1"}, {"points", nlohmann::json::array()}}, 2));
  // Points that are not numbers are skipped.
  ASSERT_TRUE(b.apply(nlohmann::json::parse(R"({"id": "e1", "points": {"t1": [[3, "x"], [4], [5, 0.9]]}})"), 3));
  EXPECT_EQ(b.trial_json("e1", "t1")["curve"].size(), 3u);
}

TEST(ExperimentBoard, ResultsCounterNeverGoesDownAndFullReportsReplace) {
  experiment_board b;
  ASSERT_TRUE(b.apply(first_report(), 1));
  EXPECT_EQ(b.results_total(), 3);
  auto again = first_report();  // after a head restart the program sends everything again
  again["results"] = 2;
  again["trials"] = nlohmann::json::array({{{"id", "t1"}, {"state", "running"}}});
  again["points"] = {{"t1", {{1, 0.4}}}};
  ASSERT_TRUE(b.apply(again, 2));
  EXPECT_EQ(b.results_total(), 3);
  auto e = b.experiment_json("e1", true);
  EXPECT_EQ(e["trials"], 1);
  EXPECT_EQ(e["trial_table"][0]["curve"].size(), 1u);
}

TEST(ExperimentBoard, LostOwnerAndEviction) {
  experiment_board b{{8, 2, 1000}};
  for (int i = 0; i < 4; ++i) {
    auto r = first_report();
    r["id"] = "e" + std::to_string(i);
    ASSERT_TRUE(b.apply(r, i));
  }
  b.owner_lost("e0", "its program's connection ended", 10);
  EXPECT_EQ(b.experiment_json("e0", false)["state"], "interrupted");
  EXPECT_EQ(b.experiment_json("e0", false)["error"], "its program's connection ended");
  ASSERT_TRUE(b.apply({{"id", "e1"}, {"state", "done"}}, 11));
  ASSERT_TRUE(b.apply({{"id", "e2"}, {"state", "failed"}, {"error", "boom"}}, 12));
  EXPECT_EQ(b.size(), 3u);  // two ended kept; e0 (ended first) gone; e3 runs
  EXPECT_TRUE(b.experiment_json("e0", false).is_null());
  auto list = b.list_json();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["id"], "e3");  // newest first
  EXPECT_EQ(b.experiments_by_state()["running"], 1);
  EXPECT_EQ(b.trials_by_state()["running"], 3);
  EXPECT_TRUE(b.holders().count("pg-1"));  // e3's t1: running trials of running experiments only
  b.owner_lost("e1", "x", 13);  // ended already: stays done
  EXPECT_EQ(b.experiment_json("e1", false)["state"], "done");
}

TEST(GpusView, JoinsCardsBundlesTrialsAndTheAudit) {
  experiment_board b;
  ASSERT_TRUE(b.apply(first_report(), 1));
  auto status = nlohmann::json::parse(R"({
    "nodes": [
      {"id": "n1", "host": "h1", "alive": true,
       "gpus": [{"index": 0, "uuid": "GPU-a", "name": "H200", "memory_total": 100, "allocated": 0.75},
                {"index": 1, "uuid": "GPU-b", "name": "H200", "memory_total": 100, "allocated": 0}],
       "gpu_audit": [{"uuid": "GPU-a", "memory_used": 40, "trials": [{"trial": "t1", "memory": 30}],
                      "foreign": [{"pid": 7, "name": "python", "memory": 10}]}]},
      {"id": "n2", "alive": false, "gpus": [{"index": 0, "uuid": "GPU-z"}]}
    ],
    "placement_groups": [
      {"id": "pg-1", "state": "created", "bundles": [{"index": 0, "gpus": [{"uuid": "GPU-a", "share": 0.5, "memory": 50}]}]},
      {"id": "pg-9", "state": "created", "bundles": [{"index": 0, "gpus": [{"uuid": "GPU-a", "share": 0.25, "memory": 25}]}]},
      {"id": "pg-old", "state": "removed", "bundles": [{"index": 0, "gpus": [{"uuid": "GPU-b", "share": 1, "memory": 100}]}]}
    ]})");
  auto v = gpus_view(status, b);
  ASSERT_EQ(v.size(), 2u);  // the dead node's card is not shown
  auto& a = v[0];
  EXPECT_EQ(a["uuid"], "GPU-a");
  EXPECT_EQ(a["memory_used"], 40);
  ASSERT_EQ(a["holders"].size(), 2u);
  EXPECT_EQ(a["holders"][0]["trial"], "t1");
  EXPECT_EQ(a["holders"][0]["experiment"], "e1");
  EXPECT_EQ(a["holders"][0]["memory_used"], 30);
  EXPECT_EQ(a["holders"][0]["memory_quota"], 50);
  EXPECT_TRUE(a["holders"][1]["trial"].is_null());  // a group no experiment reported (tune group create)
  EXPECT_EQ(a["foreign"][0]["name"], "python");
  EXPECT_TRUE(v[1]["holders"].empty());  // removed groups hold nothing
  EXPECT_TRUE(v[1]["memory_used"].is_null());
}

// Two objectives (acc up, ms down) and a constraint (over <= 0): the front is the
// feasible trials no other feasible one beats in both; an infeasible trial that would
// beat them is shown but never on it; a trial that has not reported every objective is
// left out.
TEST(ExperimentBoard, TheParetoFrontOfTheFeasibleTrials) {
  experiment_board b;
  auto r = nlohmann::json::parse(R"({
    "id": "mo", "full": true, "name": "two", "metric": "acc", "mode": "max", "state": "running",
    "objectives": [{"name": "acc", "mode": "max"}, {"name": "ms", "mode": "min"}], "constraints": ["over"],
    "trials": [
      {"id": "a", "state": "done", "value": 0.9, "others": [30, -1]},
      {"id": "b", "state": "done", "value": 0.8, "others": [10, 0]},
      {"id": "c", "state": "done", "value": 0.7, "others": [20, -2]},
      {"id": "d", "state": "done", "value": 0.99, "others": [1, 0.5]},
      {"id": "e", "state": "running", "value": 0.95, "others": [null, -1]},
      {"id": "f", "state": "running", "value": 0.95, "others": [5, null]},
      {"id": "g", "state": "pending"}
    ]})");
  ASSERT_TRUE(b.apply(r, 1));
  auto e = b.experiment_json("mo", false);
  ASSERT_TRUE(e.contains("pareto")) << e.dump();
  auto& p = e["pareto"];
  EXPECT_EQ(p["objectives"].size(), 2u);
  EXPECT_EQ(p["constraints"], nlohmann::json::array({"over"}));
  std::map<std::string, nlohmann::json> by;
  for (auto& t : p["trials"]) by[t["trial"]] = t;
  ASSERT_EQ(by.size(), 5u) << p.dump();  // e has no ms yet, g nothing
  EXPECT_TRUE(by["a"]["front"].get<bool>());
  EXPECT_TRUE(by["b"]["front"].get<bool>());
  EXPECT_FALSE(by["c"]["front"].get<bool>());  // b beats it in both
  EXPECT_FALSE(by["d"]["feasible"].get<bool>());
  EXPECT_FALSE(by["d"]["front"].get<bool>());  // better in both, but over its constraint
  EXPECT_FALSE(by["f"]["feasible"].get<bool>());  // its constraint not reported yet
  EXPECT_EQ(by["a"]["values"], nlohmann::json::parse("[0.9, 30]"));
  EXPECT_EQ(by["a"]["constraint_values"], nlohmann::json::parse("[-1]"));
  EXPECT_EQ(by["f"]["constraint_values"], nlohmann::json::parse("[null]"));
  EXPECT_EQ(p["front_size"], 2);
  // The best by the first objective among the trials that meet the constraints: e
  // (0.95; it has not reported ms yet, which the best does not need), not d (0.99, over).
  EXPECT_EQ(e["best"]["trial"], "e");
  EXPECT_EQ(b.list_json()[0]["best"]["trial"], "e");
  // A delta with a trial's new values moves the front.
  ASSERT_TRUE(b.apply(nlohmann::json::parse(R"({"id": "mo", "trials": [{"id": "c", "value": 0.85, "others": [5, -1]}]})"), 2));
  e = b.experiment_json("mo", false);
  for (auto& t : e["pareto"]["trials"]) by[t["trial"]] = t;
  EXPECT_TRUE(by["c"]["front"].get<bool>());
  EXPECT_FALSE(by["b"]["front"].get<bool>());
  // One objective and no constraint: no front.
  ASSERT_TRUE(b.apply(first_report(), 3));
  EXPECT_FALSE(b.experiment_json("e1", false).contains("pareto"));
}

TEST(ExperimentBoard, MalformedObjectivesChangeNothing) {
  experiment_board b;
  for (const char* bad : {R"("objectives": "acc")", R"("objectives": [{"name": "acc", "mode": "up"}])",
                          R"("objectives": [{"mode": "max"}])", R"("objectives": [])", R"("constraints": [1])",
                          R"("constraints": "over")"}) {
    auto r = nlohmann::json::parse(std::string{R"({"id": "x", "full": true, "metric": "acc", )"} + bad + "}");
    auto st = b.apply(r, 1);
    EXPECT_FALSE(st) << bad;
    EXPECT_NE(st.message().find(std::string{bad}.find("constraints") != std::string::npos ? "constraints" : "objective"),
              std::string::npos)
        << st.message();
    EXPECT_EQ(b.size(), 0u);
  }
  // Others that are not a list of numbers are left out of the trial.
  auto r = nlohmann::json::parse(R"({"id": "x", "full": true, "metric": "acc",
    "objectives": [{"name": "acc", "mode": "max"}, {"name": "ms", "mode": "min"}],
    "trials": [{"id": "t", "value": 1, "others": ["fast"]}]})");
  ASSERT_TRUE(b.apply(r, 1));
  auto e = b.experiment_json("x", false);
  EXPECT_FALSE(e["trial_table"][0].contains("others"));
  EXPECT_TRUE(e["pareto"]["trials"].empty());
}

// What moving each running trial would redo: its iterations since its last checkpoint.
TEST(ExperimentBoard, SinceCheckpointPerPlacementGroup) {
  experiment_board b;
  auto r = first_report();  // t1: iteration 2, no checkpoint, in pg-1
  r["trials"].push_back({{"id", "t3"}, {"state", "running"}, {"iteration", 9}, {"checkpoint", 7}, {"group", "pg-3"}});
  r["trials"].push_back({{"id", "t4"}, {"state", "running"}, {"group", "pg-4"}});  // no iteration yet
  r["trials"].push_back({{"id", "t5"}, {"state", "terminated"}, {"iteration", 3}, {"group", "pg-5"}});
  ASSERT_TRUE(b.apply(r, 1));
  auto since = b.since_checkpoint();
  EXPECT_EQ(since, (std::map<std::string, int64_t>{{"pg-1", 2}, {"pg-3", 2}})) << "only running trials, known iterations";
}

// A user sees other users' trials on the nodes only as counts and memory "held by" their
// owner: no trial ids, no host use of theirs; their own trials whole.
TEST(StatusForUser, OtherUsersTrialsOnTheNodesShowOnlyAsHeldByTheirOwner) {
  auto status = nlohmann::json::parse(R"({
    "nodes": [{"id": "n1", "alive": true,
      "trial_host": {"t1@a": {"memory": 100, "owner": "ann"}, "t2@a": {"memory": 200, "owner": "ann"},
                     "t3@b": {"memory": 300, "owner": "bob"}, "t4@c": {"memory": 400}},
      "gpu_audit": [{"uuid": "GPU-1", "memory_used": 10,
        "trials": [{"trial": "t1@a", "memory": 5, "owner": "ann"}, {"trial": "t3@b", "memory": 7, "owner": "bob"}]}]}],
    "placement_groups": [{"id": "g1", "owner": "ann", "experiment": "a", "reason": "why", "state": "created"},
                         {"id": "g2", "owner": "bob", "experiment": "b", "state": "created"}]})");
  auto seen = status_for_user(status, "bob");
  auto& n = seen["nodes"][0];
  EXPECT_EQ(n["trial_host"].size(), 2u) << n.dump();
  EXPECT_TRUE(n["trial_host"].contains("t3@b"));
  EXPECT_TRUE(n["trial_host"].contains("t4@c")) << "an entry without an owner is nobody's in particular";
  EXPECT_EQ(n["trials_held_by"], nlohmann::json({{"ann", 2}}));
  auto& cards = n["gpu_audit"][0]["trials"];
  EXPECT_EQ(cards[0], nlohmann::json({{"held_by", "ann"}, {"memory", 5}}));
  EXPECT_EQ(cards[1]["trial"], "t3@b");
  EXPECT_EQ(seen["placement_groups"][0]["held_by"], "ann");
  EXPECT_FALSE(seen["placement_groups"][0].contains("experiment"));
  EXPECT_FALSE(seen["placement_groups"][0].contains("reason"));
  EXPECT_EQ(seen["placement_groups"][1]["experiment"], "b");
  EXPECT_NE(seen.dump().find("t3@b"), std::string::npos);
  EXPECT_EQ(seen.dump().find("t1@a"), std::string::npos) << "ann's trial ids reach bob: " << seen.dump();
  // The admin's status (no filter) and ann's own view keep everything of hers.
  auto anns = status_for_user(status, "ann");
  EXPECT_EQ(anns["nodes"][0]["trials_held_by"], nlohmann::json({{"bob", 1}}));
  // Malformed node entries are left alone, not a crash.
  auto odd = nlohmann::json::parse(R"({"nodes": [1, {"trial_host": [1]}, {"gpu_audit": [{"trials": [2, {"owner": 3}]}]}]})");
  EXPECT_NO_THROW(status_for_user(odd, "bob"));
}

}  // namespace
}  // namespace tune
