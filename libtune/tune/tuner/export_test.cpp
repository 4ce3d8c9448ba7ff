#include "tune/tuner/export.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace tune {
namespace {

namespace fs = std::filesystem;

class ExportTest : public ::testing::Test {
 protected:
  std::string dir = (fs::temp_directory_path() / ("export-test-" + std::to_string(::getpid()) + "-" +
                                                  ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                        .string();
  std::unique_ptr<experiment_store> store;
  void SetUp() override {
    auto s = experiment_store::open(dir);
    ASSERT_TRUE(s) << s.error().message();
    store = std::move(s).value();
    ASSERT_TRUE(store->set_meta("metric", "acc"));
    ASSERT_TRUE(store->add_trial("a", {{"lr", 0.5}, {"opt", {{"name", "sgd, momentum"}}}}));
    ASSERT_TRUE(store->add_trial("b", {{"lr", 0.25}}));
    ASSERT_TRUE(store->add_trial("c", {{"lr", 1}}));
    // a: rises to 0.9 then falls to 0.6; b: steady 0.8; c: no "acc" at all, failed.
    ASSERT_TRUE(store->add_results({{"a", 1, 1.5, {{"acc", 0.7}}},
                                    {"a", 2, 2.5, {{"acc", 0.9}}},
                                    {"a", 3, 3.5, {{"acc", 0.6}, {"loss", 2}}},
                                    {"b", 1, 1.0, {{"acc", 0.8}}},
                                    {"c", 1, 1.0, {{"loss", 9}}}}));
    ASSERT_TRUE(store->update_trial("a", "terminated"));
    ASSERT_TRUE(store->update_trial("b", "terminated"));
    ASSERT_TRUE(store->update_trial("c", "error", "the trial's process ended with exit code 1"));
  }
  void TearDown() override {
    store.reset();
    fs::remove_all(dir);
  }
};

TEST_F(ExportTest, ConstraintsAndTheParetoFront) {
  ASSERT_TRUE(store->add_trial("d", {{"lr", 2}}));
  ASSERT_TRUE(store->add_trial("e", {{"lr", 3}}));
  ASSERT_TRUE(store->add_trial("f", {{"lr", 4}}));
  // d: best accuracy but over its memory budget; e: slower, within it; f: dominated by e.
  ASSERT_TRUE(store->add_results({{"d", 1, 1, {{"acc", 0.95}, {"ms", 9}, {"mem_over", 0.5}}},
                                  {"e", 1, 1, {{"acc", 0.85}, {"ms", 5}, {"mem_over", -1}}},
                                  {"f", 1, 1, {{"acc", 0.80}, {"ms", 6}, {"mem_over", -1}}}}));
  auto plain = find_best(*store, "acc", mode::max);
  EXPECT_EQ((*plain)->id, "d");
  auto feasible = find_best(*store, "acc", mode::max, scope::last, {"mem_over"});
  ASSERT_TRUE(feasible && *feasible);
  EXPECT_EQ((*feasible)->id, "e") << "d is infeasible; a, b report no mem_over (infeasible too)";
  std::vector<objective> objs{{"acc", mode::max}, {"ms", mode::min}};
  auto front = find_pareto_front(*store, objs);
  ASSERT_TRUE(front) << front.error().message();
  ASSERT_EQ(front->size(), 2u);  // d (best acc) and e (fastest); f is dominated by e; a, b, c lack ms
  EXPECT_EQ((*front)[0].id, "d");
  EXPECT_EQ((*front)[1].id, "e");
  EXPECT_EQ((*front)[1].values, (std::vector<double>{0.85, 5}));
  EXPECT_EQ((*front)[1].config["lr"], 3);
  auto constrained = find_pareto_front(*store, objs, {"mem_over"});
  ASSERT_TRUE(constrained);
  ASSERT_EQ(constrained->size(), 1u);
  EXPECT_EQ((*constrained)[0].id, "e");
}

TEST_F(ExportTest, TheBestTrialByLastOrBestResult) {
  auto last = find_best(*store, "acc", mode::max, scope::last);
  ASSERT_TRUE(last && *last);
  EXPECT_EQ((*last)->id, "b");
  EXPECT_DOUBLE_EQ((*last)->value, 0.8);
  auto best = find_best(*store, "acc", mode::max, scope::best);
  ASSERT_TRUE(best && *best);
  EXPECT_EQ((*best)->id, "a");
  EXPECT_EQ((*best)->iteration, 2);
  EXPECT_EQ((*best)->config["lr"], 0.5);
  auto low = find_best(*store, "acc", mode::min, scope::last);
  EXPECT_EQ((*low)->id, "a");
  auto loss = find_best(*store, "loss", mode::min);
  EXPECT_EQ((*loss)->id, "a") << "the failed trial counts with what it reported, but 2 < 9";
  auto none = find_best(*store, "nothing", mode::max);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

TEST_F(ExportTest, CsvHasAColumnPerConfigKeyAndMetric) {
  auto csv = results_csv(*store);
  ASSERT_TRUE(csv) << csv.error().message();
  std::istringstream in(*csv);
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  EXPECT_EQ(header, "trial,iteration,time,state,error,config/lr,config/opt/name,acc,loss\r");
  EXPECT_EQ(first, "a,1,1.500000,terminated,,0.5,\"sgd, momentum\",0.7,\r");
  int rows = 0;
  for (std::string line; std::getline(in, line);) ++rows;
  EXPECT_EQ(rows, 4);
  EXPECT_NE(csv->find("c,1,1.000000,error,the trial's process ended with exit code 1,1,,,9\r\n"), std::string::npos) << *csv;
}

TEST_F(ExportTest, JsonHoldsEveryTrialWithItsHistory) {
  auto j = experiment_json(*store);
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ((*j)["settings"]["metric"], "acc");
  ASSERT_EQ((*j)["trials"].size(), 3u);
  auto& a = (*j)["trials"][0];
  EXPECT_EQ(a["id"], "a");
  EXPECT_EQ(a["history"].size(), 3u);
  EXPECT_EQ(a["history"][2]["metrics"]["loss"], 2);
  EXPECT_EQ((*j)["trials"][2]["error"], "the trial's process ended with exit code 1");
}

}  // namespace
}  // namespace tune
