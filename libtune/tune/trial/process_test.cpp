// Worker processes for real, with /bin/sh standing in for a trial.
#include "tune/trial/process.hpp"

#include "tune/trial/account.hpp"

#include "harness.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace tune {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<worker_process> sh_via(spawner* via, const std::string& script, std::map<std::string, std::string> env = {}) {
  env.emplace("PATH", "/usr/bin:/bin");
  auto p = worker_process::start({{"/bin/sh", "-c", script}, env, ""}, via);
  EXPECT_TRUE(p) << p.error().message();
  return p ? std::move(p).value() : nullptr;
}

std::unique_ptr<worker_process> sh(const std::string& script, std::map<std::string, std::string> env = {}) {
  return sh_via(nullptr, script, std::move(env));
}

// Every behaviour twice: the keeper forked from this process, and from a spawner.
class WorkerProcess : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!GetParam()) return;
    auto s = spawner::start();
    ASSERT_TRUE(s) << s.error().message();
    via = *s;
  }
  std::unique_ptr<worker_process> sh(const std::string& script, std::map<std::string, std::string> env = {}) {
    return sh_via(via.get(), script, std::move(env));
  }
  expected<std::unique_ptr<worker_process>> start(const process_spec& spec) { return worker_process::start(spec, via.get()); }
  std::shared_ptr<spawner> via;
};

INSTANTIATE_TEST_SUITE_P(KeeperFrom, WorkerProcess, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Spawner" : "ThisProcess"; });

TEST_P(WorkerProcess, SeesExactlyTheEnvironmentItIsGiven) {
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);  // the node's own: must not leak
  auto p = sh("env", {{"CUDA_VISIBLE_DEVICES", "GPU-b"}, {"TUNE_TRIAL_ID", "t1"}});
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  std::vector<std::string> reports;
  auto e = p->wait(5s, reports);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->ok()) << e->describe();
  EXPECT_NE(p->stdout_tail().find("CUDA_VISIBLE_DEVICES=GPU-b\n"), std::string::npos) << p->stdout_tail();
  EXPECT_NE(p->stdout_tail().find("TUNE_TRIAL_ID=t1\n"), std::string::npos);
  EXPECT_EQ(p->stdout_tail().find("0,1"), std::string::npos);
}

TEST_P(WorkerProcess, ReportsArriveAsLinesOnTheReportChannel) {
  auto p = sh("echo one >&3; echo two >&3; echo not-a-report; printf last >&3");
  std::vector<std::string> reports;
  auto e = p->wait(5s, reports);
  ASSERT_TRUE(e && e->ok());
  EXPECT_EQ(reports, (std::vector<std::string>{"one", "two", "last"}));
  EXPECT_EQ(p->stdout_tail(), "not-a-report\n");
}

TEST_P(WorkerProcess, OutputLinesAreSplitAndOverlongLinesDroppedWhole) {
  // A 3 MiB report without a newline, then a good one; 100 KiB of output without one,
  // then two lines: the overlong ones are dropped whole (counted), the rest arrive.
  auto p = sh("head -c 3145728 /dev/zero | tr '\\0' x >&3; echo >&3; echo good >&3; "
              "head -c 102400 /dev/zero | tr '\\0' y; echo; echo acc=1; printf 'acc=2'");
  std::vector<std::string> reports, output;
  std::optional<exit_info> e;
  auto until = std::chrono::steady_clock::now() + 10s;
  while (!(e = p->try_wait()) && std::chrono::steady_clock::now() < until)
    if (!p->poll(20ms, reports, &output)) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(e && e->ok());
  while (p->poll(0ms, reports, &output)) {
  }
  EXPECT_EQ(reports, std::vector<std::string>{"good"});
  EXPECT_EQ(output, (std::vector<std::string>{"acc=1", "acc=2"}));
  EXPECT_EQ(p->overlong_lines(), 2u);
}

// Forwarding (log_to_driver): both streams' lines, a last one without its newline, an
// overlong one dropped whole and counted; reports are not forwarded.
TEST_P(WorkerProcess, ForwardedOutputHoldsBothStreamsLines) {
  auto p = sh("echo out1; echo err1 >&2; echo report >&3; head -c 20000 /dev/zero | tr '\\0' z >&2; echo >&2; "
              "printf out2");
  p->forward_output(true);
  std::vector<std::string> reports, forwarded;
  std::optional<exit_info> e;
  auto until = std::chrono::steady_clock::now() + 10s;
  auto take = [&] {
    for (auto& l : p->take_forwarded()) forwarded.push_back(l);
  };
  while (!(e = p->try_wait()) && std::chrono::steady_clock::now() < until) {
    if (!p->poll(20ms, reports)) std::this_thread::sleep_for(5ms);
    take();
  }
  ASSERT_TRUE(e && e->ok());
  while (p->poll(0ms, reports)) take();
  take();
  std::sort(forwarded.begin(), forwarded.end());  // the two pipes are read in either order
  EXPECT_EQ(forwarded, (std::vector<std::string>{"err1", "out1", "out2"}));
  EXPECT_EQ(reports, std::vector<std::string>{"report"});
  EXPECT_EQ(p->forwarded_overlong(), 1u);
}

// A worker that writes reports as fast as they are read: one poll reads at most
// max_read_per_poll of them (reading until the pipe is empty never ended, and a flood
// held hundreds of MiB on the node before its flow control could act).
TEST_P(WorkerProcess, OnePollReadsABoundedAmountOfAFlood) {
  auto p = sh("yes 0123456789012345678901234567890123456789012345678901234567890123456789 >&3");
  std::vector<std::string> reports;
  ASSERT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return !reports.empty(); }, 3s));
  for (int i = 0; i < 20; ++i) {
    reports.clear();
    ASSERT_TRUE(p->poll(100ms, reports));
    EXPECT_LE(reports.size() * 71, worker_process::max_read_per_poll + 71) << "one poll read " << reports.size() << " lines";
  }
  p->kill();
  EXPECT_TRUE(p->wait(3s, reports));
}

TEST_P(WorkerProcess, AProgramThatCannotStartIsAnError) {
  auto p = start({{"/nonexistent/trainer"}, {}, ""});
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("cannot start /nonexistent/trainer: No such file"), std::string::npos)
      << p.error().message();
  char path[] = "/tmp/not-executable-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);  // mode 0600: no execute bit, for root too
  auto q = start({{path}, {}, ""});
  ::unlink(path);
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message().find("Permission denied"), std::string::npos) << q.error().message();
}

TEST_P(WorkerProcess, ACrashIsReportedWithItsSignalAndStderr) {
  auto p = sh("echo 'CUDA error: out of memory' >&2; kill -SEGV $$");
  std::vector<std::string> reports;
  auto e = p->wait(5s, reports);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->ok());
  EXPECT_FALSE(e->exited);
  EXPECT_EQ(e->code, SIGSEGV);
  EXPECT_NE(e->describe().find("killed by signal 11"), std::string::npos) << e->describe();
  EXPECT_EQ(p->stderr_tail(), "CUDA error: out of memory\n");
  auto q = sh("exit 3");
  auto f = q->wait(5s, reports);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->describe(), "exit code 3");
}

TEST_P(WorkerProcess, AWorkerThatIgnoresStopIsKilled) {
  auto p = sh("trap '' TERM; echo ready >&3; sleep 30");
  std::vector<std::string> reports;
  ASSERT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return !reports.empty(); }, 3s));
  p->terminate();
  EXPECT_FALSE(p->wait(300ms, reports)) << "it ignores SIGTERM";
  p->kill();
  auto e = p->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, SIGKILL);
}

TEST_P(WorkerProcess, AStoppedWorkerEndsGracefully) {
  auto p = sh("trap 'echo bye >&3; exit 0' TERM; echo ready >&3; while :; do sleep 0.05; done");
  std::vector<std::string> reports;
  ASSERT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return !reports.empty(); }, 3s));
  p->terminate();
  auto e = p->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->ok()) << e->describe();
  EXPECT_EQ(reports.back(), "bye");
}

TEST_P(WorkerProcess, NoOrphansWhenKilledOrWhenItExits) {
  auto p = sh("sleep 60 & echo $! >&3; wait");
  std::vector<std::string> reports;
  ASSERT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return !reports.empty(); }, 3s));
  int child = std::stoi(reports[0]);
  EXPECT_FALSE(test::process_gone(child));
  p->kill();
  ASSERT_TRUE(p->wait(3s, reports));
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(child); }, 3s)) << "the worker's child outlived it";

  auto q = sh("sleep 60 & echo $! >&3; exit 0");
  reports.clear();
  ASSERT_TRUE(q->wait(3s, reports));
  ASSERT_EQ(reports.size(), 1u);
  int left = std::stoi(reports[0]);
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(left); }, 3s)) << "a child left behind by a finished worker lives on";
}

TEST_P(WorkerProcess, PauseAndResume) {
  auto p = sh("while :; do echo tick >&3; sleep 0.02; done");
  std::vector<std::string> reports;
  ASSERT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return reports.size() >= 2; }, 3s));
  p->pause();
  std::this_thread::sleep_for(100ms);
  p->poll(0ms, reports);
  auto before = reports.size();
  std::this_thread::sleep_for(300ms);
  p->poll(0ms, reports);
  EXPECT_EQ(reports.size(), before) << "a paused worker runs on";
  p->resume();
  EXPECT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return reports.size() > before + 2; }, 3s));
  p->kill();
  EXPECT_TRUE(p->wait(3s, reports));
}

// What a node killed with SIGKILL leaves: the thread that started the worker gone,
// nobody stopping anything. The worker and the children it started must go too.
TEST(WorkerProcessForked, DiesWithTheThreadThatStartedItChildrenIncluded) {
  int pid = 0, child = 0;
  std::thread([&] {
    auto p = sh("sleep 60 & echo $! >&3; wait");
    ASSERT_TRUE(p);
    std::vector<std::string> reports;
    ASSERT_TRUE(test::wait_until([&] { p->poll(10ms, reports); return !reports.empty(); }, 3s));
    pid = p->pid();
    child = std::stoi(reports[0]);
    (void)p.release();  // the watcher goes away without stopping it
  }).join();
  ASSERT_GT(pid, 0);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(pid); }, 3s)) << "the worker outlived its node";
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(child); }, 3s)) << "the worker's child outlived its node";
}

TEST_P(WorkerProcess, SignalsToTheGroupReachTheWorkerNotItsKeeper) {
  // SIGTERM ends the worker by its default action; the status is the worker's.
  auto p = sh("sleep 30");
  std::vector<std::string> reports;
  EXPECT_NE(p->group(), p->pid());
  EXPECT_EQ(::getpgid(p->pid()), p->group());
  p->terminate();
  auto e = p->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->exited);
  EXPECT_EQ(e->code, SIGTERM) << e->describe();
  // An exit code comes through as it is.
  auto q = sh("exit 7");
  e = q->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_TRUE(e->exited);
  EXPECT_EQ(e->code, 7);
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(q->group()); }, 2s)) << "the keeper outlived its worker";
}

TEST_P(WorkerProcess, UserSignalsToItsOwnGroupDoNotEndIt) {
  // A trainable may signal its own process group; only the worker acts on it.
  auto p = sh("trap 'echo usr1 >&3' USR1; kill -USR1 0; sleep 0.2; kill -USR2 0; echo alive >&3");
  std::vector<std::string> reports;
  auto e = p->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->exited) << "SIGUSR2's default action ends the shell: " << e->describe();
  EXPECT_EQ(e->code, SIGUSR2);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports[0], "usr1");
}

TEST_P(WorkerProcess, ItsKeeperHoldsNothingOfTheNodeOpen) {
  // Keepers do not exec: one that kept the node's descriptors would hold other
  // trials' pipes (their ends never seen) and the node's sockets open.
  int mine = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(mine, 0);
  auto p = sh("sleep 30");
  std::vector<std::string> held;
  for (auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(p->group()) + "/fd"))
    held.push_back(std::filesystem::read_symlink(e.path()).string());
  ::close(mine);
  EXPECT_LE(held.size(), 5u) << "its pipes to the worker and the node only";
  for (auto& h : held) EXPECT_NE(h.find("pipe:"), std::string::npos) << h;
  p->kill();
}

TEST_P(WorkerProcess, DestroyingAWatcherKillsAndReapsTheGroup) {
  int pid = 0;
  {
    auto p = sh("sleep 30");
    pid = p->pid();
  }
  // The keeper is reaped at once; the worker, killed with it, is gone a moment later.
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(pid); }, 3s));
}

// What a node killed with SIGKILL leaves when its workers came from its spawner: the
// spawner sees its channel close and ends; the keepers then kill their groups.
TEST(Spawner, WorkersDieWithTheProcessThatMadeTheSpawnerChildrenIncluded) {
  int pids[2];
  ASSERT_EQ(::pipe(pids), 0);
  pid_t node = ::fork();
  ASSERT_GE(node, 0);
  if (node == 0) {  // the "node": a spawner, a worker with a child, then SIGKILL
    ::close(pids[0]);
    auto s = spawner::start();
    if (!s) ::_exit(2);
    auto p = worker_process::start({{"/bin/sh", "-c", "sleep 60 & echo $! >&3; wait"}, {{"PATH", "/usr/bin:/bin"}}, ""}, s->get());
    if (!p) ::_exit(3);
    std::vector<std::string> reports;
    while (reports.empty()) (*p)->poll(10ms, reports);
    int32_t both[2] = {(*p)->pid(), std::stoi(reports[0])};
    (void)!::write(pids[1], both, sizeof both);
    ::raise(SIGKILL);
  }
  ::close(pids[1]);
  int32_t both[2] = {0, 0};
  ASSERT_EQ(::read(pids[0], both, sizeof both), static_cast<ssize_t>(sizeof both));
  ::close(pids[0]);
  int st = 0;
  ASSERT_EQ(::waitpid(node, &st, 0), node);
  EXPECT_TRUE(WIFSIGNALED(st));
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(both[0]); }, 5s)) << "the worker outlived its node";
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(both[1]); }, 5s)) << "the worker's child outlived its node";
}

TEST(Spawner, AGoneSpawnerIsReplacedByAForkOfThisProcess) {
  auto s = spawner::start();
  ASSERT_TRUE(s) << s.error().message();
  auto first = sh_via(s->get(), "exit 4");
  std::vector<std::string> reports;
  auto e = first->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->describe(), "exit code 4");
  ASSERT_EQ(::kill((*s)->pid(), SIGKILL), 0);
  auto second = sh_via(s->get(), "echo still >&3; exit 5");
  ASSERT_TRUE(second);
  e = second->wait(3s, reports);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->describe(), "exit code 5");
  EXPECT_EQ(reports, (std::vector<std::string>{"still"}));
}

TEST(Spawner, ItIgnoresSignalsToItsParentsGroupAndHoldsOnlyItsChannel) {
  auto s = spawner::start();
  ASSERT_TRUE(s) << s.error().message();
  int pid = (*s)->pid();
  std::vector<std::string> reports;
  auto first = sh_via(s->get(), "exit 0");  // answered: it has set itself up
  ASSERT_TRUE(first->wait(3s, reports));
  std::vector<std::string> held;
  for (auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    held.push_back(std::filesystem::read_symlink(e.path()).string());
  EXPECT_EQ(held.size(), 4u) << "standard streams on /dev/null and its channel";
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGINT);
  auto p = sh_via(s->get(), "exit 0");
  auto e = p->wait(3s, reports);
  ASSERT_TRUE(e && e->ok());
  EXPECT_FALSE(test::process_gone(pid));
}

// Run as an unprivileged account (root only): its user, group and groups are the
// account's, it cannot write what root owns, and it still dies with its keeper (a change
// of credentials clears the death signal, so the order matters).
TEST_P(WorkerProcess, RunsAsItsAccountAndStillDiesWithItsKeeper) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to switch accounts";
  auto nobody = find_account("nobody");
  ASSERT_TRUE(nobody) << nobody.error().message();
  process_spec spec{{"/bin/sh", "-c", "id -u >&3; id -g >&3; touch /root/.libtune-probe 2>/dev/null && echo wrote >&3; "
                                      "echo end >&3; sleep 60"},
                    {{"PATH", "/usr/bin:/bin"}},
                    ""};
  spec.run_as = {nobody->uid, nobody->gid, {nobody->groups.begin(), nobody->groups.end()}};
  auto p = start(spec);
  ASSERT_TRUE(p) << p.error().message();
  std::vector<std::string> reports;
  ASSERT_TRUE(test::wait_until([&] { (*p)->poll(10ms, reports); return reports.size() >= 3; }, 5s));
  EXPECT_EQ(reports[0], std::to_string(nobody->uid));
  EXPECT_EQ(reports[1], std::to_string(nobody->gid));
  EXPECT_EQ(reports[2], "end") << "it wrote into /root";
  int worker = (*p)->pid();
  ::kill((*p)->group(), SIGKILL);  // the keeper only (its pid), not its group
  EXPECT_TRUE(test::wait_until([&] { return test::process_gone(worker); }, 3s)) << "the worker outlived its keeper";
  std::filesystem::remove("/root/.libtune-probe");
}

TEST_P(WorkerProcess, AnAccountItCannotSwitchToIsAStartError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may switch to any account";
  process_spec spec{{"/bin/true"}, {}, ""};
  spec.run_as = {0, 0, {}};
  auto p = start(spec);
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message().find("/bin/true"), std::string::npos) << p.error().message();
}

}  // namespace
}  // namespace tune
