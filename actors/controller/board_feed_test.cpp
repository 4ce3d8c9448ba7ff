#include "board_feed.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

engine_trial running(const std::string& id, int64_t it, double v) {
  engine_trial t;
  t.id = id;
  t.state = trial_state::running;
  t.iteration = it;
  t.value = v;
  t.cfg = {{"lr", 0.1}};
  return t;
}

TEST(BoardFeed, FullThenOnlyWhatChangedAndTheBoardFollows) {
  board_feed feed{"exp-1", {{"name", "x"}, {"metric", "acc"}, {"mode", "max"}}};
  std::map<std::string, engine_trial> trials{{"t1", running("t1", 1, 0.5)}, {"t2", running("t2", 0, 0)}};
  trials["t2"].value.reset();
  feed.point("t1", 1, 0.5);
  feed.last_result("t1", R"({"acc": 0.5, "loss": 2})");
  feed.where("t1", {{"node", "n1"}, {"pid", 7}, {"group", "pg-1"}});
  experiment_board board;

  auto r1 = feed.report(trials, "running", "", 1.0, 1);
  ASSERT_TRUE(r1["full"].get<bool>());
  EXPECT_EQ(r1["name"], "x");
  EXPECT_EQ(r1["trials"].size(), 2u);
  ASSERT_TRUE(board.apply(r1, 1));

  EXPECT_TRUE(feed.report(trials, "running", "", 1.5, 1).is_null());  // nothing changed

  trials["t1"].iteration = 2;
  trials["t1"].value = 0.6;
  feed.point("t1", 2, 0.6);
  auto r2 = feed.report(trials, "running", "", 2.0, 2);
  ASSERT_FALSE(r2.is_null());
  EXPECT_FALSE(r2["full"].get<bool>());
  ASSERT_EQ(r2["trials"].size(), 1u);  // t2 did not change
  EXPECT_EQ(r2["trials"][0]["id"], "t1");
  EXPECT_EQ(r2["trials"][0]["node"], "n1");  // where it runs stays in the row
  EXPECT_EQ(r2["points"]["t1"].size(), 1u);
  EXPECT_FALSE(r2.contains("last"));  // its latest result did not change
  ASSERT_TRUE(board.apply(r2, 2));
  auto t1 = board.trial_json("exp-1", "t1");
  EXPECT_EQ(t1["curve"].size(), 2u);
  EXPECT_EQ(t1["pid"], 7);
  EXPECT_EQ(t1["last_result"]["loss"], 2);

  // Where it can be seen besides: its TensorBoard folder, its tracker runs (the trial
  // page's links); a malformed run is left out.
  feed.where("t1", {{"tensorboard_dir", "/exp/trials/t1"},
                    {"mlflow_run", {{"id", "abc"}, {"url", "http://mlflow:5000/#/experiments/1/runs/abc"}}},
                    {"wandb_run", {{"id", 7}, {"url", "x"}}}});
  ASSERT_TRUE(board.apply(feed.report(trials, "running", "", 2.5, 2), 2));
  t1 = board.trial_json("exp-1", "t1");
  EXPECT_EQ(t1["tensorboard_dir"], "/exp/trials/t1");
  EXPECT_EQ(t1["mlflow_run"]["url"], "http://mlflow:5000/#/experiments/1/runs/abc");
  EXPECT_FALSE(t1.contains("wandb_run"));

  // A head restart: the next report is full again, curves whole.
  feed.resend_all();
  auto r3 = feed.report(trials, "running", "", 3.0, 2);
  EXPECT_TRUE(r3["full"].get<bool>());
  EXPECT_EQ(r3["points"]["t1"].size(), 2u);
  experiment_board fresh;
  ASSERT_TRUE(fresh.apply(r3, 3));
  EXPECT_EQ(fresh.trial_json("exp-1", "t1")["curve"].size(), 2u);

  // The end is reported even when no trial changed.
  auto r4 = feed.report(trials, "done", "", 4.0, 2);
  ASSERT_FALSE(r4.is_null());
  EXPECT_EQ(r4["state"], "done");
}

TEST(BoardFeed, IdsDependOnHostAndFolder) {
  EXPECT_EQ(board_feed::experiment_id("h", "/a"), board_feed::experiment_id("h", "/a"));
  EXPECT_NE(board_feed::experiment_id("h", "/a"), board_feed::experiment_id("h", "/b"));
  EXPECT_NE(board_feed::experiment_id("h", "/a"), board_feed::experiment_id("g", "/a"));
  EXPECT_EQ(board_feed::experiment_id("h", "/a").rfind("exp-", 0), 0u);
}

// Several objectives: each row carries the others' latest values (null: not reported),
// a change of one sends the row again, and the board builds its front from them.
TEST(BoardFeed, OtherObjectivesReachTheBoardsFront) {
  board_feed feed{"exp-2", {{"name", "x"}, {"metric", "acc"}, {"mode", "max"},
                            {"objectives", {{{"name", "acc"}, {"mode", "max"}}, {{"name", "ms"}, {"mode", "min"}}}},
                            {"constraints", nlohmann::json::array()}}};
  std::map<std::string, engine_trial> trials{{"t1", running("t1", 1, 0.5)}, {"t2", running("t2", 1, 0.4)}};
  trials["t1"].others = {20.0};
  trials["t2"].others = {std::nullopt};
  experiment_board board;
  auto r1 = feed.report(trials, "running", "", 1.0, 2);
  ASSERT_TRUE(board.apply(r1, 1));
  EXPECT_EQ(r1["trials"][1]["others"], nlohmann::json::parse("[null]"));
  trials["t2"].others = {10.0};  // only the other objective changed
  auto r2 = feed.report(trials, "running", "", 2.0, 3);
  ASSERT_FALSE(r2.is_null());
  ASSERT_EQ(r2["trials"].size(), 1u);
  ASSERT_TRUE(board.apply(r2, 2));
  auto p = board.experiment_json("exp-2", false)["pareto"];
  ASSERT_EQ(p["trials"].size(), 2u);
  EXPECT_EQ(p["front_size"], 2);  // t1 better in acc, t2 in ms
}

}  // namespace
}  // namespace tune
