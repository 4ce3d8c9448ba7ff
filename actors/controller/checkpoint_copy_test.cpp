// The checkpoint copier's check before a restart: a copy still as this process wrote it
// is served without being read again; one changed since (even with its size and
// modification time put back) is found by its hash.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "checkpoint_copy.hpp"
#include "client/client.hpp"
#include "tune/trial/sha256.hpp"
#include "wire.hpp"

namespace tune {
namespace {

namespace fs = std::filesystem;

struct CheckpointCheckTest : ::testing::Test {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  caf::actor programs = spawn_program_server(sys);
  copier_iface copier = spawn_checkpoint_copier(sys, {"token", programs});
  fs::path dir = fs::temp_directory_path() / ("checkpoint_copy_test." + std::to_string(::getpid()));
  std::string sha;
  nlohmann::json manifest, stat;

  void SetUp() override {
    fs::create_directories(dir);
    std::ofstream(dir / "state") << std::string(100000, 'a');
    sha = sha256_file((dir / "state").string()).value();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a clock tick after it was written
    manifest = {{"iteration", 3}, {"files", {{{"name", "state"}, {"size", 100000}, {"sha256", sha}}}}};
    stat = {{"state", file_identity((dir / "state").string())}};
  }
  void TearDown() override {
    caf::anon_send_exit(copier, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(programs, caf::exit_reason::user_shutdown);
    fs::remove_all(dir);
  }
  // The check's answer: "" when the copy may be restored from, else why not.
  std::string check(const nlohmann::json& with_stat) {
    caf::scoped_actor self{sys};
    std::string out = "no answer";
    self->request(copier, std::chrono::seconds(10), ckpt_check_atom::value, dir.string(), manifest.dump(), with_stat.dump())
        .receive([&](ckpt_check_atom) { out = ""; },
                 [&](caf::error& e) {
                   auto why = wire::refusal_reason(e);
                   out = !wire::is_refusal(e) ? sys.render(e) : why.empty() ? "refused" : why;
                 });
    return out;
  }
  std::string served(uint32_t n) {
    caf::scoped_actor self{sys};
    std::string out;
    self->request(programs, std::chrono::seconds(10), wire::program_get_atom::value, sha, uint64_t{0}, n)
        .receive([&](wire::program_get_atom, std::string& bytes) { out = bytes; },
                 [&](caf::error& e) { out = "error: " + sys.render(e); });
    return out;
  }
};

TEST_F(CheckpointCheckTest, ACopyAsWrittenIsServedWithItsHash) {
  ASSERT_FALSE(stat["state"].is_null());
  EXPECT_EQ(check(stat), "");
  EXPECT_EQ(served(5), "aaaaa");
  EXPECT_EQ(check(nlohmann::json::object()), "") << "without what was recorded, hashed again";
}

TEST_F(CheckpointCheckTest, ACopyChangedWithItsSizeAndTimesPutBackIsFound) {
  struct ::stat before {};
  ASSERT_EQ(::stat((dir / "state").c_str(), &before), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(dir / "state", std::ios::in | std::ios::out | std::ios::binary) << "b";  // same size
  timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir / "state").c_str(), times, 0), 0);
  auto why = check(stat);
  EXPECT_NE(why.find("state changed on disk"), std::string::npos) << why;
}

TEST_F(CheckpointCheckTest, ACopyReplacedByAnotherFileIsFound) {
  std::ofstream(dir / "other") << std::string(99999, 'a') << "c";
  fs::rename(dir / "other", dir / "state");
  auto why = check(stat);
  EXPECT_NE(why.find("state changed on disk"), std::string::npos) << why;
  fs::remove(dir / "state");
  why = check(stat);
  EXPECT_FALSE(why.empty()) << "a missing file is refused";
  EXPECT_TRUE(file_identity((dir / "state").string()).is_null());
}

}  // namespace
}  // namespace tune
