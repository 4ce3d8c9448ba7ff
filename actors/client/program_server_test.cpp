// The program server: files served by content; equal files added from several paths
// are still served when the newest of them is gone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "client.hpp"
#include "wire.hpp"

namespace tune {
namespace {

namespace fs = std::filesystem;

struct ProgramServerTest : ::testing::Test {
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  caf::actor server = spawn_program_server(sys);
  fs::path dir = fs::temp_directory_path() / ("program_server_test." + std::to_string(::getpid()));

  void SetUp() override { fs::create_directories(dir); }
  void TearDown() override {
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    fs::remove_all(dir);
  }
  std::string write(const std::string& name, const std::string& text) {
    auto p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::string add(const std::string& path) {
    caf::scoped_actor self{sys};
    std::string sha;
    self->request(server, caf::infinite, wire::program_add_atom::value, path)
        .receive([&](wire::program_add_atom, std::string& s, uint64_t) { sha = s; },
                 [&](caf::error&) {});
    return sha;
  }
  // The first `n` bytes, or the error.
  std::string get(const std::string& sha, uint32_t n) {
    caf::scoped_actor self{sys};
    std::string out;
    self->request(server, caf::infinite, wire::program_get_atom::value, sha, uint64_t{0}, n)
        .receive([&](wire::program_get_atom, std::string& bytes) { out = bytes; },
                 [&](caf::error& e) { out = "error: " + sys.render(e); });
    return out;
  }
};

TEST_F(ProgramServerTest, AFileAddedFromTwoPathsIsServedWhenTheNewestIsGone) {
  auto older = write("a", "checkpoint"), newer = write("b", "checkpoint");
  auto sha = add(older);
  ASSERT_FALSE(sha.empty());
  EXPECT_EQ(add(newer), sha);
  EXPECT_EQ(get(sha, 10), "checkpoint");
  fs::remove(newer);  // a copy removed as newer ones came
  EXPECT_EQ(get(sha, 10), "checkpoint") << "served from the other path";
  fs::remove(older);
  EXPECT_NE(get(sha, 10).find("the program changed on disk"), std::string::npos);
  EXPECT_NE(get(sha, 10).find("no such program here"), std::string::npos) << "forgotten once no path has it";
}

TEST_F(ProgramServerTest, UnknownContentAndRangesOutsideAreErrors) {
  auto sha = add(write("c", "abc"));
  EXPECT_NE(get(sha, 4).find("range outside the program"), std::string::npos);
  EXPECT_NE(get(std::string(64, '0'), 1).find("no such program here"), std::string::npos);
  EXPECT_EQ(get(sha, 3), "abc");
}

}  // namespace
}  // namespace tune
