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
  auto a = card_claims::open(dir + "/gpus", me("node-a"));
  auto b = card_claims::open(dir + "/gpus", me("node-b"));
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
  auto b = card_claims::open(dir + "/gpus", me("node-b"));
  ASSERT_TRUE(b);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {  // a node that claims a card and is killed before it gives it back
    auto a = card_claims::open(dir + "/gpus", me("node-a", ::getpid()));
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
  EXPECT_FALSE(fs::exists(dir + "/gpus/node-a.json"));  // removed by the next reader
}

TEST_F(CardClaims, APidReusedByAnotherProcessIsNotTheNode) {
  auto b = card_claims::open(dir + "/gpus", me("node-b"));
  ASSERT_TRUE(b);
  auto stale = me("node-old");
  stale.started += 1;  // this pid, another start: another process
  stale.cards["GPU-0"] = {10000, 1};
  nlohmann::json j{{"node", stale.node}, {"pid", stale.pid}, {"started", stale.started}, {"uid", 0}, {"user", ""},
                   {"cgroup", ""}, {"cards", {{"GPU-0", {{"units", 10000}, {"memory", 1}}}}}};
  std::ofstream(dir + "/gpus/node-old.json") << j.dump();
  EXPECT_TRUE((*b)->others().empty());
}

TEST_F(CardClaims, BrokenFilesAreSkipped) {
  auto b = card_claims::open(dir + "/gpus", me("node-b"));
  ASSERT_TRUE(b);
  std::ofstream(dir + "/gpus/junk.json") << "{not json";
  std::ofstream(dir + "/gpus/neg.json") << R"({"pid": 1, "started": 0, "cards": {"GPU-0": {"units": -5}}})";
  EXPECT_TRUE((*b)->others().empty());
}

TEST_F(CardClaims, TheLockIsOneAtATimeAcrossProcesses) {
  auto a = card_claims::open(dir + "/gpus", me("node-a"));
  ASSERT_TRUE(a);
  auto held = (*a)->hold();
  ASSERT_TRUE(held.held());
  pid_t child = ::fork();
  if (child == 0) {  // another process waits 2 s for it, then gives up
    auto c = card_claims::open(dir + "/gpus", me("node-c", ::getpid()));
    auto start = std::chrono::steady_clock::now();
    auto l = (*c)->hold();
    auto waited = std::chrono::steady_clock::now() - start;
    ::_exit(!l.held() && waited >= std::chrono::milliseconds(1900) ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  { auto gone = std::move(held); }
  EXPECT_TRUE((*a)->hold().held());
}

TEST_F(CardClaims, AFileWhereTheFolderShouldBeIsAClearError) {
  fs::create_directories(dir);
  std::ofstream(dir + "/gpus") << "x";
  auto a = card_claims::open(dir + "/gpus", me("node-a"));
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
