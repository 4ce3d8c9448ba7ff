// The MPS daemon's life cycle with a stand-in for nvidia-cuda-mps-control (a script
// that makes its control pipe and waits); the real one runs on the GPU machine
// (bench_trials --mps).
#include "tune/trial/mps.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;

TEST(Mps, MemoryLimitsAreInMiBByLocalDevice) {
  EXPECT_EQ(mps_daemon::memory_limits({int64_t{17} << 30, (int64_t{512} << 20) + 5}), "0=17408M,1=512M");
  EXPECT_EQ(mps_daemon::memory_limits({}), "");
}

TEST(Mps, AMissingProgramOrNoCardIsAClearError) {
  auto dir = std::filesystem::temp_directory_path() / ("mps-test-" + std::to_string(::getpid()));
  auto none = mps_daemon::start(dir.string(), {"GPU-a"}, {{"PATH", "/nonexistent"}});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message().find("nvidia-cuda-mps-control is not on the PATH"), std::string::npos)
      << none.error().message();
  EXPECT_FALSE(mps_daemon::start(dir.string(), {}, {{"PATH", "/usr/bin:/bin"}}));
  // A daemon that exits at once: its status is the error.
  auto quits = mps_daemon::start(dir.string(), {"GPU-a"}, {{"PATH", "/usr/bin:/bin"}}, "/bin/false");
  ASSERT_FALSE(quits);
  EXPECT_NE(quits.error().message().find("ended with exit code 1"), std::string::npos) << quits.error().message();
  std::filesystem::remove_all(dir);
}

TEST(Mps, StartsListensAndEndsWithItsOwner) {
  auto dir = std::filesystem::temp_directory_path() / ("mps-test-" + std::to_string(::getpid()) + "-b");
  std::filesystem::create_directories(dir);
  auto script = (dir / "fake-mps-control").string();
  {
    std::ofstream f(script);
    f << "#!/bin/sh\n[ \"$1\" = -f ] || exit 3\necho \"$CUDA_VISIBLE_DEVICES\" > \"$CUDA_MPS_LOG_DIRECTORY/seen\"\n"
         "touch \"$CUDA_MPS_PIPE_DIRECTORY/control\"\nexec sleep 60 >&- 2>&- 3>&-\n";  // closes its output, as daemons do
  }
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  int pid = 0;
  {
    auto d = mps_daemon::start((dir / "mps").string(), {"GPU-a", "GPU-b"}, {{"PATH", "/usr/bin:/bin"}}, script);
    ASSERT_TRUE(d) << d.error().message();
    pid = (*d)->pid();
    EXPECT_FALSE(test::process_gone(pid));
    auto env = (*d)->client_env();
    EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], (dir / "mps" / "pipe").string());
    std::ifstream seen(env["CUDA_MPS_LOG_DIRECTORY"] + "/seen");
    std::string cards;
    std::getline(seen, cards);
    EXPECT_EQ(cards, "GPU-a,GPU-b") << "the daemon must see exactly the node's cards";
    // Watching a daemon that closed its output costs nothing (no busy loop).
    auto cpu = [] {
      rusage r{};
      ::getrusage(RUSAGE_SELF, &r);
      return r.ru_utime.tv_sec * 1e3 + r.ru_utime.tv_usec / 1e3 + r.ru_stime.tv_sec * 1e3 + r.ru_stime.tv_usec / 1e3;
    };
    double before = cpu();
    std::this_thread::sleep_for(500ms);
    EXPECT_LT(cpu() - before, 100.0) << "ms of CPU in 500 ms";
  }
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(pid); }, 3s));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tune
