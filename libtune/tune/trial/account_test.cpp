#include "tune/trial/account.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tune {
namespace {

namespace fs = std::filesystem;

TEST(Account, RootAndUnknownAccountsAreRefusedWithWhatToDo) {
  auto root = find_account("root");
  ASSERT_FALSE(root);
  EXPECT_NE(root.error().message().find("never run as root"), std::string::npos) << root.error().message();
  auto none = find_account("no-such-account-libtune");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("useradd"), std::string::npos) << none.error().message();
}

TEST(Account, ARootNodeRunsTrialsAsNobodyUnlessTold) {
  auto a = trial_account("");
  ASSERT_TRUE(a) << a.error().message();
  if (::geteuid() == 0) {
    EXPECT_EQ(a->name, "nobody");
    EXPECT_NE(a->uid, 0u);
    EXPECT_TRUE(a->switches);
  } else {
    EXPECT_EQ(a->uid, ::geteuid());
    EXPECT_FALSE(a->switches);
    auto other = trial_account("nobody");
    ASSERT_FALSE(other);
    EXPECT_NE(other.error().message().find("not as root"), std::string::npos) << other.error().message();
  }
}

TEST(Account, AFolderTheAccountCannotEnterIsNamed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a folder nobody cannot enter, checked for nobody)";
  auto nobody = find_account("nobody");
  ASSERT_TRUE(nobody);
  char tmpl[] = "/tmp/account-test-XXXXXX";
  ASSERT_TRUE(::mkdtemp(tmpl));
  fs::path dir = tmpl;  // 0700, root's
  auto s = reachable(*nobody, (dir / "node/trials").string());
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("cannot enter " + dir.string() + " (drwx------ root:root)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("chmod o+x " + dir.string()), std::string::npos) << s.message();
  ::chmod(tmpl, 0711);
  EXPECT_TRUE(reachable(*nobody, (dir / "node/trials").string())) << "folders not made yet are made searchable";
  fs::remove_all(dir);
}

TEST(Account, FilesMadeAsTheAccountAreItsAndRootsFilesStayOutOfReach) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch accounts";
  auto nobody = find_account("nobody");
  ASSERT_TRUE(nobody);
  char tmpl[] = "/tmp/account-test-XXXXXX";
  ASSERT_TRUE(::mkdtemp(tmpl));
  fs::path dir = tmpl;
  ::chmod(tmpl, 0711);
  fs::create_directory(dir / "theirs");
  ASSERT_EQ(::chown((dir / "theirs").c_str(), nobody->uid, nobody->gid), 0);
  std::ofstream(dir / "secret") << "root's";
  ::chmod((dir / "secret").c_str(), 0600);
  {
    as_account as(*nobody);
    std::ofstream(dir / "theirs/made") << "x";
    EXPECT_FALSE(std::ifstream(dir / "secret").is_open()) << "read root's 0600 file as nobody";
    EXPECT_FALSE(std::ofstream(dir / "mine").is_open()) << "wrote in root's folder as nobody";
  }
  struct stat s {};
  ASSERT_EQ(::stat((dir / "theirs/made").c_str(), &s), 0);
  EXPECT_EQ(s.st_uid, nobody->uid);
  EXPECT_TRUE(std::ifstream(dir / "secret").is_open()) << "root again after the guard";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tune
