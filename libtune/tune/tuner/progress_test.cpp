#include "tune/tuner/progress.hpp"

#include <gtest/gtest.h>

#include <sstream>

namespace tune {
namespace {

progress_snapshot sample() {
  progress_snapshot s;
  s.experiment = "fashion_mnist";
  s.elapsed_s = 83.4;
  s.metric = "val_acc";
  s.direction = mode::max;
  s.trials = {{"t-1", "terminated", 5, 0.88, {{"lr", 0.05}, {"width", 128}}, ""},
              {"t-2", "running", 3, 0.91, {{"lr", 0.01}, {"width", 256}}, ""},
              {"t-3", "pending", 0, std::nullopt, {{"lr", 0.1}, {"width", 64}}, ""},
              {"t-4", "error", 1, 0.5, {{"lr", 3.0}, {"width", 64}}, "diverged at epoch 2 (lr 3)"}};
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Progress, TheTableCountsStatesShowsTheBestAndRunningTrialsFirst) {
  auto text = render_progress(sample(), 100, 20);
  auto lines = lines_of(text);
  ASSERT_GE(lines.size(), 8u) << text;
  EXPECT_EQ(lines[0], "== fashion_mnist == running for 00:01:23, metric val_acc (max)");
  EXPECT_EQ(lines[1], "Trials: 4 (1 running, 1 pending, 1 terminated, 1 error)");
  EXPECT_EQ(lines[2], "Best so far: t-2 val_acc=0.91 (lr=0.01, width=256)");
  EXPECT_EQ(lines[3], "trial state      iter   val_acc    lr         width");
  EXPECT_EQ(lines[4], "t-2   running    3      0.91       0.01       256");
  EXPECT_EQ(lines[5], "t-3   pending    0      -          0.1        64");
  EXPECT_EQ(lines[6], "t-4   error      1      0.5        3          64");
  EXPECT_EQ(lines[7], "t-1   terminated 5      0.88       0.05       128");
  EXPECT_EQ(lines[8], "error t-4: diverged at epoch 2 (lr 3)");
  for (auto& l : lines) EXPECT_LE(l.size(), 100u);
}

TEST(Progress, NarrowTerminalsDropColumnsAndLongListsAreCut) {
  auto s = sample();
  s.direction = mode::min;
  auto text = render_progress(s, 45, 2);
  auto lines = lines_of(text);
  EXPECT_EQ(lines[2].rfind("Best so far: t-4 val_acc=0.5", 0), 0u) << text;
  EXPECT_EQ(lines[3], "trial state      iter   val_acc") << "no room for a configuration column";
  EXPECT_EQ(lines[6], "... and 2 more") << text;
  for (auto& l : lines) EXPECT_LE(l.size(), 45u) << l;
}

// A trial over a constraint is never the best, in the table or in the lines.
TEST(Progress, ATrialOverAConstraintIsNeverTheBest) {
  auto before = sample();
  auto now = sample();
  now.trials[1].value = 0.99;
  now.trials[1].feasible = false;  // t-2, the best by value
  auto lines = lines_of(render_progress(now, 100, 20));
  EXPECT_EQ(lines[2], "Best so far: t-1 val_acc=0.88 (lr=0.05, width=128)");
  for (auto& l : progress_changes(before, now)) EXPECT_EQ(l.find("best so far: t-2"), std::string::npos) << l;
}

TEST(Progress, PlainLinesSayWhatChanged) {
  auto before = sample();
  auto now = sample();
  now.elapsed_s = 90;
  now.trials[1].state = "terminated";
  now.trials[1].iteration = 5;
  now.trials[1].value = 0.93;
  now.trials[2].state = "running";
  auto lines = progress_changes(before, now);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "[00:01:30] trial t-2 terminated, iter 5 val_acc=0.93");
  EXPECT_EQ(lines[1], "[00:01:30] trial t-3 running");
  EXPECT_EQ(lines[2], "[00:01:30] best so far: t-2 val_acc=0.93");
  EXPECT_TRUE(progress_changes(now, now).empty());
  progress_snapshot empty = now;
  empty.trials.clear();
  auto first = progress_changes(empty, now);
  EXPECT_EQ(first[0], "[00:01:30] trial t-1 terminated, iter 5 val_acc=0.88");
}

}  // namespace
}  // namespace tune
