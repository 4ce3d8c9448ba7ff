// The user table on a real SQLite file: add, settings, tokens, removal, reopening (a head
// restart), and the bad inputs.
#include "tune/cluster/users.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace tune {
namespace {

namespace fs = std::filesystem;

class UsersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("tune-users-" + std::to_string(::getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    file = (dir / "users.db").string();
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
  std::string file;
};

user_limits quota(double gpus) {
  user_limits l;
  l.gpus = *quantity::from_double(gpus, "gpus");
  return l;
}

TEST_F(UsersTest, UsersTheirTokensAndSettingsOutliveAReopen) {
  auto s = user_store::open(file);
  ASSERT_TRUE(s) << s.error().message();
  auto ann = (*s)->add("ann", quota(3.5));
  ASSERT_TRUE(ann) << ann.error().message();
  EXPECT_EQ(ann->token.size(), 64u);
  auto limits = quota(1);
  limits.max_trials = 4;
  limits.priority = 10;
  limits.weight = 2;
  limits.account = "bob";
  auto bob = (*s)->add("bob", limits);
  ASSERT_TRUE(bob);
  EXPECT_NE(ann->token, bob->token);
  EXPECT_EQ((*s)->by_token(bob->token)->name, "bob");
  EXPECT_EQ((*s)->by_token("not-a-token-of-anyone"), nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "it holds every token";

  s->reset();  // the head stops
  auto again = user_store::open(file);
  ASSERT_TRUE(again) << again.error().message();
  ASSERT_EQ((*again)->users().size(), 2u);
  EXPECT_EQ((*again)->find("ann")->limits.gpus->units(), 35000);  // 3.5 exactly
  EXPECT_EQ((*again)->find("bob")->limits, limits);
  EXPECT_EQ((*again)->by_token(ann->token)->name, "ann");

  // New settings keep the token; a new token ends the old one.
  auto more = (*again)->set("ann", quota(8));
  ASSERT_TRUE(more);
  EXPECT_EQ(more->token, ann->token);
  auto fresh = (*again)->new_token("ann");
  ASSERT_TRUE(fresh);
  EXPECT_EQ((*again)->by_token(ann->token), nullptr);
  EXPECT_EQ((*again)->by_token(fresh->token)->name, "ann");
  ASSERT_TRUE((*again)->remove("bob"));
  EXPECT_EQ((*again)->by_token(bob->token), nullptr);
  EXPECT_EQ((*again)->users().size(), 1u);
}

TEST_F(UsersTest, BadNamesSettingsAndFilesAreClearErrors) {
  auto s = user_store::open(file);
  ASSERT_TRUE(s);
  for (const char* name : {"", "Ann", "1ann", "an n", "admin", "node", "a/b", "abcdefghijabcdefghijabcdefghijabc"}) {
    auto r = (*s)->add(name, {});
    ASSERT_FALSE(r) << name;
    EXPECT_NE(r.error().message().find(name[0] ? name : "\"\""), std::string::npos) << r.error().message();
  }
  ASSERT_TRUE((*s)->add("ann", {}));
  auto twice = (*s)->add("ann", {});
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message().find("already a user ann"), std::string::npos);
  EXPECT_FALSE((*s)->remove("zoe"));
  EXPECT_NE((*s)->set("zoe", {}).error().message().find("no user zoe"), std::string::npos);

  auto bad = [](const char* text) {
    auto r = limits_from_json(nlohmann::json::parse(text));
    return r ? std::string{} : r.error().message();
  };
  EXPECT_NE(bad(R"({"gpus": -1})").find("gpus"), std::string::npos);
  EXPECT_NE(bad(R"({"gpus": "four"})").find("gpus must be a number"), std::string::npos);
  EXPECT_NE(bad(R"({"max_trials": 0})").find("max_trials"), std::string::npos);
  EXPECT_NE(bad(R"({"weight": 0})").find("weight must be a number above 0"), std::string::npos);
  EXPECT_NE(bad(R"({"priority": 1.5})").find("priority"), std::string::npos);
  EXPECT_NE(bad(R"({"account": "Root Account"})").find("not a Unix account name"), std::string::npos);
  EXPECT_NE(bad(R"({"gpu": 1})").find("unknown user setting \"gpu\""), std::string::npos);
  auto cleared = limits_from_json(nlohmann::json::parse(R"({"gpus": null})"), quota(2));
  ASSERT_TRUE(cleared);
  EXPECT_FALSE(cleared->gpus);

  // A users file others can read is refused (it holds every token), as is one that is
  // not a users table.
  s->reset();
  fs::permissions(file, fs::perms::others_read, fs::perm_options::add);
  auto open = user_store::open(file);
  ASSERT_FALSE(open);
  EXPECT_NE(open.error().message().find("chmod 600"), std::string::npos) << open.error().message();
  auto junk = (dir / "junk.db").string();
  std::ofstream{junk} << "this is not SQLite";
  fs::permissions(junk, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  auto wrong = user_store::open(junk);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message().find("junk.db"), std::string::npos) << wrong.error().message();
}

TEST(UsersFiles, BesideTheToken) {
  EXPECT_EQ(users_file_beside("/root/.tune/token"), "/root/.tune/users.db");
  EXPECT_EQ(node_token_file_beside("/root/.tune/token"), "/root/.tune/node-token");
  EXPECT_EQ(users_file_beside("token"), "./users.db");
}

}  // namespace
}  // namespace tune
