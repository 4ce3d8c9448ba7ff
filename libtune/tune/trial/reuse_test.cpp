// Reused workers' parts on their own: the hand-over folder's protocol between a waiting
// worker and the node, the key that decides who may reuse whom, and the idle pool.
#include "tune/trial/reuse.hpp"

#include "harness.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

namespace tune::reuse {
namespace {

using namespace std::chrono_literals;

// A folder of the test's own, removed at its end.
struct folder : test::scratch_dir {
  folder() : scratch_dir("reuse-test") {}
};

TEST(Reuse, AWaitingWorkerTakesTheNextTrialTheMomentItIsWritten) {
  folder f;
  auto waiting = std::async(std::launch::async, [&] { return wait_for_next(f.path, 5s); });
  std::this_thread::sleep_for(50ms);
  idle_worker w;
  w.dir = f.path;
  process_spec spec;
  spec.env = {{"TUNE_TRIAL_ID", "t2"}, {"A", "1"}};
  spec.cwd = "/tmp";
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(hand_over(w, spec));
  auto got = waiting.get();
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(got) << got.error().message();
  ASSERT_TRUE(*got);
  EXPECT_EQ((*got)->env.at("TUNE_TRIAL_ID"), "t2");
  EXPECT_EQ((*got)->cwd, "/tmp");
  EXPECT_LT(took, 1s) << "woken by the file, not by the time running out";
  EXPECT_FALSE(std::filesystem::exists(f.path + "/next.json")) << "taken: a later wait does not see it again";
}

// The folder is the worker's: a link it put at the temporary name is not followed.
TEST(Reuse, TheHandOverNeverWritesThroughALinkInTheWorkersFolder) {
  folder f, elsewhere;
  auto target = elsewhere.path + "/victim";
  std::ofstream(target) << "untouched";
  std::filesystem::create_symlink(target, f.path + "/.next.json.tmp");
  idle_worker w;
  w.dir = f.path;
  process_spec spec;
  spec.env = {{"A", "1"}};
  ASSERT_TRUE(hand_over(w, spec));
  std::ifstream in(target);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "untouched");
  auto got = wait_for_next(f.path, 1s);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->env.at("A"), "1");
}

// One worker waits again and again: each hand-over is seen within a few ms. (Closing
// an inotify instance after each wait cost 10-20 ms, paid by every reused trial.)
TEST(Reuse, RepeatedHandOversAreSeenAtOnce) {
  folder f;
  std::vector<double> ms;
  for (int i = 0; i < 11; ++i) {
    std::chrono::steady_clock::time_point t0;
    std::thread writer([&] {
      std::this_thread::sleep_for(20ms);
      idle_worker w;
      w.dir = f.path;
      process_spec spec;
      spec.env = {{"A", std::to_string(i)}};
      t0 = std::chrono::steady_clock::now();
      EXPECT_TRUE(hand_over(w, spec));
    });
    auto got = wait_for_next(f.path, 5s);
    auto took = std::chrono::steady_clock::now();
    writer.join();
    ASSERT_TRUE(got && *got);
    EXPECT_EQ((*got)->env.at("A"), std::to_string(i));
    ms.push_back(std::chrono::duration<double, std::milli>(took - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 8.0) << "median ms from the hand-over to the worker having it";
}

TEST(Reuse, NobodyComingOrTheFolderGoingEndsTheWait) {
  folder f;
  auto t0 = std::chrono::steady_clock::now();
  auto none = wait_for_next(f.path, 200ms);
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 190ms);
  auto waiting = std::async(std::launch::async, [&] { return wait_for_next(f.path, 10s); });
  std::this_thread::sleep_for(50ms);
  t0 = std::chrono::steady_clock::now();
  std::filesystem::remove_all(f.path);
  auto gone = waiting.get();
  ASSERT_TRUE(gone);
  EXPECT_FALSE(*gone);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the node removing the folder ends the wait at once";
}

TEST(Reuse, AFileThatIsNotANextTrialIsAnErrorNamingIt) {
  folder f;
  std::ofstream(f.path + "/next.json") << "[1, 2]";
  auto got = wait_for_next(f.path, 1s);
  ASSERT_FALSE(got);
  EXPECT_NE(got.error().message().find("is not a next trial"), std::string::npos) << got.error().message();
}

TEST(Reuse, TheEnvironmentBecomesExactlyTheNextTrials) {
  ::setenv("REUSE_TEST_OLD", "x", 1);
  ::setenv("REUSE_TEST_KEEP", "same", 1);
  next_trial n;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (kv.rfind("REUSE_TEST_", 0) != 0) n.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  n.env["REUSE_TEST_KEEP"] = "same";
  n.env["REUSE_TEST_NEW"] = "y";
  auto cwd = std::filesystem::current_path();
  n.cwd = "/";
  ASSERT_TRUE(apply(n));
  EXPECT_EQ(std::getenv("REUSE_TEST_OLD"), nullptr);
  EXPECT_STREQ(std::getenv("REUSE_TEST_KEEP"), "same");
  EXPECT_STREQ(std::getenv("REUSE_TEST_NEW"), "y");
  EXPECT_EQ(std::filesystem::current_path(), "/");
  n.cwd = "/nonexistent/folder";
  auto bad = apply(n);
  EXPECT_FALSE(bad);
  EXPECT_NE(bad.message().find("/nonexistent/folder"), std::string::npos);
  std::filesystem::current_path(cwd);
  ::unsetenv("REUSE_TEST_NEW");
  ::unsetenv("REUSE_TEST_KEEP");
}

TEST(Reuse, OnlyTheTrialsOwnVariablesMayDiffer) {
  process_spec a;
  a.argv = {"/bin/prog", "--tune-worker", "t"};
  a.env = {{"TUNE_TRIAL_ID", "trial-1"}, {"TUNE_TRIAL_DIR", "/w/trials/1"}, {"HOME", "/w/trials/1"},
           {"TUNE_TRIAL_CONFIG", "{\"x\":1}"}, {"CUDA_VISIBLE_DEVICES", "GPU-a"}, {"TUNE_GPU_MEMORY_QUOTA", "100"}};
  host_limits lim{1 << 30, 1.0, 64};
  auto b = a;
  b.env["TUNE_TRIAL_ID"] = "trial-2";
  b.env["TUNE_TRIAL_DIR"] = b.env["HOME"] = "/w/trials/2";
  b.env["TUNE_TRIAL_CONFIG"] = "{\"x\":2}";
  b.env["TUNE_RESTORE_DIR"] = "/w/trials/1/checkpoints/3";
  EXPECT_EQ(key_of(a, "run1", lim), key_of(b, "run1", lim));
  EXPECT_NE(key_of(a, "run1", lim), key_of(b, "run2", lim)) << "another experiment";
  auto other_card = b;
  other_card.env["CUDA_VISIBLE_DEVICES"] = "GPU-b";
  EXPECT_NE(key_of(a, "run1", lim), key_of(other_card, "run1", lim));
  auto other_share = b;
  other_share.env["TUNE_GPU_MEMORY_QUOTA"] = "200";
  EXPECT_NE(key_of(a, "run1", lim), key_of(other_share, "run1", lim));
  EXPECT_NE(key_of(a, "run1", lim), key_of(b, "run1", host_limits{2 << 30, 1.0, 64})) << "other host limits";
  auto other_user = b;
  other_user.run_as.uid = 1234;
  EXPECT_NE(key_of(a, "run1", lim), key_of(other_user, "run1", lim));
  auto own_home = b;
  own_home.env["HOME"] = "/home/someone";
  EXPECT_NE(key_of(a, "run1", lim), key_of(own_home, "run1", lim)) << "a home that is not its folder";
}

// A worker as the pool keeps them: /bin/sh waiting in its own process group.
std::unique_ptr<worker_process> sleeper(std::shared_ptr<spawner>& via) {
  if (!via) via = *spawner::start();
  auto p = worker_process::start({{"/bin/sh", "-c", "sleep 30"}, {{"PATH", "/usr/bin:/bin"}}, ""}, via.get());
  EXPECT_TRUE(p) << p.error().message();
  return p ? std::move(*p) : nullptr;
}

TEST(IdlePool, TakesByKeyEvictsOthersOnTheCardsAndEndsThemWhenTheirTimeIsUp) {
  std::shared_ptr<spawner> via;
  folder f;
  idle_pool pool{400ms};
  auto make = [&](const std::string& key, const std::string& card) {
    idle_worker w;
    w.key = key;
    w.cards = {card};
    w.process = sleeper(via);
    w.dir = f.path + "/" + key + card;
    std::filesystem::create_directories(w.dir);
    return w;
  };
  auto a = make("k1", "GPU-a");
  int a_pid = a.process->pid();
  pool.keep(std::move(a));
  auto b = make("k2", "GPU-b");
  int b_pid = b.process->pid();
  std::string b_dir = b.dir;
  pool.keep(std::move(b));
  EXPECT_FALSE(pool.take("k3"));
  auto got = pool.take("k1");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->process->pid(), a_pid);
  idle_pool::end(*got);
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(a_pid); }, 3s));
  // Something else starting on GPU-b: the idle k2 worker ends first.
  pool.evict("k9", {"GPU-b"});
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(b_pid); }, 3s));
  EXPECT_FALSE(std::filesystem::exists(b_dir));
  auto c = make("k1", "GPU-a");
  int c_pid = c.process->pid();
  pool.keep(std::move(c));
  pool.evict("k1", {"GPU-a"});  // the same experiment's trial: kept for it
  EXPECT_EQ(pool.size(), 1u);
  EXPECT_TRUE(test::wait_until([&] { return pool.size() == 0; }, 3s)) << "its linger is over";
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(c_pid); }, 3s));
}

}  // namespace
}  // namespace tune::reuse
