#include "tune/host/card_claims.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tune {
namespace {

namespace fs = std::filesystem;

struct CardClaims : ::testing::Test {
  std::string dir;
  std::vector<std::string> cards{"GPU-0", "GPU-1"};
  void SetUp() override {
    dir = fs::temp_directory_path() / ("card-claims-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  claimer me(const std::string& node, int pid = ::getpid()) {
    claimer c;
    c.node = node;
    c.pid = pid;
    c.started = process_start_time(pid);
    c.user = "test";
    return c;
  }
};

TEST_F(CardClaims, NodesSeeEachOthersClaimsAndNotTheirOwn) {
  auto a = card_claims::open(dir + "/gpus", me("node-a"), cards);
  auto b = card_claims::open(dir + "/gpus", me("node-b"), cards);
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_TRUE(b) << b.error().message();
  struct stat s {};
  ASSERT_EQ(::stat((dir + "/gpus").c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 01777u);  // every user's nodes write there, none replaces another's
  EXPECT_TRUE((*b)->others().empty());
  ASSERT_TRUE((*a)->write({{"GPU-0", {2500, 20LL << 30}}}));
  auto seen = (*b)->others();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].node, "node-a");
  EXPECT_EQ(seen[0].cards.at("GPU-0").units, 2500);
  EXPECT_EQ(seen[0].cards.at("GPU-0").memory, 20LL << 30);
  EXPECT_TRUE((*a)->others().empty());
  ASSERT_TRUE((*a)->write({}));  // all given back
  EXPECT_TRUE((*b)->others().empty());
  ASSERT_TRUE((*a)->write({{"GPU-1", {10000, 1}}}));
  a->reset();  // the node ends: its claims with it
  EXPECT_TRUE((*b)->others().empty());
}

TEST_F(CardClaims, TheClaimsOfANodeThatDiedCountNoMore) {
  auto b = card_claims::open(dir + "/gpus", me("node-b"), cards);
  ASSERT_TRUE(b);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {  // a node that claims a card and is killed before it gives it back
    auto a = card_claims::open(dir + "/gpus", me("node-a", ::getpid()), cards);
    if (!a || !(*a)->write({{"GPU-0", {10000, 1}}})) ::_exit(1);
    char x = 1;
    (void)!::write(ready[1], &x, 1);
    ::pause();
    ::_exit(0);
  }
  char x = 0;
  ASSERT_EQ(::read(ready[0], &x, 1), 1);
  EXPECT_EQ((*b)->others().size(), 1u);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE((*b)->others().empty());
  EXPECT_FALSE(fs::exists(dir + "/gpus/GPU-0/node-a.json"));  // removed by the next reader
}

TEST_F(CardClaims, APidReusedByAnotherProcessIsNotTheNode) {
  auto b = card_claims::open(dir + "/gpus", me("node-b"), cards);
  ASSERT_TRUE(b);
  auto stale = me("node-old");
  stale.started += 1;  // this pid, another start: another process
  stale.cards["GPU-0"] = {10000, 1};
  nlohmann::json j{{"node", stale.node}, {"pid", stale.pid}, {"started", stale.started}, {"uid", 0}, {"user", ""},
                   {"cgroup", ""}, {"units", 10000}, {"memory", 1}};
  std::ofstream(dir + "/gpus/GPU-0/node-old.json") << j.dump();
  EXPECT_TRUE((*b)->others().empty());
}

TEST_F(CardClaims, BrokenFilesAreSkipped) {
  auto b = card_claims::open(dir + "/gpus", me("node-b"), cards);
  ASSERT_TRUE(b);
  std::ofstream(dir + "/gpus/GPU-0/junk.json") << "{not json";
  std::ofstream(dir + "/gpus/GPU-0/neg.json") << R"({"pid": 1, "started": 0, "units": -5})";
  EXPECT_TRUE((*b)->others().empty());
}

TEST_F(CardClaims, TheLockIsOneAtATimeAcrossProcesses) {
  auto a = card_claims::open(dir + "/gpus", me("node-a"), cards);
  ASSERT_TRUE(a);
  auto held = (*a)->hold_all();
  ASSERT_TRUE(held.held());
  pid_t child = ::fork();
  if (child == 0) {  // another process waits 2 s for it, then gives up
    auto c = card_claims::open(dir + "/gpus", me("node-c", ::getpid()), cards);
    auto start = std::chrono::steady_clock::now();
    auto l = (*c)->hold_all();
    auto waited = std::chrono::steady_clock::now() - start;
    ::_exit(!l.held() && waited >= std::chrono::milliseconds(1900) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  { auto gone = std::move(held); }
  EXPECT_TRUE((*a)->hold_all().held());
}

TEST_F(CardClaims, NodesOnOtherCardsAreNotReadAndNeverWaitedFor) {
  auto a = card_claims::open(dir + "/gpus", me("node-a"), {"GPU-0"});
  auto b = card_claims::open(dir + "/gpus", me("node-b"), {"GPU-1"});
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->write({{"GPU-0", {10000, 1}}}));
  EXPECT_TRUE((*b)->others().empty());  // a's card is not b's
  EXPECT_EQ((*a)->write({{"GPU-1", {1, 1}}}).code(), errc::invalid_argument);  // nor can a claim it
  auto held = (*a)->hold_all();
  ASSERT_TRUE(held.held());
  EXPECT_TRUE((*b)->hold_all().held());  // at once: another card's lock
  // A node on both sees a's claim on the one, under the lock of both.
  auto c = card_claims::open(dir + "/gpus", me("node-c"), {"GPU-1", "GPU-0"});
  ASSERT_TRUE(c);
  auto seen = (*c)->others();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].node, "node-a");
  EXPECT_EQ(seen[0].cards.size(), 1u);
}

TEST_F(CardClaims, ALockOfSomeCardsLeavesTheOthersFree) {
  auto a = card_claims::open(dir + "/gpus", me("node-a"), cards);
  auto b = card_claims::open(dir + "/gpus", me("node-b"), cards);
  ASSERT_TRUE(a && b);
  auto one = (*a)->hold({"GPU-1", "GPU-9"});  // GPU-9 is not a's: left out
  ASSERT_TRUE(one.held());
  EXPECT_TRUE(one.covers(1));
  EXPECT_FALSE(one.covers(0));
  EXPECT_TRUE((*b)->hold({"GPU-0"}).held());  // at once
  // b's claim on GPU-0 under its own lock; a reads it when it looks at GPU-0 again.
  ASSERT_TRUE((*b)->write({{"GPU-0", {5000, 1}}}));
  EXPECT_EQ((*a)->others({"GPU-0"}).size(), 1u);
}

TEST_F(CardClaims, AFileWhereTheFolderShouldBeIsAClearError) {
  fs::create_directories(dir);
  std::ofstream(dir + "/gpus") << "x";
  auto a = card_claims::open(dir + "/gpus", me("node-a"), cards);
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message().find("is not a folder"), std::string::npos) << a.error().message();
}

TEST(ProcessStartTime, IsStableAndZeroForNoProcess) {
  auto t = process_start_time(::getpid());
  EXPECT_GT(t, 0u);
  EXPECT_EQ(process_start_time(::getpid()), t);
  EXPECT_EQ(process_start_time(0), 0u);
  EXPECT_EQ(process_start_time(999999999), 0u);
}

}  // namespace
}  // namespace tune
