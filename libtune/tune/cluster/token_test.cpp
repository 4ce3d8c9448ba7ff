#include "tune/cluster/token.hpp"

#include "harness.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tune {
namespace {

// A folder of the test's own, removed at its end.
struct temp_dir : test::scratch_dir {
  temp_dir() : scratch_dir("tune-token-test") {}
};

TEST(Token, HeadCreatesAPrivateFileOnce) {
  temp_dir tmp;
  const std::string& dir = tmp.path;
  auto path = dir + "/sub/token";
  auto made = ensure_token(path);
  ASSERT_TRUE(made) << made.error().message();
  EXPECT_TRUE(made->created);
  EXPECT_EQ(made->token.size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir + "/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto again = ensure_token(path);
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->token, made->token);
  auto read = read_token(path);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->token, made->token);
  EXPECT_TRUE(read->warning.empty());
}

TEST(Token, MissingOrBadFilesSayWhatToDo) {
  temp_dir tmp;
  const std::string& dir = tmp.path;
  auto missing = read_token(dir + "/nope");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message().find("copy the head's token file"), std::string::npos);
  std::ofstream{dir + "/short"} << "abc\n";
  auto bad = read_token(dir + "/short");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("does not hold a token"), std::string::npos);
  std::ofstream{dir + "/open"} << std::string(32, 'a') << "\n";
  ::chmod((dir + "/open").c_str(), 0644);
  auto open = read_token(dir + "/open");
  ASSERT_TRUE(open);
  EXPECT_NE(open->warning.find("chmod 600"), std::string::npos);
}

TEST(Token, CompareIsExact) {
  EXPECT_TRUE(token_equal("abcdef", "abcdef"));
  EXPECT_FALSE(token_equal("abcdef", "abcdeg"));
  EXPECT_FALSE(token_equal("abcdef", "abcde"));
  EXPECT_FALSE(token_equal("", "a"));
}

}  // namespace
}  // namespace tune
