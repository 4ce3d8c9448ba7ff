#include "tune/tuner/auto_share.hpp"

#include <gtest/gtest.h>

#include "tune/core/node_resources.hpp"

namespace tune {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;
constexpr int64_t h200 = 141 * GiB;  // about what NVML says of an H200

auto_share_options options() {
  auto_share_options o;
  o.margin = 0.25;
  o.probe_share = 0.25;
  o.probe_trials = 1;
  o.probe_results = 2;
  o.min_share = 1.0 / 64;
  return o;
}

TEST(AutoShare, TheProbeStartsOnTheProbeShareAndNothingElseStartsUntilItIsMeasured) {
  auto_share a(options(), h200);
  std::optional<auto_decision> ev;
  EXPECT_EQ(a.share_for("trial-00001", &ev), quantity::from_units(2500));
  ASSERT_TRUE(ev);
  EXPECT_EQ(ev->event, "auto_probe");
  EXPECT_EQ(a.share_for("trial-00002"), quantity::from_units(2500)) << "started while probing: the probe share";
  EXPECT_FALSE(a.on_result("trial-00001", 3 * GiB, 40));  // one result: not yet
  EXPECT_FALSE(a.sized());
  auto d = a.on_result("trial-00001", 3 * GiB, 42);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->event, "auto_share");
  EXPECT_TRUE(a.sized());
  // 3 GiB + 25% = 3.75 GiB: 37 such quotas fit in 141 GiB.
  EXPECT_EQ(a.share(), quantity::from_units(10000 / 37));
  EXPECT_EQ(d->body["trials_per_card"], 10000 / (10000 / 37));
  EXPECT_EQ(d->body["util"], 42);
  EXPECT_GE(node_resources::implied_card_memory(a.share(), h200), static_cast<int64_t>(3.75 * GiB));
  EXPECT_EQ(a.share_for("trial-00003"), a.share());
  EXPECT_EQ(a.share_for("trial-00001"), a.share()) << "a probe started again gets the decided share";
}

TEST(AutoShare, AResultWithoutMeasuredMemoryDoesNotCount) {
  auto_share a(options(), h200);
  a.share_for("t1");
  EXPECT_FALSE(a.on_result("t1", 0, -1));
  EXPECT_FALSE(a.on_result("t1", 0, -1));
  EXPECT_FALSE(a.on_result("t1", 2 * GiB, -1));
  EXPECT_TRUE(a.on_result("t1", 2 * GiB, -1));
}

TEST(AutoShare, EveryProbeIsMeasuredBeforeTheShareIsDecidedFromTheLargestPeak) {
  auto o = options();
  o.probe_trials = 2;
  auto_share a(o, h200);
  a.share_for("t1");
  EXPECT_FALSE(a.on_result("t1", 1 * GiB, -1));
  EXPECT_FALSE(a.on_result("t1", 1 * GiB, -1)) << "the second probe has not started";
  a.share_for("t2");
  EXPECT_FALSE(a.on_result("t2", 10 * GiB, -1));
  ASSERT_TRUE(a.on_result("t2", 10 * GiB, -1));
  // 10 GiB + 25% = 12.5 GiB: 11 per 141 GiB card.
  EXPECT_EQ(a.share(), quantity::from_units(10000 / 11));
}

TEST(AutoShare, TheMinimumShareBoundsHowManyShareACard) {
  auto o = options();
  o.min_share = 0.125;
  auto_share a(o, h200);
  a.share_for("t1");
  a.on_result("t1", 500 << 20, -1);
  ASSERT_TRUE(a.on_result("t1", 500 << 20, -1));
  EXPECT_EQ(a.share(), quantity::from_units(1250));
}

TEST(AutoShare, APeakAboveACardTakesAWholeCard) {
  auto_share a(options(), 80 * GiB);
  a.share_for("t1");
  a.on_result("t1", 70 * GiB, -1);
  ASSERT_TRUE(a.on_result("t1", 70 * GiB, -1));
  EXPECT_EQ(a.share(), quantity::whole(1));
}

TEST(AutoShare, AProbeThatEndsWithoutMeasuringKeepsTheProbeShare) {
  auto_share a(options(), h200);
  a.share_for("t1");
  auto d = a.on_ended("t1", 0, -1);
  ASSERT_TRUE(d);
  EXPECT_EQ(a.share(), quantity::from_units(2500));
  EXPECT_NE(d->line.find("no GPU memory measured"), std::string::npos) << d->line;
}

TEST(AutoShare, ATrialOverItsQuotaIsRestartedOnAShareThatHoldsItAndLaterTrialsGetItToo) {
  auto_share a(options(), h200);
  a.share_for("t1");
  a.on_result("t1", 1 * GiB, -1);
  ASSERT_TRUE(a.on_result("t1", 1 * GiB, -1));
  auto small = a.share();
  auto quota = node_resources::implied_card_memory(small, h200);
  a.share_for("t2");
  // Not outgrown: ended well, or failed far below its quota.
  EXPECT_FALSE(a.on_outgrown("t2", false, true, quota, quota));
  EXPECT_FALSE(a.on_outgrown("t2", false, false, quota / 2, quota));
  auto d = a.on_outgrown("t2", true, false, quota + GiB, quota);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->event, "auto_outgrown");
  EXPECT_GT(a.share_for("t2"), small);
  EXPECT_GE(node_resources::implied_card_memory(a.share_for("t2"), h200), quota + GiB);
  EXPECT_EQ(a.share_for("t3"), a.share_for("t2"));
  EXPECT_EQ(a.summary()["outgrown"], 1);
  // Under MPS the driver refuses the allocation: a failure with the peak near the quota.
  auto q2 = node_resources::implied_card_memory(a.share_for("t3"), h200);
  ASSERT_TRUE(a.on_outgrown("t3", false, false, q2 - q2 / 20, q2));
  EXPECT_GT(a.share_for("t3"), a.share_for("t2"));
}

TEST(AutoShare, ATrialThatOutgrewAWholeCardIsAFailure) {
  auto_share a(options(), 80 * GiB);
  a.share_for("t1");
  a.on_result("t1", 70 * GiB, -1);
  a.on_result("t1", 70 * GiB, -1);
  ASSERT_EQ(a.share_for("t2"), quantity::whole(1));
  EXPECT_FALSE(a.on_outgrown("t2", true, false, 81 * GiB, 80 * GiB));
  // The probe, which started on a quarter, is restarted on a whole card.
  EXPECT_TRUE(a.on_outgrown("t1", true, false, 30 * GiB, 20 * GiB));
  EXPECT_EQ(a.share_for("t1"), quantity::whole(1));
}

TEST(AutoShare, OptionsAreChecked) {
  auto o = options();
  EXPECT_TRUE(check(o));
  o.margin = -1;
  EXPECT_NE(check(o).message().find("margin"), std::string::npos);
  o = options();
  o.min_share = 0;
  EXPECT_NE(check(o).message().find("min_share"), std::string::npos);
  o = options();
  o.probe_share = 1.5;
  EXPECT_NE(check(o).message().find("probe_share"), std::string::npos);
  o = options();
  o.probe_trials = 0;
  EXPECT_NE(check(o).message().find("probe_trials"), std::string::npos);
}

TEST(AutoShare, TrialsThatFitCountsEachAliveNodeAndTheSmallestCard) {
  auto status = nlohmann::json::parse(R"({"nodes": [
    {"alive": true, "resources": {"total": {"cpu": 16, "gpu": 1}}, "gpus": [{"memory_total": 150000000000}]},
    {"alive": true, "resources": {"total": {"cpu": 4, "gpu": 2}}, "gpus": [{"memory_total": 80000000000}, {"memory_total": 80000000000}]},
    {"alive": false, "resources": {"total": {"cpu": 64, "gpu": 8}}, "gpus": [{"memory_total": 1000}]}]})");
  auto b = resource_set::make({{"cpu", 1}, {"gpu", 0.125}});
  ASSERT_TRUE(b);
  EXPECT_EQ(trials_that_fit(status, {*b}), 8 + 4);
  EXPECT_EQ(smallest_card_memory(status), 80000000000);
}

}  // namespace
}  // namespace tune
