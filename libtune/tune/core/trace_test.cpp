#include "tune/core/trace.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

namespace {

std::filesystem::path scratch() {
  auto p = std::filesystem::temp_directory_path() / ("trace_test." + std::to_string(::getpid()));
  std::filesystem::remove(p);
  return p;
}

TEST(StepTrace, OffWithoutAPathWritesNothing) {
  tune::step_trace t("");
  EXPECT_FALSE(t.on());
  t("start_sent", "t1");  // no file, no crash
}

TEST(StepTrace, APathThatCannotBeOpenedIsOffAndWritesNothing) {
  tune::step_trace t("/nonexistent-folder-of-trace-test/steps.log");  // said on stderr
  EXPECT_FALSE(t.on());
  t("start_sent", "t1");
  EXPECT_FALSE(std::filesystem::exists("/nonexistent-folder-of-trace-test"));
}

TEST(StepTrace, LinesNameTheStepTheTrialAndARisingClock) {
  auto path = scratch();
  {
    tune::step_trace t(path.string());
    ASSERT_TRUE(t.on());
    t("start_sent", "t1");
    t("start_answered", "t1");
  }
  std::ifstream in(path);
  std::string step, trial;
  long long a = 0, b = 0;
  ASSERT_TRUE(in >> step >> trial >> a);
  EXPECT_EQ(step, "start_sent");
  EXPECT_EQ(trial, "t1");
  ASSERT_TRUE(in >> step >> trial >> b);
  EXPECT_EQ(step, "start_answered");
  EXPECT_LE(a, b);
  std::filesystem::remove(path);
}

// Several writers (threads here; processes in a cluster) on one file: every line whole.
TEST(StepTrace, ConcurrentWritersNeverInterleaveLines) {
  auto path = scratch();
  {
    std::vector<std::thread> writers;
    for (int w = 0; w < 4; ++w)
      writers.emplace_back([&, w] {
        tune::step_trace t(path.string());
        for (int i = 0; i < 2000; ++i) t("step", "trial-" + std::to_string(w) + "-" + std::to_string(i));
      });
    for (auto& w : writers) w.join();
  }
  std::ifstream in(path);
  std::string line;
  std::map<int, int> per_writer;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string step, trial, extra;
    long long ns = 0;
    ASSERT_TRUE(f >> step >> trial >> ns) << line;
    EXPECT_FALSE(f >> extra) << line;
    EXPECT_EQ(step, "step");
    ++per_writer[trial[6] - '0'];
  }
  for (int w = 0; w < 4; ++w) EXPECT_EQ(per_writer[w], 2000);
  std::filesystem::remove(path);
}

}  // namespace
