// Metrics read from a program's output lines with RE2 patterns.
#include "tune/trial/output_metrics.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace tune {
namespace {

nlohmann::json report(const output_metrics& m, std::string_view line) {
  auto r = m.report_line(line);
  return r ? nlohmann::json::parse(*r) : nlohmann::json();
}

TEST(OutputMetrics, OneGroupIsTheExperimentsMetric) {
  auto m = output_metrics::make({"val_acc=(\\S+)"}, "val_acc");
  ASSERT_TRUE(m) << m.error().message();
  EXPECT_EQ(report(*m, "epoch 3 val_acc=0.91"), nlohmann::json::parse(R"({"type":"result","metrics":{"val_acc":0.91}})"));
  EXPECT_EQ(report(*m, "val_acc=0.91, loss=0.3")["metrics"]["val_acc"], 0.91);  // the comma is not the number's
  EXPECT_TRUE(report(*m, "training...").is_null());
  EXPECT_EQ(report(*m, "val_acc=high")["metrics"]["val_acc"], "high");  // not a number: stays text, the trial is stopped
  EXPECT_EQ(report(*m, "val_acc=nan")["metrics"]["val_acc"], "nan");
}

TEST(OutputMetrics, TwoGroupsArePairsAndNamedGroupsAreMetrics) {
  auto pairs = output_metrics::make({"(\\w+)=([-+0-9.eE]+)"}, "acc");
  ASSERT_TRUE(pairs);
  EXPECT_EQ(report(*pairs, "acc=0.5 loss=1e-3 lr=-2"),
            nlohmann::json::parse(R"({"type":"result","metrics":{"acc":0.5,"loss":0.001,"lr":-2.0}})"));
  auto named = output_metrics::make({"epoch (?P<iteration>\\d+): acc (?P<acc>\\S+) loss (?P<loss>\\S+)"}, "acc");
  ASSERT_TRUE(named);
  EXPECT_EQ(report(*named, "epoch 7: acc 0.8 loss 0.4"),
            nlohmann::json::parse(R"({"type":"result","iteration":7,"metrics":{"acc":0.8,"loss":0.4}})"));
  auto several = output_metrics::make({"loss=(?P<loss>\\S+)", "acc=(\\S+)"}, "acc");
  ASSERT_TRUE(several);
  EXPECT_EQ(report(*several, "acc=0.7")["metrics"]["acc"], 0.7);
  EXPECT_EQ(report(*several, "loss=0.2")["metrics"]["loss"], 0.2);
}

TEST(OutputMetrics, BadPatternsAreErrorsThatSayWhatToWrite) {
  auto bad = output_metrics::make({"acc=(\\S+"}, "acc");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("not a regular expression"), std::string::npos);
  auto none = output_metrics::make({"acc=\\S+"}, "acc");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("captures nothing"), std::string::npos);
  EXPECT_FALSE(output_metrics::make({"(\\S+)"}, ""));
  EXPECT_FALSE(output_metrics::make({"(?<=x)(\\d)"}, "acc"));  // a lookbehind: not RE2
}

TEST(OutputMetrics, APathologicalPatternOnALongLineTakesLinearTime) {
  auto m = output_metrics::make({"(a+)+b=(\\S+)"}, "acc");
  ASSERT_TRUE(m);
  std::string line(64 * 1024, 'a');
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(m->report_line(line));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));  // a backtracking engine takes for ever
}

}  // namespace
}  // namespace tune
