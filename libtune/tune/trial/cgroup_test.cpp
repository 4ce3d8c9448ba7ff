// Containment for real: cgroups made on this machine (as root; skipped where the process
// cannot make them) and the subreaper keeper, with /bin/sh and python3 standing in for a
// trial that escapes its process group, forks without end, eats memory or spins.
#include "tune/trial/cgroup.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "tune/trial/process.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;

bool alive(int pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

bool gone_within(int pid, std::chrono::milliseconds t) {
  auto until = std::chrono::steady_clock::now() + t;
  while (alive(pid) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  return !alive(pid);
}

// A shell that leaves a sleeper behind in a session of its own (setsid, a double fork,
// its descriptors closed: what a daemon does), reports the sleeper's pid and exits.
const char* escape_script =
    "setsid sh -c 'sleep 300 </dev/null >/dev/null 2>&1 3>&- & echo $! >&3' ; sleep 0.05; exit 0";

std::shared_ptr<containment> open_or_skip(const std::string& mode = "auto") {
  auto c = containment::open(mode, "cgtest");
  if (!c) return nullptr;
  return *c;
}

struct run_result {
  std::optional<exit_info> exit;
  std::vector<std::string> reports;
  int left_behind = -1;
  int group = 0;
};

run_result run(const std::string& script, const containment_spec& contain, std::chrono::milliseconds timeout = 20s,
               spawner* via = nullptr) {
  run_result r;
  auto p = worker_process::start({{"/bin/sh", "-c", script}, {{"PATH", "/usr/bin:/bin"}}, "", contain}, via);
  EXPECT_TRUE(p) << p.error().message();
  if (!p) return r;
  r.group = (*p)->group();
  r.exit = (*p)->wait(timeout, r.reports);
  r.left_behind = (*p)->left_behind();
  return r;
}

TEST(Containment, RejectsUnknownModesAndLimits) {
  auto bad = containment::open("jail", "n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("auto, cgroup or subreaper"), std::string::npos);
  auto limit = containment::open("auto", "n", {"disk"});
  ASSERT_FALSE(limit);
  EXPECT_NE(limit.error().message().find("memory, cpu or pids"), std::string::npos);
}

TEST(Containment, SubreaperSaysWhatItCannotEnforce) {
  auto c = containment::open("subreaper", "n");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_FALSE((*c)->caps().cgroup);
  EXPECT_NE((*c)->caps().describe().find("not enforced"), std::string::npos) << (*c)->caps().describe();
  auto mem = (*c)->make("t1", {int64_t{1} << 30, 0, 0});
  ASSERT_FALSE(mem);  // a memory request it cannot hold is refused, not pretended
  EXPECT_NE(mem.error().message().find("cannot enforce host memory"), std::string::npos) << mem.error().message();
  auto required = containment::open("subreaper", "n", {"memory"});
  ASSERT_FALSE(required);
  EXPECT_NE(required.error().message().find("--require-limits"), std::string::npos);
}

// The escape, twice: in a cgroup (the node finds the sleeper in it and kills it with the
// cgroup), and with a subreaper keeper (the orphan comes back to it and dies at the end).
TEST(Containment, AProcessThatLeftTheGroupDiesWithTheTrialInACgroup) {
  auto c = open_or_skip();
  if (!c || !c->caps().cgroup) GTEST_SKIP() << "no cgroups here: " << (c ? c->caps().how : "open failed");
  auto t = c->make("escape", {});
  ASSERT_TRUE(t) << t.error().message();
  auto r = run(escape_script, (*t)->spec());
  ASSERT_TRUE(r.exit && r.exit->ok());
  ASSERT_EQ(r.reports.size(), 1u);
  int sleeper = std::stoi(r.reports[0]);
  EXPECT_TRUE(alive(sleeper)) << "the sleeper should still run before the cgroup ends";
  EXPECT_EQ(cgroup_of(sleeper), (*t)->path());
  auto escaped = (*t)->end(r.group);
  ASSERT_TRUE(escaped) << escaped.error().message();
  ASSERT_EQ(escaped->size(), 1u);
  EXPECT_EQ(escaped->front().rfind(std::to_string(sleeper) + " (sleep)", 0), 0u) << escaped->front();
  EXPECT_TRUE(gone_within(sleeper, 2s));
  EXPECT_FALSE(std::filesystem::exists(c->caps().root + "/escape"));
}

TEST(Containment, AProcessThatLeftTheGroupDiesWithTheTrialAsASubreaper) {
  auto c = containment::open("subreaper", "n");
  ASSERT_TRUE(c);
  auto t = (*c)->make("escape", {});
  ASSERT_TRUE(t);
  EXPECT_TRUE((*t)->spec().subreaper);
  auto r = run(escape_script, (*t)->spec());
  ASSERT_TRUE(r.exit && r.exit->ok());
  ASSERT_EQ(r.reports.size(), 1u);
  int sleeper = std::stoi(r.reports[0]);
  EXPECT_TRUE(gone_within(sleeper, 2s)) << "the subreaper keeper left pid " << sleeper << " running";
  EXPECT_EQ(r.left_behind, 1);
}

TEST(Containment, ASpawnersKeeperContainsToo) {
  auto via = spawner::start();
  ASSERT_TRUE(via);
  for (std::string mode : {"auto", "subreaper"}) {
    auto c = open_or_skip(mode);
    if (!c) continue;
    auto t = c->make("spawned", {});
    ASSERT_TRUE(t);
    auto r = run(escape_script, (*t)->spec(), 20s, via->get());
    ASSERT_TRUE(r.exit && r.exit->ok()) << mode;
    ASSERT_EQ(r.reports.size(), 1u) << mode;
    int sleeper = std::stoi(r.reports[0]);
    ASSERT_TRUE((*t)->end(r.group));
    EXPECT_TRUE(gone_within(sleeper, 2s)) << mode;
  }
}

// The node dies (SIGKILL): the keeper's death signal kills the cgroup, or, as a
// subreaper, every descendant. The "node" here is a forked child of the test.
TEST(Containment, NothingOutlivesANodeKilledWithSigkill) {
  for (std::string mode : {"auto", "subreaper"}) {
    auto c = open_or_skip(mode);
    if (!c) continue;
    auto t = c->make("orphaned", {});
    ASSERT_TRUE(t);
    int pipe_fd[2];
    ASSERT_EQ(::pipe(pipe_fd), 0);
    pid_t node = ::fork();
    ASSERT_GE(node, 0);
    if (node == 0) {
      ::close(pipe_fd[0]);
      auto p = worker_process::start({{"/bin/sh", "-c",
                                       "setsid sh -c 'sleep 300 </dev/null >/dev/null 2>&1 3>&- & echo $! >&3'; sleep 300"},
                                      {{"PATH", "/usr/bin:/bin"}}, "", (*t)->spec()});
      if (!p) ::_exit(1);
      std::vector<std::string> reports;
      while (reports.empty() && (*p)->poll(100ms, reports)) {
      }
      std::string line = reports.empty() ? "0" : reports[0];
      (void)!::write(pipe_fd[1], line.data(), line.size());
      ::close(pipe_fd[1]);
      for (;;) ::pause();
    }
    ::close(pipe_fd[1]);
    char buf[32] = {};
    ASSERT_GT(::read(pipe_fd[0], buf, sizeof buf - 1), 0);
    ::close(pipe_fd[0]);
    int sleeper = std::atoi(buf);
    ASSERT_GT(sleeper, 0);
    ASSERT_TRUE(alive(sleeper));
    ::kill(node, SIGKILL);
    ::waitpid(node, nullptr, 0);
    EXPECT_TRUE(gone_within(sleeper, 3s)) << mode << ": pid " << sleeper << " outlived its node";
  }
}

TEST(Containment, FreezingStopsEverythingInTheCgroupAndThawingGoesOn) {
  auto c = open_or_skip();
  if (!c || !c->caps().cgroup) GTEST_SKIP() << "no cgroups here";
  auto t = c->make("frozen", {});
  ASSERT_TRUE(t);
  // A helper that left the group counts; its count goes to a file.
  auto count = std::filesystem::temp_directory_path() / ("frozen-" + std::to_string(::getpid()));
  auto p = worker_process::start({{"/bin/sh", "-c",
                                   "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > " + count.string() +
                                       "; sleep 0.01; done' </dev/null >/dev/null 2>&1 3>&- & sleep 30"},
                                  {{"PATH", "/usr/bin:/bin"}}, "", (*t)->spec()});
  ASSERT_TRUE(p);
  auto read = [&] {
    std::ifstream in(count);
    long v = 0;
    in >> v;
    return v;
  };
  auto within = [](std::chrono::milliseconds t, const std::function<bool()>& ok) {
    for (auto until = std::chrono::steady_clock::now() + t; std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(10ms))
      if (ok()) return true;
    return ok();
  };
  // The cgroup says when everything in it is frozen (cgroup.events: "frozen 1").
  auto frozen = [&] {
    std::ifstream in(c->caps().root + "/frozen/cgroup.events");
    std::string k;
    int v = -1;
    while (in >> k >> v)
      if (k == "frozen") return v == 1;
    return false;
  };
  ASSERT_TRUE(within(10s, [&] { return read() > 0; })) << "the helper never ran";
  ASSERT_TRUE((*t)->freeze(true));
  ASSERT_TRUE(within(10s, frozen)) << "the cgroup did not freeze";
  long at_freeze = read();  // 0 when frozen mid-write (the file then stays empty)
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(read(), at_freeze) << "the helper ran on while its trial was frozen";
  ASSERT_TRUE((*t)->freeze(false));
  EXPECT_TRUE(within(10s, [&] { return read() > at_freeze; })) << "the helper did not go on after the thaw";
  (*p)->kill();
  std::vector<std::string> reports;
  (*p)->wait(5s, reports);
  ASSERT_TRUE((*t)->end((*p)->group()));
  std::filesystem::remove(count);
}

TEST(Containment, PidsMaxHoldsAForkBomb) {
  auto c = open_or_skip();
  if (!c || !c->caps().pids) GTEST_SKIP() << "pids not enforced here";
  auto t = c->make("bomb", {0, 0, 16});
  ASSERT_TRUE(t) << t.error().message();
  // Forks until fork fails; then says how many it got and how many forks were refused.
  auto r = run("n=0; f=0; for i in $(seq 1 60); do (sleep 30) 2>/dev/null & if [ $? -eq 0 ]; then n=$((n+1)); fi; done;"
               " echo $(cat /proc/self/cgroup | head -1) >&2; sleep 0.2; echo done >&3",
               (*t)->spec());
  auto u = (*t)->usage();
  EXPECT_GT(u.pids_refused, 0);
  EXPECT_LE(u.pids, 16);
  ASSERT_TRUE((*t)->end(r.group));
}

TEST(Containment, MemoryMaxKillsAHogAndSaysSo) {
  auto c = open_or_skip();
  if (!c || !c->caps().memory) GTEST_SKIP() << "memory not enforced here";
  auto t = c->make("hog", {64 << 20, 0, 0});
  ASSERT_TRUE(t) << t.error().message();
  auto r = run("exec python3 -c 'b = bytearray(512 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(len(b))'",
               (*t)->spec());
  ASSERT_TRUE(r.exit);
  EXPECT_FALSE(r.exit->ok()) << "a 512 MiB hog lived under a 64 MiB limit";
  auto u = (*t)->usage();
  EXPECT_GE(u.oom_kills, 1);
  EXPECT_LE(u.memory_peak, (64 << 20) + (4 << 20));
  ASSERT_TRUE((*t)->end(r.group));
}

TEST(Containment, CpuMaxHoldsASpinnerToItsShare) {
  auto c = open_or_skip();
  if (!c || !c->caps().cpu) GTEST_SKIP() << "cpu not enforced here";
  auto t = c->make("spin", {0, 0.25, 0});
  ASSERT_TRUE(t) << t.error().message();
  auto start = std::chrono::steady_clock::now();
  auto r = run("timeout 2 sh -c 'while :; do :; done' & timeout 2 sh -c 'while :; do :; done' & wait", (*t)->spec());
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto u = (*t)->usage();
  ASSERT_GT(u.cpu_seconds, 0);
  // Two spinners for 2 s would use 4 CPU-seconds (or 2 on a 2-core machine shared with
  // others); held at a quarter of a CPU they get about 0.5.
  EXPECT_LT(u.cpu_seconds / wall, 0.4) << u.cpu_seconds << " CPU-s in " << wall << " s";
  EXPECT_GT(u.cpu_seconds / wall, 0.1);
  ASSERT_TRUE((*t)->end(r.group));
}

TEST(Containment, SweepsWhatADeadNodeLeft) {
  auto c = open_or_skip();
  if (!c || !c->caps().cgroup || c->caps().how != "root") GTEST_SKIP() << "needs root's shared subtree";
  auto shared = std::filesystem::path(c->caps().root).parent_path();
  // A node that died: a pid that is not running (a reaped child's).
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  auto left = shared / ("gone." + std::to_string(dead));
  std::filesystem::create_directories(left / "t1");
  EXPECT_GE(c->sweep_dead_nodes(), 1);
  EXPECT_FALSE(std::filesystem::exists(left));
}

}  // namespace
}  // namespace tune
