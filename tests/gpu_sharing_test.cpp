// One card, one owner, whoever started the other program (docs/gpu-sharing.md), end to
// end through `tune run` on a simulated view of the cards (TUNE_SIMULATED_GPUS: a folder
// that plays the driver, read through the same interface as NVML): a program that is no
// trial of the cluster's keeps a whole card and leaves room for a share only beside it,
// the waiting trial says which card and who, and starts once the program ends; two
// clusters started by two `tune run` on one machine never hold one card at once; `tune
// run` joins the cluster running on this machine; an embedded run behaves like running
// the script yourself (your account and HOME, your folder with --in-place).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "harness.hpp"
#include "tune/host/simulated_gpus.hpp"
#include "tune/tuner/store.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
constexpr int64_t GiB = int64_t{1} << 30;

std::string tune_bin() { return built_or_moved("TUNE_BINARY", TUNE_BINARY); }
std::string py() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
double now_s() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// A process that is not any cluster's (someone's notebook): `sleep`, holding `bytes` on
// `card` of the simulated view for as long as it lives.
struct other_program {
  pid_t pid = -1;
  other_program(const std::string& view, const std::string& card, int64_t bytes) {
    pid = ::fork();
    if (pid == 0) {
      ::execlp("sleep", "sleep", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    EXPECT_TRUE(simulated_gpus::hold(view, pid, {{card, bytes}}));
  }
  void end() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  bool alive() const { return pid > 0 && ::kill(pid, 0) == 0; }
  ~other_program() { end(); }
};

class GpuSharingTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::string view, shared, project, record;

  void SetUp() override {
    view = files.dir() + "/gpus";
    shared = files.dir() + "/shared";  // this test's machine-wide folder (card claims, heads)
    project = files.dir() + "/project";
    record = files.dir() + "/record.jsonl";
    fs::create_directories(view + "/procs");
    fs::permissions(view + "/procs", fs::perms::all | fs::perms::sticky_bit);  // trials of any account write there
    fs::permissions(files.dir(), fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
    fs::create_directories(project);
    fs::copy_file(std::string{PROGRAMS_DIR} + "/card_user.py", project + "/card_user.py");
    std::ofstream{record};
    fs::permissions(record, fs::perms::all & ~(fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec));
  }

  void cards(int n, int64_t memory = 16 * GiB) {
    nlohmann::json list = nlohmann::json::array();
    for (int i = 0; i < n; ++i) list.push_back({{"uuid", "GPU-sim-" + std::to_string(i)}, {"memory", memory}});
    std::ofstream(view + "/cards.json") << list.dump();
  }

  std::map<std::string, std::string> env(std::map<std::string, std::string> more = {}) {
    more.emplace("TUNE_SIMULATED_GPUS", view);
    more.emplace("TUNE_SHARED_DIR", shared);
    more.emplace("TUNE_TOKEN_FILE", files.token_file());
    more.emplace("TUNE_RUNTIME_DIR", files.dir());
    more.emplace("CUDA_VISIBLE_DEVICES", "");
    return more;
  }

  // tune run of card_user.py on the cluster it finds (an embedded one of the simulated
  // cards when none runs here).
  run_result tune_run(const std::string& name, std::vector<std::string> flags, std::vector<std::string> script_args = {},
                      std::chrono::seconds timeout = 90s, std::map<std::string, std::string> extra_env = {}) {
    std::vector<std::string> argv{tune_bin(), "run", "--metric", "score", "--mode", "max", "--progress", "lines",
                                  "--name", name, "--experiment-dir", files.dir() + "/" + name};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(), {"--", py(), "card_user.py", "--record", record});
    argv.insert(argv.end(), script_args.begin(), script_args.end());
    auto r = run(argv, env(extra_env), timeout, project);
    if (std::getenv("GPU_SHARING_TEST_DEBUG")) std::cerr << r.err;
    return r;
  }

  static nlohmann::json summary(const run_result& r) { return last_json_line(r.out); }
};

// A whole card is never given while another program holds it; a share only where it
// fits beside; the wait names the card and the holder; the card is free again within
// about a second of the program's end.
TEST_F(GpuSharingTest, AnotherProgramKeepsAWholeCardUntilItEndsAndTheTrialSaysWhy) {
  cards(1);
  other_program notebook(view, "GPU-sim-0", 10 * GiB);
  // A quarter (4 GiB) fits beside 10 GiB and its margin (1 GiB) on 16: it starts at once.
  auto quarter = tune_run("quarter", {"--gpus-per-trial", "0.25", "--samples", "1"});
  ASSERT_EQ(quarter.rc, 0) << quarter.err;
  EXPECT_FALSE(contains(quarter.err, "waits for its placement")) << quarter.err;
  // A whole card waits, saying why, until the program ends.
  int holder = notebook.pid;
  std::atomic<double> ended{0};
  auto killer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(4s);
    ended = now_s();
    notebook.end();
  });
  auto whole = tune_run("whole", {"--gpus-per-trial", "1", "--samples", "1"});
  killer.get();
  ASSERT_EQ(whole.rc, 0) << whole.err;
  EXPECT_TRUE(contains(whole.err, "waits for its placement: waiting: GPU 0 (GPU-sim-0) is in use by another program: pid " +
                                       std::to_string(holder) + " sleep (user "))
      << whole.err;
  EXPECT_TRUE(contains(whole.err, "), 10 GiB")) << whole.err;
  auto runs = json_lines(record);
  ASSERT_EQ(runs.size(), 2u);
  double started = runs[1]["start"].get<double>();
  EXPECT_GT(started, ended.load()) << "the trial started while the other program held the card";
  EXPECT_LT(started - ended.load(), 3.0) << "the card was not free again soon after the program ended";
  // The wait is an event in the store.
  auto store = experiment_store::open(files.dir() + "/whole");
  ASSERT_TRUE(store);
  auto events = (*store)->events();
  ASSERT_TRUE(events);
  bool waited = false;
  for (auto& e : *events) waited = waited || (e.kind == "waiting" && contains(e.body.dump(), "in use by another program"));
  EXPECT_TRUE(waited);
}

TEST_F(GpuSharingTest, AShareWaitsWhereItsMemoryDoesNotFitBesideAnotherProgram) {
  cards(1);
  other_program job(view, "GPU-sim-0", 10 * GiB);
  auto killer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(3s);
    job.end();
  });
  // Half a card (8 GiB) does not fit beside 10 GiB and its margin on 16.
  auto half = tune_run("half", {"--gpus-per-trial", "0.5", "--samples", "1"});
  killer.get();
  ASSERT_EQ(half.rc, 0) << half.err;
  EXPECT_TRUE(contains(half.err, "waiting: GPU 0 (GPU-sim-0) is in use by another program")) << half.err;
}

// Two people, each with a `tune run` of their own on one machine: one claims a card
// before its trial's process even shows there, and the other keeps clear of it.
TEST_F(GpuSharingTest, TwoClustersOnOneMachineNeverHoldOneCardAtOnce) {
  cards(2);
  std::atomic<bool> done{false};
  std::atomic<int> most{0}, samples{0};
  std::string seen_together;
  // Independent of libtune: who holds each card, from the simulated driver's files.
  auto sampler = std::async(std::launch::async, [&] {
    while (!done) {
      std::map<std::string, std::set<int>> holders;
      std::error_code ec;
      for (auto it = fs::directory_iterator(view + "/procs", ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        auto name = it->path().filename().string();
        if (name.find('.') != std::string::npos) continue;
        int pid = std::atoi(name.c_str());
        std::ifstream stat("/proc/" + name + "/stat");
        std::string text;
        std::getline(stat, text);
        auto close = text.rfind(')');
        if (pid <= 0 || close == std::string::npos || text.substr(close + 2, 1) == "Z") continue;  // ended
        std::ifstream f(it->path());
        auto j = nlohmann::json::parse(f, nullptr, false);
        if (j.is_object())
          for (auto& [card, bytes] : j.items()) holders[card].insert(pid);
      }
      for (auto& [card, pids] : holders) {
        if (static_cast<int>(pids.size()) > most) most = static_cast<int>(pids.size());
        if (pids.size() > 1 && seen_together.empty()) seen_together = card;
      }
      ++samples;
      std::this_thread::sleep_for(5ms);
    }
  });
  auto a = std::async(std::launch::async, [&] {
    return tune_run("ann", {"--gpus-per-trial", "1", "--samples", "6"}, {"--seconds", "0.4"});
  });
  std::this_thread::sleep_for(300ms);
  auto b = std::async(std::launch::async, [&] {
    return tune_run("bob", {"--gpus-per-trial", "1", "--samples", "6"}, {"--seconds", "0.4"});
  });
  auto ra = a.get(), rb = b.get();
  done = true;
  sampler.get();
  ASSERT_EQ(ra.rc, 0) << ra.err;
  ASSERT_EQ(rb.rc, 0) << rb.err;
  EXPECT_EQ(summary(ra).value("errors", -1), 0);
  EXPECT_EQ(summary(rb).value("errors", -1), 0);
  EXPECT_GT(samples.load(), 50);
  EXPECT_LE(most.load(), 1) << "two trials on " << seen_together << " at once";
  // And from the trials' own records: on each card, no two runs overlap in time.
  auto runs = json_lines(record);
  ASSERT_EQ(runs.size(), 12u);
  std::map<std::string, std::vector<std::pair<double, double>>> by_card;
  for (auto& r : runs)
    for (auto& c : r["cards"]) by_card[c.get<std::string>()].push_back({r["start"].get<double>(), r["end"].get<double>()});
  for (auto& [card, spans] : by_card) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first) << "on " << card;
  }
  EXPECT_EQ(by_card.size(), 2u);  // both cards were used
}

// A program that appears on a trial's card after it started is noted in the trial's
// record, and left alone.
TEST_F(GpuSharingTest, AProgramThatAppearsBesideARunningTrialIsNotedAndLeftAlone) {
  cards(1);
  std::unique_ptr<other_program> late;
  auto starter = std::async(std::launch::async, [&] {
    // Once the trial holds the card (its procs file is there), someone starts a job there.
    wait_until([&] { return !fs::is_empty(view + "/procs"); }, 30s);
    late = std::make_unique<other_program>(view, "GPU-sim-0", 3 * GiB);
  });
  auto r = tune_run("beside", {"--gpus-per-trial", "0.5", "--samples", "1"}, {"--seconds", "3"});
  starter.get();
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(late);
  EXPECT_TRUE(late->alive()) << "another program was killed: it is not ours";
  EXPECT_TRUE(contains(r.err, "another program appeared on its GPU 0 (GPU-sim-0): pid " + std::to_string(late->pid)))
      << r.err;
  auto store = experiment_store::open(files.dir() + "/beside");
  ASSERT_TRUE(store);
  auto trials = (*store)->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 1u);
  EXPECT_EQ((*trials)[0].state, trial_state::terminated);
  EXPECT_TRUE(contains((*trials)[0].info.dump(), "another program appeared")) << (*trials)[0].info.dump();
  auto events = (*store)->events((*trials)[0].id);
  ASSERT_TRUE(events);
  bool noted = false;
  for (auto& e : *events) noted = noted || e.kind == "foreign_process";
  EXPECT_TRUE(noted);
}

// Without --address, `tune run` joins the cluster running on this machine and says so;
// --local does not; without a token for it, the error says what to do.
TEST_F(GpuSharingTest, TuneRunJoinsTheClusterRunningOnThisMachine) {
  cards(1);
  auto port = free_port();
  auto head = files.tune({"start", "--head", "--port", std::to_string(port), "--no-dashboard"}, {}, "", env());
  ASSERT_EQ(head.rc, 0) << head.err;
  auto node = files.tune({"start", "--address", "127.0.0.1:" + std::to_string(port)}, {}, "", env());
  ASSERT_EQ(node.rc, 0) << node.err;
  auto joined = tune_run("joined", {"--gpus-per-trial", "1", "--samples", "2"});
  EXPECT_EQ(joined.rc, 0) << joined.err;
  EXPECT_TRUE(contains(joined.err, "on the cluster at 127.0.0.1:" + std::to_string(port) + " (found running on this machine"))
      << joined.err;
  auto local = tune_run("local", {"--local", "--gpus-per-trial", "1", "--samples", "1"});
  EXPECT_EQ(local.rc, 0) << local.err;
  EXPECT_TRUE(contains(local.err, "on an embedded cluster")) << local.err;
  // The cluster's node and the embedded one share the card: never both at once.
  auto runs = json_lines(record);
  ASSERT_EQ(runs.size(), 3u);
  auto no_token = tune_run("no-token", {"--samples", "1"}, {}, 30s, {{"TUNE_TOKEN_FILE", files.dir() + "/missing-token"}});
  EXPECT_EQ(no_token.rc, 1) << no_token.err;
  EXPECT_TRUE(contains(no_token.err, "a cluster runs on this machine (head 127.0.0.1:" + std::to_string(port)))
      << no_token.err;
  EXPECT_TRUE(contains(no_token.err, "--local")) << no_token.err;
  EXPECT_TRUE(contains(no_token.err, "tune user add")) << no_token.err;
  auto stop = files.tune({"stop"}, {}, "", env());
  EXPECT_EQ(stop.rc, 0) << stop.err;
  // Stopped: nothing runs here any more, and tune run makes a cluster of its own.
  auto alone = tune_run("alone", {"--samples", "1"});
  EXPECT_EQ(alone.rc, 0) << alone.err;
  EXPECT_TRUE(contains(alone.err, "on an embedded cluster")) << alone.err;
}

// An embedded run is running the script yourself: root's trials run as root with root's
// HOME (a ~/data file is read); --trial-user nobody still runs them as nobody.
TEST_F(GpuSharingTest, AnEmbeddedRunsTrialsRunAsTheUserWhoStartedIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  cards(1);
  auto home = files.dir() + "/home";
  fs::create_directories(home + "/data");
  std::ofstream(home + "/data/x.txt") << "my data\n";
  auto mine = tune_run("mine", {"--samples", "1"}, {"--data", "~/data/x.txt"}, 90s, {{"HOME", home}});
  ASSERT_EQ(mine.rc, 0) << mine.err;
  auto runs = json_lines(record);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0]["uid"], 0);
  EXPECT_EQ(runs[0]["home"], home);
  EXPECT_EQ(runs[0]["data"], "my data");
  auto nobody = tune_run("nobody", {"--samples", "1", "--trial-user", "nobody"}, {}, 90s, {{"HOME", home}});
  ASSERT_EQ(nobody.rc, 0) << nobody.err;
  runs = json_lines(record);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1]["uid"], 65534);
  EXPECT_NE(runs[1]["home"], home);
}

// --in-place: the trial runs in the folder itself, so ../data is where it is by hand.
TEST_F(GpuSharingTest, InPlaceTrialsReadDataOutsideTheirFolder) {
  cards(1);
  fs::create_directories(files.dir() + "/data");
  std::ofstream(files.dir() + "/data/x.txt") << "beside the project\n";
  auto in_place = tune_run("in-place", {"--samples", "2", "--in-place"}, {"--data", "../data/x.txt"});
  ASSERT_EQ(in_place.rc, 0) << in_place.err;
  auto runs = json_lines(record);
  ASSERT_EQ(runs.size(), 2u);
  for (auto& r : runs) {
    EXPECT_EQ(r["data"], "beside the project");
    EXPECT_EQ(r["cwd"], fs::canonical(project).string());
  }
  // In a copy (the default) ../data is not there: the trial fails, and says why.
  auto copied = tune_run("copied", {"--samples", "1"}, {"--data", "../data/x.txt"});
  EXPECT_EQ(copied.rc, 1) << copied.err;
  EXPECT_TRUE(contains(copied.err, "FileNotFoundError")) << copied.err;
  EXPECT_TRUE(contains(copied.err, "--in-place")) << copied.err;
}

}  // namespace
}  // namespace tune::test
