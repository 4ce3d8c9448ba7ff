// The public API end to end: tune::init's flags, trainables in this very program run
// as trial processes, experiments on an embedded cluster and on a cluster of processes
// (head and node daemons with logical GPUs), the store matching what was returned.
#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <cstdlib>
#include <thread>

#include "harness.hpp"
#include "tune/tune.hpp"

namespace {

using namespace std::chrono_literals;

// A learning curve: value = x * (1 - 0.5^iteration); `fail_at` > 0 throws there.
void curve(tune::trial_context& ctx) {
  double x = ctx.number("x").value();
  int64_t n = ctx.integer_or("iterations", 6).value();
  int64_t fail_at = ctx.integer_or("fail_at", 0).value();
  int64_t sleep_ms = ctx.integer_or("sleep_ms", 10).value();
  const char* threads = std::getenv("OMP_NUM_THREADS");
  double child = 0;
  if (ctx.integer_or("leave_child", 0).value()) {  // a helper that leaves its process group
    pid_t p = ::fork();
    if (p == 0) {
      ::setsid();
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    child = static_cast<double>(p);
  }
  for (int64_t i = 1; i <= n; ++i) {
    if (i == fail_at) throw std::runtime_error("the curve broke at " + std::to_string(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (!ctx.report({{"score", x * (1 - std::pow(0.5, static_cast<double>(i)))},
                     {"threads", threads ? std::atof(threads) : -1},
                     {"warm", std::getenv("TUNE_WARM_START") ? 1.0 : 0.0},
                     {"pid", static_cast<double>(::getpid())},
                     {"own_dir", std::filesystem::current_path() == ctx.trial_dir() ? 1.0 : 0.0},
                     {"child", child}}) ||
        tune::trial_context::should_stop())
      return;
  }
}
TUNE_TRAINABLE(curve);

// Counts to `iterations` (30 ms each) from where its checkpoint says, checkpointing every
// 5: a restarted trial's iterations go on from its checkpoint.
void counter(tune::trial_context& ctx) {
  int64_t n = ctx.integer_or("iterations", 60).value();
  int64_t i = 0;
  if (!ctx.restore_dir().empty()) {
    std::ifstream in(ctx.restore_dir() + "/state");
    in >> i;
  }
  while (i < n) {
    std::this_thread::sleep_for(30ms);
    ++i;
    if (!ctx.report({{"score", ctx.number("x").value() * static_cast<double>(i)}}, i)) return;
    if (i % 5 == 0) {
      auto dir = ctx.checkpoint_dir(i);
      if (!dir) throw std::runtime_error(dir.error().message());
      std::ofstream(*dir + "/state") << i;
      (void)ctx.report_checkpoint(i);
    }
    if (tune::trial_context::should_stop()) return;
  }
}
TUNE_TRAINABLE(counter);

// The tuning program of the resume test (`--resume-driver DIR`): 6 trials of `counter`,
// 3 at once, in DIR, on the cluster at --address.
int resume_driver(int argc, char** argv) {
  auto c = tune::init(argc, argv);
  if (!c) {
    std::cerr << c.error().message() << "\n";
    return 2;
  }
  tune::tune_config cfg;
  cfg.metric = "score";
  cfg.num_samples = 6;
  cfg.max_concurrent_trials = 3;
  cfg.seed = 9;
  const char* failures = std::getenv("DRIVER_MAX_FAILURES");
  cfg.max_failures = failures ? std::atoi(failures) : 0;
  cfg.progress = tune::progress_style::none;
  cfg.experiment_dir = argv[2];
  cfg.resources_per_trial = tune::resources{{"cpu", 0.5}, {"gpu", 1}};
  const char* iterations = std::getenv("DRIVER_ITERATIONS");
  int64_t n = iterations ? std::atoll(iterations) : 60;
  tune::tuner t{*c, "counter", tune::search_space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", n}}, cfg};
  auto r = t.fit();
  if (!r) {
    std::cerr << r.error().message() << "\n";
    return 1;
  }
  return 0;
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> out;
  for (auto& a : args) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

TEST(TuneInit, TakesItsOwnFlagsAndLeavesTheRest) {
  // One GPU: logical on a machine without any, this machine's first otherwise.
  std::vector<std::string> args{"prog", "--epochs", "3", "--num-cpus=2", "--num-gpus", "1", "--model", "cnn"};
  auto argv = argv_of(args);
  int argc = static_cast<int>(args.size());
  auto c = tune::init(argc, argv.data());
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(argc, 5);
  EXPECT_STREQ(argv[1], "--epochs");
  EXPECT_STREQ(argv[2], "3");
  EXPECT_STREQ(argv[3], "--model");
  EXPECT_STREQ(argv[4], "cnn");
  EXPECT_EQ(argv[5], nullptr);
  EXPECT_TRUE(c->embedded());
  auto cap = c->capacity();
  ASSERT_TRUE(cap) << cap.error().message();
  EXPECT_EQ(cap->nodes, 1);
  EXPECT_EQ(cap->cpus, 2);
  EXPECT_EQ(cap->gpus, 1);
}

TEST(TuneInit, BadFlagsAreErrorsThatSayWhatIsWrong) {
  auto error_of = [](std::vector<std::string> args) {
    auto argv = argv_of(args);
    int argc = static_cast<int>(args.size());
    auto c = tune::init(argc, argv.data());
    return c ? std::string{} : c.error().message();
  };
  EXPECT_NE(error_of({"p", "--address"}).find("--address needs a value"), std::string::npos);
  EXPECT_NE(error_of({"p", "--num-cpus", "many"}).find("not a number"), std::string::npos);
  EXPECT_NE(error_of({"p", "--num-gpus", "1.5"}).find("whole number"), std::string::npos);
  EXPECT_NE(error_of({"p", "--address", "127.0.0.1:1", "--num-gpus", "2"}).find("embedded"), std::string::npos);
  EXPECT_NE(error_of({"p", "--address", "nocolon"}).find("--address"), std::string::npos);
  EXPECT_NE(error_of({"p", "--dashboard-port", "99999"}).find("give a port"), std::string::npos);
  EXPECT_NE(error_of({"p", "--address", "127.0.0.1:1", "--dashboard-port", "0"}).find("tune dashboard"), std::string::npos);
  auto missing = error_of({"p", "--address", "127.0.0.1:1", "--token-file", "/nonexistent/token"});
  EXPECT_NE(missing.find("/nonexistent/token"), std::string::npos) << missing;
}

// The embedded cluster's dashboard: on loopback, signed in by the address it prints.
TEST(TuneInit, TheEmbeddedClusterServesItsDashboardWhenAsked) {
  std::vector<std::string> args{"prog", "--num-cpus", "1", "--dashboard-port=0"};
  auto argv = argv_of(args);
  int argc = static_cast<int>(args.size());
  auto c = tune::init(argc, argv.data());
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(argc, 1);
  auto url = c->dashboard_url();
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  EXPECT_NE(url.find("/?token="), std::string::npos);
  auto status = nlohmann::json::parse(*c->status_json());
  EXPECT_EQ(url.substr(0, url.find('?')), status["head"]["dashboard"].get<std::string>());
  // Without the flag: none.
  std::vector<std::string> plain{"prog", "--num-cpus", "1"};
  auto argv2 = argv_of(plain);
  int argc2 = static_cast<int>(plain.size());
  auto c2 = tune::init(argc2, argv2.data());
  ASSERT_TRUE(c2) << c2.error().message();
  EXPECT_EQ(c2->dashboard_url(), "");
}

class TuneEmbedded : public ::testing::Test {
 protected:
  tune::test::cluster_files files;  // a scratch folder
  tune::cluster_options options(double cpus) {
    tune::cluster_options o;
    o.num_cpus = cpus;
    o.work_dir = files.dir() + "/work";
    return o;
  }
  tune::tune_config config(int samples) {
    tune::tune_config cfg;
    cfg.metric = "score";
    cfg.num_samples = samples;
    cfg.seed = 3;
    cfg.progress = tune::progress_style::none;
    cfg.experiment_dir = files.dir() + "/exp";
    return cfg;
  }
};

TEST_F(TuneEmbedded, AshaRunsTrialsAsProcessesAndTheStoreHoldsWhatWasReported) {
  auto c = tune::cluster::start(options(4));
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(9);
  cfg.resources_per_trial = tune::resources{{"cpu", 2}};
  cfg.scheduler = tune::asha{.max_t = 6, .grace_period = 1, .reduction_factor = 3};
  tune::search_space space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 6}};
  tune::tuner t{*c, "curve", space, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 9u);
  int64_t reported = 0, stopped_early = 0;
  for (auto& tr : *trials) {
    EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
    auto h = r->history(tr.id);
    ASSERT_TRUE(h);
    ASSERT_FALSE(h->empty()) << tr.id;
    for (size_t i = 0; i < h->size(); ++i) {
      EXPECT_EQ((*h)[i].iteration, static_cast<int64_t>(i) + 1);  // each once, in order
      EXPECT_EQ((*h)[i].metrics["threads"], 2) << "a trial's thread pools are its CPUs";
      // The value stored is the value reported, to the last bit.
      double x = tr.config["x"].get<double>();
      ASSERT_TRUE((*h)[i].metrics["score"].is_number_float()) << (*h)[i].metrics.dump();
      EXPECT_EQ((*h)[i].metrics["score"].get<double>(), x * (1 - std::pow(0.5, static_cast<double>(i + 1))));
    }
    reported += static_cast<int64_t>(h->size());
    stopped_early += h->back().iteration < 6;
    EXPECT_TRUE(tr.info.contains("pid")) << tr.info.dump();
  }
  EXPECT_EQ(reported, r->results);
  EXPECT_GT(stopped_early, 0) << "ASHA stopped nobody";
  // What the scheduler decided is in the store: each stop with the iteration it was
  // decided at (results already on their way after it are kept too).
  auto events = r->store().events();
  ASSERT_TRUE(events);
  int64_t early = 0;
  for (auto& e : *events) {
    if (e.kind != "stop") continue;
    auto why = e.body.value("reason", "");
    auto at = why.find("stopped by asha at iteration ");
    ASSERT_NE(at, std::string::npos) << why;
    int64_t it = std::stoll(why.substr(at + 29));
    EXPECT_LE(it, r->history(e.trial)->back().iteration) << why;
    early += it < 6;
  }
  EXPECT_GT(early, 0) << "ASHA stopped nobody early";
  EXPECT_LT(early, 9);
  EXPECT_GE(early, stopped_early);
  EXPECT_LT(stopped_early, 9);
  // The best trial is the one with the largest x among those that ran all 6.
  auto best = r->best();
  ASSERT_TRUE(best && *best);
  double best_x = 0;
  for (auto& tr : *trials)
    if (auto h = r->history(tr.id); h->back().iteration == 6) best_x = std::max(best_x, tr.config["x"].get<double>());
  EXPECT_EQ((*best)->config["x"].get<double>(), best_x);
  EXPECT_EQ((*best)->iteration, 6);
  // The same numbers from the directory alone, after the run.
  auto again = tune::result_grid::open(r->dir(), "score", tune::mode::max);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->results, r->results);
  auto csv = again->csv();
  ASSERT_TRUE(csv);
  EXPECT_EQ(std::count(csv->begin(), csv->end(), '\n'), r->results + 1);
}

// A C++ trainable's worker is a fork of its program started once as the node's spawner
// for it (tune/trial/program_spawners.hpp): every trial says so, each is its own
// process with its own configuration, and the results are those of an exec'd worker.
TEST_F(TuneEmbedded, TrialsOfThisProgramStartWarmAsForksOfItsSpawner) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(6);
  cfg.resources_per_trial = tune::resources{{"cpu", 1}};
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 3}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 6u);
  std::set<double> pids;
  for (auto& tr : *trials) {
    EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
    auto h = r->history(tr.id);
    ASSERT_TRUE(h);
    ASSERT_EQ(h->size(), 3u);
    auto& m = h->back().metrics;
    EXPECT_EQ(m["warm"], 1.0) << tr.id << " was exec'd";
    EXPECT_EQ(m["threads"], 1.0) << "its own environment, not the spawner's";
    double x = tr.config["x"];
    EXPECT_DOUBLE_EQ(m["score"].get<double>(), x * 0.875) << "its own configuration";
    pids.insert(m["pid"].get<double>());
  }
  EXPECT_EQ(pids.size(), 6u) << "a process per trial";
}

// reuse_workers (tune/trial/reuse.hpp): a worker whose trial ended well (done, or
// stopped by ASHA) runs the next trial placed on its slot: fewer processes than trials,
// each trial with its own configuration, folder and environment, nobody stopped by a
// stop meant for the trial before it, and no worker left once the linger is over.
TEST_F(TuneEmbedded, ReusedWorkersRunTheNextTrialsWithNothingOfTheLastOne) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(12);
  cfg.resources_per_trial = tune::resources{{"cpu", 1}};
  cfg.scheduler = tune::asha{.max_t = 6, .grace_period = 1, .reduction_factor = 3};
  cfg.reuse_workers = true;
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 6}, {"sleep_ms", 20}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 12u);
  std::set<double> pids;
  std::set<std::string> stopped;
  auto events = r->store().events();
  ASSERT_TRUE(events);
  int reused = 0, kept = 0;
  for (auto& e : *events) {
    if (e.kind == "stop") stopped.insert(e.trial);
    if (e.kind != "ended") continue;
    reused += e.body.value("worker_reused", false);
    kept += e.body.value("worker_kept", false);
  }
  for (auto& tr : *trials) {
    EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
    auto h = r->history(tr.id);
    ASSERT_TRUE(h);
    ASSERT_FALSE(h->empty()) << tr.id;
    double x = tr.config["x"];
    for (size_t i = 0; i < h->size(); ++i) {
      auto& m = (*h)[i].metrics;
      EXPECT_EQ((*h)[i].iteration, static_cast<int64_t>(i) + 1) << tr.id;
      EXPECT_EQ(m["score"].get<double>(), x * (1 - std::pow(0.5, static_cast<double>(i + 1)))) << "its own configuration";
      EXPECT_EQ(m["own_dir"], 1.0) << tr.id << " ran in another trial's folder";
      EXPECT_EQ(m["threads"], 1.0);
    }
    if (h->size() < 6) {
      EXPECT_TRUE(stopped.count(tr.id)) << tr.id << " ended early without a stop of its own";
    }
    pids.insert(h->back().metrics["pid"].get<double>());
  }
  std::cerr << "12 trials in " << pids.size() << " workers (" << reused << " reused, " << kept << " kept)\n";
  EXPECT_LT(pids.size(), 12u) << "no worker ran a second trial";
  EXPECT_GT(reused, 0);
  EXPECT_GT(kept, 0);
  EXPECT_EQ(reused, 12 - static_cast<int>(pids.size()));
  // The last ones wait for a next trial that does not come, then end.
  for (double pid : pids)
    EXPECT_TRUE(tune::test::wait_until([&] { return tune::test::process_gone(static_cast<int>(pid)); }, 6s))
        << "worker " << pid << " outlived its linger";
}

// A worker whose cgroup holds anything else at its trial's end (a helper it started)
// is not kept: its trial ends as any other, and what it left is killed.
TEST_F(TuneEmbedded, AWorkerThatLeftAProcessBehindIsNotReused) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(4);
  cfg.resources_per_trial = tune::resources{{"cpu", 1}};
  cfg.reuse_workers = true;
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 2}, {"leave_child", 1}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto events = r->store().events();
  ASSERT_TRUE(events);
  bool contained = false;
  for (auto& e : *events)
    if (e.kind == "ended") {
      EXPECT_FALSE(e.body.value("worker_kept", false)) << e.body.dump();
      EXPECT_FALSE(e.body.value("worker_reused", false)) << e.body.dump();
      contained = contained || e.body.value("containment", "") == "cgroup";
    }
  if (!contained) GTEST_SKIP() << "no cgroups here: workers are not reused without them";
  std::set<double> pids;
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  for (auto& tr : *trials) {
    EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
    auto h = r->history(tr.id);
    ASSERT_TRUE(h && !h->empty());
    auto& m = h->back().metrics;
    pids.insert(m["pid"].get<double>());
    int child = static_cast<int>(m["child"].get<double>());
    ASSERT_GT(child, 0);
    EXPECT_TRUE(tune::test::wait_until([&] { return tune::test::process_gone(child); }, 3s)) << "its helper outlived it";
  }
  EXPECT_EQ(pids.size(), 4u) << "a worker with a helper beside it ran another trial";
}

TEST_F(TuneEmbedded, AFailingTrialKeepsItsErrorAndTheOthersRunOn) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  tune::search_space space{{"x", tune::grid_search({0.5, 0.9})}, {"fail_at", tune::grid_search({0, 3})}};
  tune::tuner t{*c, "curve", space, config(1)};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->errors(), 2);
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 4u);
  for (auto& tr : *trials) {
    if (tr.config["fail_at"] == 3) {
      EXPECT_EQ(tr.state, "error");
      EXPECT_NE(tr.info.dump().find("the curve broke at 3"), std::string::npos) << tr.info.dump();
      EXPECT_EQ(r->history(tr.id)->size(), 2u);  // what it reported before is kept
    } else {
      EXPECT_EQ(tr.state, "terminated") << tr.error;
      EXPECT_EQ(r->history(tr.id)->size(), 6u);
    }
  }
  // The directory is the experiment's: another one is not written over it.
  tune::tuner again{*c, "curve", space, config(1)};
  auto second = again.fit();
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message().find("already holds an experiment"), std::string::npos)
      << second.error().message();
}

TEST_F(TuneEmbedded, ProgramsStartedInTheSameSecondGetFoldersOfTheirOwn) {
  // The default folder is tune_results/<name>-<UTC second>: another program (or run)
  // started in that second already took it. Taken here for the next seconds too.
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(files.dir());
  std::set<std::string> taken;
  for (int s = 0; s < 10; ++s) {
    std::time_t t = std::time(nullptr) + s;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
    std::string dir = std::string{"tune_results/same-"} + buf;
    std::filesystem::create_directories(dir);
    taken.insert(dir);
  }
  auto cfg = config(1);
  cfg.experiment_dir.clear();
  cfg.name = "same";
  auto r = tune::tuner{*c, "curve", tune::search_space{{"x", 0.5}, {"fail_at", 0}}, cfg}.fit();
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->errors(), 0);
  EXPECT_EQ(taken.count(r->dir()), 0u) << r->dir();
  EXPECT_EQ(r->dir().substr(r->dir().size() - 2), "-2") << r->dir();
  std::filesystem::path made = r->dir();
  if (made.is_relative()) made = files.dir() / made;
  EXPECT_TRUE(std::filesystem::exists(made / "experiment.db")) << made;
}

TEST_F(TuneEmbedded, BadExperimentsAreRefusedBeforeAnythingRuns) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  tune::search_space space{{"x", tune::uniform(0.1, 1.0)}};
  auto error_of = [&](std::string trainable, tune::tune_config cfg) {
    tune::tuner t{*c, std::move(trainable), space, std::move(cfg)};
    auto r = t.fit();
    return r ? std::string{} : r.error().message();
  };
  auto unknown = error_of("nope", config(1));
  EXPECT_NE(unknown.find("no trainable 'nope'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("curve"), std::string::npos) << unknown;  // the ones it has
  auto cfg = config(1);
  cfg.resources_per_trial = tune::resources{{"GPU", 1}};
  auto res = error_of("curve", cfg);
  EXPECT_NE(res.find("GPU"), std::string::npos) << res;
  cfg = config(1);
  cfg.metric = "";
  EXPECT_NE(error_of("curve", cfg).find("metric"), std::string::npos);
  cfg = config(0);
  EXPECT_NE(error_of("curve", cfg).find("num_samples"), std::string::npos);
  cfg = config(1);
  cfg.scheduler = tune::asha{.reduction_factor = 1};
  EXPECT_NE(error_of("curve", cfg).find("reduction_factor"), std::string::npos);
  cfg = config(1);
  cfg.search = tune::grid_search_alg{};
  EXPECT_NE(error_of("curve", cfg).find("x"), std::string::npos);  // random domain in a grid
  cfg = config(1);
  cfg.mlflow = {{"uri", "sqlite:///m.db"}};
  auto tracker = error_of("curve", cfg);
  EXPECT_NE(tracker.find("mlflow: uri: unknown option; mlflow has: tracking_uri"), std::string::npos) << tracker;
}

// Each trial's folder gets its files by default, not with trial_files = false; a tracker
// whose Python is not there is a warning in the store, and the experiment completes.
TEST_F(TuneEmbedded, TrialFilesByDefaultAndATrackerThatCannotRunIsOnlyAWarning) {
  namespace fs = std::filesystem;
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(2);
  cfg.wandb = {{"mode", "offline"}};
  cfg.tracker_python = "/no/such/python3";
  tune::search_space space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 3}};
  auto r = tune::tuner{*c, "curve", space, cfg}.fit();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->errors(), 0);
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  for (auto& tr : *trials) {
    auto folder = fs::path(r->dir()) / "trials" / tr.id;
    std::ifstream csv(folder / "progress.csv");
    std::string line;
    int lines = 0;
    while (std::getline(csv, line)) ++lines;
    EXPECT_EQ(lines, 1 + static_cast<int>(r->history(tr.id)->size())) << tr.id;  // the header and a row each
    bool events = false;
    for (auto& e : fs::directory_iterator(folder)) events |= e.path().filename().string().starts_with("events.out.tfevents.");
    EXPECT_TRUE(events) << folder;
  }
  auto events = r->store().events();
  ASSERT_TRUE(events);
  bool warned = false;
  for (auto& e : *events)
    if (e.kind == "sink_warning")
      warned |= e.body.value("warning", "").find("cannot run the Python they need, /no/such/python3") != std::string::npos;
  EXPECT_TRUE(warned);

  auto off = config(1);
  off.trial_files = false;
  off.experiment_dir = files.dir() + "/exp-off";
  auto quiet = tune::tuner{*c, "curve", space, off}.fit();
  ASSERT_TRUE(quiet) << quiet.error().message();
  auto only = quiet->trials();
  ASSERT_TRUE(only && only->size() == 1u);
  EXPECT_FALSE(fs::exists(fs::path(quiet->dir()) / "trials" / only->front().id / "progress.csv"));
}

TEST_F(TuneEmbedded, AutoPackingRefusesWhatItCannotDo) {
  auto o = options(2);
  o.num_gpus = 0;
  auto none = tune::cluster::start(o);
  ASSERT_TRUE(none) << none.error().message();
  auto error_on = [&](tune::cluster& c, tune::tune_config cfg) {
    tune::tuner t{c, "curve", tune::search_space{{"x", 0.5}}, std::move(cfg)};
    auto r = t.fit();
    return r ? std::string{} : r.error().message();
  };
  auto cfg = config(1);
  cfg.resources_per_trial = tune::resources{{"cpu", 1}, {"gpu", "auto"}};
  auto no_gpu = error_on(*none, cfg);
  EXPECT_NE(no_gpu.find("no node of the cluster has one"), std::string::npos) << no_gpu;
  cfg.resources_per_trial = tune::resources{{"gpu", "fast"}};
  auto word = error_on(*none, cfg);
  EXPECT_NE(word.find("\"fast\""), std::string::npos) << word;
  EXPECT_NE(word.find("auto"), std::string::npos) << word;
  cfg = config(1);
  cfg.bundles = {tune::resources{{"gpu", "auto"}}, tune::resources{{"cpu", 1}}};
  auto bundles = error_on(*none, cfg);
  EXPECT_NE(bundles.find("not bundles"), std::string::npos) << bundles;
  cfg = config(1);
  cfg.resources_per_trial = tune::resources{{"gpu", "auto"}, {"gpu_memory", "4GiB"}};
  auto memory = error_on(*none, cfg);
  EXPECT_NE(memory.find("drop gpu_memory"), std::string::npos) << memory;
  cfg = config(1);
  cfg.resources_per_trial = tune::resources{{"gpu", "auto"}};
  cfg.auto_packing.margin = -0.5;
  auto margin = error_on(*none, cfg);
  EXPECT_NE(margin.find("margin"), std::string::npos) << margin;
}

// Logical GPUs have no audit: nothing is measured, so the share is decided when the
// probe ends: the probe's, and every trial runs as many at once as the cluster holds.
TEST_F(TuneEmbedded, AutoPackingWithoutMeasurementsKeepsTheProbeShareAndRunsEveryTrial) {
  auto o = options(4);
  o.num_gpus = 2;
  auto c = tune::cluster::start(o);
  ASSERT_TRUE(c) << c.error().message();
  auto cap = c->capacity();
  ASSERT_TRUE(cap) << cap.error().message();
  if (cap->real_gpus) GTEST_SKIP() << "real cards are measured: gpu_auto_packing_test covers them";
  auto cfg = config(5);
  cfg.resources_per_trial = tune::resources{{"cpu", 0.5}, {"gpu", "auto"}};
  cfg.auto_packing.probe_share = 0.5;
  // Every trial is stopped at its second result (as early stopping would): the probe's
  // end, though asked for, is a measurement all the same.
  cfg.stop.max_iterations = 2;
  // 50 ms per result: the trials after the probe outlast the head's status answer that
  // sets the cap (on a loaded machine the run could otherwise end before it came).
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 4}, {"sleep_ms", 50}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 5u);
  for (auto& tr : *trials) EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
  auto events = r->store().events();
  ASSERT_TRUE(events);
  std::vector<tune::event_row> probes, shares, caps;
  for (auto& e : *events) {
    if (e.kind == "auto_probe") probes.push_back(e);
    if (e.kind == "auto_share") shares.push_back(e);
    if (e.kind == "auto_concurrency") caps.push_back(e);
  }
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].trial, "trial-00001");
  ASSERT_EQ(shares.size(), 1u);
  EXPECT_EQ(shares[0].body["share"], 0.5);
  EXPECT_NE(shares[0].body["why"].get<std::string>().find("no GPU memory"), std::string::npos) << shares[0].body;
  ASSERT_EQ(caps.size(), 1u);
  EXPECT_EQ(caps[0].body["max_concurrent"], 4) << "2 logical GPUs at 0.5, 4 CPUs at 0.5: 4 at once";
  EXPECT_NE(shares[0].body["why"].get<std::string>().find("the probe(s) ended"), std::string::npos) << shares[0].body;
  EXPECT_GT(shares[0].seq, probes[0].seq);
}

TEST_F(TuneEmbedded, ATrialThatCannotEverFitFailsWithTheReason) {
  auto o = options(2);
  o.num_gpus = 0;  // none, even on a machine with cards
  auto c = tune::cluster::start(o);
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(2);
  cfg.resources_per_trial = tune::resources{{"cpu", 1}, {"gpu", 1}};
  cfg.max_concurrent_trials = 2;
  tune::tuner t{*c, "curve", tune::search_space{{"x", 0.5}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->errors(), 2);
  auto trials = r->trials();  // kept: a loop over a temporary's value dangles
  ASSERT_TRUE(trials);
  for (auto& tr : *trials) EXPECT_NE(tr.error.find("infeasible"), std::string::npos) << tr.error;
}

// The tuning script's own code in the engine's decisions (tune/tuner/hooks.hpp): its
// searcher gives every configuration (then is finished), its stopper stops each trial at
// iteration 3, its callback sees every event and asks for a checkpoint, and its
// resources function gives each trial its request (one that can never fit is that
// trial's error). Every hook runs on libtune's hook thread, one call at a time.
struct script_searcher : tune::searcher {
  int given = 0;
  std::vector<std::pair<std::string, bool>> completed;  // trial, error
  std::optional<tune::config> suggest(const std::string&) override {
    if (given == 4) return std::nullopt;
    ++given;
    return tune::config{{"x", 0.2 * given}, {"cpus", given == 4 ? 64 : 1}};
  }
  bool finished() const override { return given == 4; }
  void on_trial_complete(const std::string& id, const nlohmann::json&, bool error) override {
    completed.emplace_back(id, error);
  }
  std::string name() const override { return "script_searcher"; }
};
struct at_three : tune::stopper {
  int calls = 0;
  bool operator()(const std::string&, const nlohmann::json& result) override {
    ++calls;
    return result.value("training_iteration", 0) >= 3;
  }
  std::string name() const override { return "at_three"; }
};
struct recorder : tune::callback {
  int setups = 0, starts = 0, results = 0, completes = 0, errors = 0, ends = 0;
  size_t ended_with = 0;
  void setup(const experiment_info&) override { ++setups; }
  void on_trial_start(const tune::trial_info&) override { ++starts; }
  void on_trial_result(const tune::trial_info& t, nlohmann::json& result) override {
    ++results;
    EXPECT_EQ(result.value("trial_id", std::string{}), t.id) << result.dump();
  }
  void on_trial_complete(const tune::trial_info&) override { ++completes; }
  void on_trial_error(const tune::trial_info&) override { ++errors; }
  void on_experiment_end(const std::vector<tune::trial_info>& trials) override { ++ends, ended_with = trials.size(); }
};

TEST_F(TuneEmbedded, TheScriptsOwnSearcherStopperCallbackAndResourcesDecide) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto search = std::make_shared<script_searcher>();
  auto stop = std::make_shared<at_three>();
  auto rec = std::make_shared<recorder>();
  auto cfg = config(10);
  cfg.search = search;
  cfg.stoppers = {stop};
  cfg.callbacks = {rec};
  cfg.resources_fn = [](const tune::config& x) { return tune::resources{{"cpu", x["cpus"].get<double>()}}; };
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0, 1)}, {"cpus", tune::choice({1, 64})},
                                               {"iterations", 10}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 4u) << "the searcher finished after 4, whatever num_samples";
  std::set<double> xs;
  int errors = 0;
  for (auto& tr : *trials) {
    xs.insert(tr.config["x"].get<double>());
    if (tr.config["cpus"] == 64) {  // more than the cluster has: its error, at once
      ++errors;
      EXPECT_EQ(tr.state, "error");
      EXPECT_NE(tr.error.find("asks 64 CPUs"), std::string::npos) << tr.error;
      continue;
    }
    EXPECT_EQ(tr.state, "terminated") << tr.error;
    auto h = r->history(tr.id);
    ASSERT_TRUE(h);
    EXPECT_GE(h->back().iteration, 3);
    EXPECT_LT(h->back().iteration, 10) << "the stopper stopped it at 3 (a result or two may follow)";
  }
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(xs, (std::set<double>{0.2, 0.4, 0.6000000000000001, 0.8}));
  EXPECT_EQ(search->completed.size(), 4u);
  EXPECT_EQ(rec->setups, 1);
  EXPECT_EQ(rec->starts, 4) << "each trial the engine starts, the one that cannot fit too (then its error)";
  // Each result up to the stop went through the callback and the stopper; one that came
  // after the decision is stored, and not given to the hooks once the stop took effect.
  EXPECT_GE(rec->results, 9);
  EXPECT_LE(rec->results, r->results);
  EXPECT_EQ(stop->calls, rec->results);
  EXPECT_EQ(rec->completes, 3);
  EXPECT_EQ(rec->errors, 1);
  EXPECT_EQ(rec->ends, 1);
  EXPECT_EQ(rec->ended_with, 4u);
}

// libtune's own TPE as a part of the script's searcher (tune/tuner/searchers.hpp): the
// script's searcher runs the first trial at a point of its choosing, then hands every
// call to TPE, and keeps count. TPE learns the space, mode and seed from the experiment.
struct first_then_tpe : tune::searcher {
  std::shared_ptr<tune::searcher> tpe = tune::tpe_searcher({.n_startup_trials = 3});
  int suggested = 0, results = 0, completed = 0;
  tune::status set_search_properties(const tune::search_properties& p) override {
    EXPECT_EQ(p.metric, "score");
    EXPECT_EQ(p.num_samples, 8);
    return tpe->set_search_properties(p);
  }
  std::optional<tune::config> suggest(const std::string& id) override {
    ++suggested;
    if (suggested == 1) return tune::config{{"x", 0.95}, {"iterations", 4}};
    return tpe->suggest(id);
  }
  bool finished() const override { return tpe->finished(); }
  void on_trial_result(const std::string& id, const nlohmann::json& r) override { ++results, tpe->on_trial_result(id, r); }
  void on_trial_complete(const std::string& id, const nlohmann::json& last, bool error) override {
    ++completed;
    tpe->on_trial_complete(id, last, error);
  }
  std::string save() const override { return tpe->save(); }
  tune::status restore(const std::string& s) override { return tpe->restore(s); }
  std::string name() const override { return "first_then_tpe"; }
};

TEST_F(TuneEmbedded, LibtunesTpeServesAsAPartOfTheScriptsSearcher) {
  auto c = tune::cluster::start(options(2));
  ASSERT_TRUE(c) << c.error().message();
  auto search = std::make_shared<first_then_tpe>();
  auto cfg = config(8);
  cfg.search = search;
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0, 1)}, {"iterations", 4}}, cfg};
  auto r = t.fit();
  ASSERT_TRUE(r) << r.error().message();
  auto trials = r->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 8u);
  std::set<double> xs;
  for (auto& tr : *trials) {
    EXPECT_EQ(tr.state, "terminated") << tr.error;
    xs.insert(tr.config["x"].get<double>());
  }
  EXPECT_EQ(xs.size(), 8u) << "TPE suggested 7 configurations of its own";
  EXPECT_TRUE(xs.count(0.95));
  EXPECT_EQ(search->suggested, 8);
  EXPECT_EQ(search->completed, 8);
  EXPECT_EQ(search->results, r->results);
  // The searcher's state, kept in the experiment folder: TPE's seven suggestions and the
  // value each trial ended with (its last score), the script's own first one unknown to it.
  std::ifstream in(files.dir() + "/exp/hooks_state");
  auto state = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(state.is_object()) << "no hooks_state";
  int s = 0, e = 0;
  for (auto& entry : state["log"]) s += entry.contains("s"), e += entry.contains("e") && entry.contains("v");
  EXPECT_EQ(s, 7);
  EXPECT_EQ(e, 7);
}

TEST_F(TuneEmbedded, ASearcherThatCannotWorkWithTheExperimentEndsFitBeforeItStarts) {
  auto c = tune::cluster::start(options(1));
  ASSERT_TRUE(c) << c.error().message();
  auto cfg = config(4);
  cfg.search = tune::gp_searcher();
  tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0, 1)},
                                               {"y", tune::conditional([](const tune::config&) -> tune::domain { return 1; })}},
                cfg};
  auto r = t.fit();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("the searcher 'gp' (set_search_properties)"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("\"y\" is conditional"), std::string::npos) << r.error().message();
  EXPECT_FALSE(std::filesystem::exists(files.dir() + "/exp")) << "nothing written";
}

// A cluster of processes: a head and a node daemon with 4 logical GPUs; the tuning
// program connects with --address, as a user's would.
class TuneConnected : public ::testing::Test {
 protected:
  tune::test::cluster_files files;
  std::string address;
  void TearDown() override { files.tune({"stop", "--grace", "3"}); }  // also after a failed assertion
  // GET `path` of the head's dashboard (its address from tune status), with the token.
  nlohmann::json dashboard(const std::string& path) {
    auto st = files.tune({"status", "--address", address, "--json"});
    auto url = nlohmann::json::parse(st.out)["head"].value("dashboard", "");  // http://HOST:PORT/
    auto hostport = url.substr(7, url.size() - 8);
    std::ifstream tf{files.token_file()};
    std::string token;
    std::getline(tf, token);
    httplib::Client c{hostport.substr(0, hostport.rfind(':')), std::stoi(hostport.substr(hostport.rfind(':') + 1))};
    auto r = c.Get(path, {{"Authorization", "Bearer " + token}});
    if (!r || r->status != 200) return nullptr;
    return nlohmann::json::parse(r->body);
  }
  // A head on a free port and a node of 4 logical GPUs and 4 CPUs.
  void start_cluster() {
    int port = tune::test::free_port();
    address = "127.0.0.1:" + std::to_string(port);
    auto h = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1"});
    ASSERT_EQ(h.rc, 0) << h.out << h.err;
    auto n = files.tune({"start", "--address", address, "--num-gpus", "4", "--num-cpus", "4"});
    ASSERT_EQ(n.rc, 0) << n.out << n.err;
    node = tune::test::node_id_in(n.out);
  }
  std::string node;  // the cluster's node
};

TEST_F(TuneConnected, TrialsRunOnTheNodesOfAClusterAtAnAddress) {
  ASSERT_NO_FATAL_FAILURE(start_cluster());
  {
    std::vector<std::string> args{"prog", "--address", address, "--token-file", files.token_file()};
    auto argv = argv_of(args);
    int argc = static_cast<int>(args.size());
    auto c = tune::init(argc, argv.data());
    ASSERT_TRUE(c) << c.error().message();
    EXPECT_FALSE(c->embedded());
    tune::tune_config cfg;
    cfg.metric = "score";
    cfg.num_samples = 8;
    cfg.seed = 5;
    cfg.progress = tune::progress_style::none;
    cfg.experiment_dir = files.dir() + "/exp";
    cfg.resources_per_trial = tune::resources{{"cpu", 0.5}, {"gpu", 0.5}};
    cfg.scheduler = tune::asha{.max_t = 4, .grace_period = 1, .reduction_factor = 2};
    tune::tuner t{*c, "curve", tune::search_space{{"x", tune::uniform(0.1, 1.0)}, {"iterations", 4}}, cfg};
    auto r = t.fit();
    ASSERT_TRUE(r) << r.error().message();
    auto trials = r->trials();
    ASSERT_TRUE(trials);
    EXPECT_EQ(trials->size(), 8u);
    int64_t reported = 0;
    for (auto& tr : *trials) {
      EXPECT_EQ(tr.state, "terminated") << tr.error;
      EXPECT_EQ(tr.info["gpus"].size(), 1u) << tr.info.dump();  // its logical card
      reported += static_cast<int64_t>(r->history(tr.id)->size());
    }
    EXPECT_EQ(reported, r->results);
    // Nothing is left held on the cluster (the node says so with its next heartbeat).
    nlohmann::json status;
    for (int i = 0; i < 40; ++i) {
      status = nlohmann::json::parse(*c->status_json());
      if (status["resources"]["available"]["gpu"] == 4) break;
      std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(status["resources"]["available"]["gpu"], 4) << status.dump();
    for (auto& g : status["placement_groups"]) {
      EXPECT_EQ(g["state"], "removed") << g.dump();
      EXPECT_EQ(g["detached"], false) << "the tuner's groups are its own";
    }
  }
}

// The experiment in `dir`: `n` trials, each terminated with iterations 1..`iterations`
// stored once (its trials; none when it cannot be read).
std::vector<tune::trial_row> completed_trials(const std::string& dir, size_t n, size_t iterations) {
  auto grid = tune::result_grid::open(dir, "score", tune::mode::max);
  EXPECT_TRUE(grid) << grid.error().message();
  if (!grid) return {};
  auto trials = grid->trials();
  EXPECT_TRUE(trials);
  if (!trials) return {};
  EXPECT_EQ(trials->size(), n);
  for (auto& tr : *trials) {
    EXPECT_EQ(tr.state, "terminated") << tr.id << ": " << tr.error;
    auto hist = grid->history(tr.id);
    EXPECT_TRUE(hist);
    if (!hist) continue;
    EXPECT_EQ(hist->size(), iterations) << tr.id << ": every iteration stored once";
    for (size_t i = 0; i < hist->size(); ++i) EXPECT_EQ((*hist)[i].iteration, static_cast<int64_t>(i) + 1) << tr.id;
  }
  return *trials;
}

// The tuning program dies (SIGKILL) mid-experiment: its trials do not run on without it
// (their groups went with it, and a trial never outlives its bundle); `tune resume DIR`
// runs it again and the experiment completes with every iteration of every trial stored
// once, the interrupted trials continuing from their checkpoints.
TEST_F(TuneConnected, AKilledTuningProgramIsResumedWithNothingLostOrCountedTwice) {
  ASSERT_NO_FATAL_FAILURE(start_cluster());
  std::string dir = files.dir() + "/exp";
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  pid_t driver = ::fork();
  if (driver == 0) {
    ::execl(self.c_str(), self.c_str(), "--resume-driver", dir.c_str(), "--address", address.c_str(), "--token-file",
            files.token_file().c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Each running trial's checkpoint copies the store knows of (complete, at or before its
  // latest recorded checkpoint), oldest first.
  std::error_code ec2;
  auto known_copies = [&](tune::experiment_store& s) {
    std::map<std::string, std::vector<std::filesystem::path>> out;
    auto trials = s.trials();
    if (!trials) return out;
    for (auto& tr : *trials) {
      if (tr.state != "running") continue;
      int64_t known = -1;
      if (auto ev = s.events(tr.id); ev)
        for (auto& e : *ev)
          if (e.kind == "checkpoint") known = std::max(known, e.body.value("iteration", int64_t{-1}));
      std::vector<std::filesystem::path> copies;
      for (auto& c : std::filesystem::directory_iterator(s.checkpoint_dir(tr.id), ec2)) {
        auto name = c.path().filename().string();
        if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
        if (std::filesystem::exists(c.path() / "MANIFEST.json") && std::stoll(name) <= known) copies.push_back(c.path());
      }
      std::sort(copies.begin(), copies.end(), [](auto& a, auto& b) {
        return std::stoll(a.filename().string()) < std::stoll(b.filename().string());
      });
      out[tr.id] = std::move(copies);
    }
    return out;
  };
  // Killed once it has stored some results (the first trials run ~1.8 s) and a running
  // trial has two checkpoint copies (so that one can be damaged below); on a loaded
  // machine that takes longer, so the test waits for it rather than for a time.
  int64_t stored_before = 0;
  bool two_copies = false;
  for (int i = 0; i < 300 && (stored_before < 40 || !two_copies); ++i) {
    std::this_thread::sleep_for(100ms);
    if (!std::filesystem::exists(dir + "/experiment.db")) continue;
    if (auto s = tune::experiment_store::open(dir); s) {
      if (auto c = (*s)->result_count(); c) stored_before = *c;
      two_copies = false;
      for (auto& [id, copies] : known_copies(**s)) two_copies = two_copies || copies.size() >= 2;
    }
  }
  EXPECT_FALSE(tune::test::workers_of_node(node).empty()) << "no trial process found in node " << node << "'s folder";
  ::kill(driver, SIGKILL);
  ::waitpid(driver, nullptr, 0);
  ASSERT_GE(stored_before, 40) << "the tuning program stored too little before it was killed";
  // Its trials end with it: nothing of theirs runs a few seconds later.
  bool trials_gone = false;
  for (int i = 0; i < 50 && !trials_gone; ++i) {
    std::this_thread::sleep_for(100ms);
    trials_gone = tune::test::workers_of_node(node).empty();  // this cluster's: other tests may run trials too
  }
  EXPECT_TRUE(trials_gone) << "the dead program's trials still run";
  // The dashboard: the experiment was left interrupted by its program's death.
  auto listed = dashboard("/api/experiments");
  ASSERT_TRUE(listed.is_array() && listed.size() == 1) << listed;
  EXPECT_EQ(listed[0]["state"], "interrupted") << listed;
  EXPECT_EQ(listed[0]["dir"], std::filesystem::absolute(dir).lexically_normal().string());
  // The copy each running trial will restart from (the newest of its checkpoints the
  // store knows; a copy made after the last commit is newer and unused) is damaged
  // (truncated): found on resume, reported, and the copy before it used.
  int damaged = 0;
  {
    auto s = tune::experiment_store::open(dir);
    ASSERT_TRUE(s);
    for (auto& [id, copies] : known_copies(**s)) {
      if (copies.size() < 2) continue;
      std::filesystem::resize_file(copies.back() / "state", 0);
      ++damaged;
    }
  }
  ASSERT_GE(damaged, 1) << "no running trial had two checkpoint copies to damage one of";
  auto resumed = files.tune({"resume", dir});
  ASSERT_EQ(resumed.rc, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.err.find("start again from their checkpoints"), std::string::npos) << resumed.err;
  auto trials = completed_trials(dir, 6, 60);
  ASSERT_EQ(trials.size(), 6u);
  auto grid = tune::result_grid::open(dir, "score", tune::mode::max);
  ASSERT_TRUE(grid) << grid.error().message();
  int restored = 0;
  for (auto& tr : trials) restored += tr.info.contains("restored_from");
  EXPECT_GE(restored, 1) << "no trial continued from a checkpoint";
  int corrupt = 0;
  if (auto all = grid->store().events(); all)
    for (auto& e : *all) corrupt += e.kind == "checkpoint_corrupt";
  EXPECT_EQ(corrupt, damaged) << "every damaged copy is found and reported";
  auto events = grid->store().events("");
  ASSERT_TRUE(events);
  bool resumed_event = false;
  for (auto& e : *events) resumed_event = resumed_event || e.kind == "resumed";
  EXPECT_TRUE(resumed_event);
  // The dashboard shows the same experiment (same id) done, each trial's curve whole:
  // iterations 1..60 once each, those from before the kill included.
  auto id = listed[0]["id"].get<std::string>();
  nlohmann::json exp;
  for (int i = 0; i < 50; ++i) {
    exp = dashboard("/api/experiments/" + id);
    if (exp.is_object() && exp["state"] == "done") break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(exp.is_object()) << "the resumed experiment is not on the dashboard";
  EXPECT_EQ(exp["state"], "done");
  ASSERT_EQ(exp["trial_table"].size(), 6u);
  for (auto& t : exp["trial_table"]) {
    auto& curve = t["curve"];
    ASSERT_EQ(curve.size(), 60u) << t["id"] << ": " << curve;
    for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(curve[i][0], i + 1) << t["id"];
  }
}

// Hosts in network namespaces: the head and the tuning program on one, a node on each of
// two others. The link of the node running two trials is cut for 4 s: it is declared
// dead, its trials start again on the other node from their checkpoints; when the link
// is back, the node joins again and its stale trials are killed at once (not run twice).
// Every trial completes with every iteration stored once.
TEST(TuneNetns, ACutLinkRestoredDoesNotRunTrialsTwiceAndNothingIsLost) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  if (tune::test::run({"ip", "netns", "list"}).rc != 0) GTEST_SKIP() << "no `ip netns` here";
  tune::test::cluster_files files;
  tune::test::netns_lab lab(3);
  ASSERT_TRUE(lab.ok()) << lab.why();
  std::string head = tune::test::netns_lab::address(0) + ":6380";
  auto runtime = [&](int h) { return files.dir() + "/host" + std::to_string(h); };
  auto h = files.tune({"start", "--head", "--host", tune::test::netns_lab::address(0)}, lab.on(0), runtime(0));
  ASSERT_EQ(h.rc, 0) << h.out << h.err;
  std::map<std::string, int> host_of;
  for (int host : {1, 2}) {
    auto n = files.tune({"start", "--address", head, "--num-gpus", "2", "--num-cpus", "4"}, lab.on(host), runtime(host));
    ASSERT_EQ(n.rc, 0) << n.out << n.err;
    host_of[tune::test::node_id_in(n.out)] = host;
  }
  std::string dir = files.dir() + "/exp";
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::vector<std::string> args = lab.on(0);
  for (std::string a : {self, std::string{"--resume-driver"}, dir, std::string{"--address"}, head,
                        std::string{"--token-file"}, files.token_file()})
    args.push_back(a);
  pid_t driver = ::fork();
  if (driver == 0) {
    ::setenv("DRIVER_MAX_FAILURES", "2", 1);
    ::setenv("DRIVER_ITERATIONS", "400", 1);  // 12 s: stale ones would outlive the check
    auto argv = argv_of(args);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  // The node with two trials running (PACK fills one node first).
  std::string victim;
  for (int i = 0; i < 100 && victim.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    if (!std::filesystem::exists(dir + "/experiment.db")) continue;
    auto s = tune::experiment_store::open(dir);
    if (!s) continue;
    auto trials = (*s)->trials();
    if (!trials) continue;
    std::map<std::string, int> running;
    for (auto& t : *trials)
      if (t.state == "running" && t.info.contains("node")) ++running[t.info["node"].get<std::string>()];
    for (auto& [n, k] : running)
      if (k == 2) victim = n;
  }
  ASSERT_FALSE(victim.empty()) << "no node ran two trials";
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(lab.link(host_of[victim], false));
  std::this_thread::sleep_for(4000ms);  // declared dead after 3 s of silence
  auto stale = tune::test::workers_of_node(victim);
  ASSERT_TRUE(lab.link(host_of[victim], true));
  std::this_thread::sleep_for(3000ms);
  std::set<std::string> still;
  for (auto& pid : tune::test::workers_of_node(victim))
    if (stale.count(pid)) still.insert(pid);
  int status = -1;
  for (int i = 0; i < 900 && ::waitpid(driver, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(100ms);
  if (::waitpid(driver, &status, WNOHANG) == 0) {
    ::kill(driver, SIGKILL);
    ::waitpid(driver, &status, 0);
    ADD_FAILURE() << "the tuning program did not finish within 90 s";
  }
  for (int host : {0, 1, 2}) files.tune({"stop", "--grace", "3"}, lab.on(host), runtime(host));
  EXPECT_GE(stale.size(), 2u) << "the cut-off node's trials went on running while it was cut off";
  EXPECT_TRUE(still.empty()) << "3 s after the link came back, the node still runs " << still.size()
                             << " process(es) of trials that were started again elsewhere";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the tuning program failed";
  auto trials = completed_trials(dir, 6, 400);
  ASSERT_EQ(trials.size(), 6u);
  int restarted = 0;
  for (auto& tr : trials) restarted += tr.info.value("failures", 0) > 0;
  EXPECT_GE(restarted, 2) << "the cut-off node's trials were not started again";
}

}  // namespace

int main(int argc, char** argv) {
  // Run as a trial's worker by a node: the trainable runs, and the process ends there.
  tune::run_if_trial_worker(argc, argv);
  if (argc >= 3 && std::string{argv[1]} == "--resume-driver") return resume_driver(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
