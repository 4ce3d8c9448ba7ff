// Any program as a trial, end to end through `tune run` (docs/run.md): a real Python
// script (tests/programs/trial.py, standard library only) reports through the libtune
// module the nodes install, checkpoints and restores, is stopped early by ASHA and
// paused and resumed by HyperBand; a script that knows nothing of libtune is read
// through its output; the configuration reaches the command line without a shell; and
// every bad input is a clear error that leaves nothing broken. On one machine: an
// embedded cluster, or a head and two node processes on loopback.
#include <gtest/gtest.h>
#include <sstream>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness.hpp"
#include "tune/trial/cgroup.hpp"
#include "tune/tuner/store.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string tune_binary() { return built_or_moved("TUNE_BINARY", TUNE_BINARY); }

// The trials' interpreter: Debian's python3 where there is one, an ELF file, which nodes
// run warm (tune/trial/python_spawners.hpp); else the first on the PATH (a wrapper
// script is exec'd as it is).
std::string py() { return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class ProgramTest : public ::testing::Test {
 protected:
  cluster_files files;
  std::string project, exp, rec;

  void SetUp() override {
    project = files.dir() + "/project";
    exp = files.dir() + "/exp";
    rec = files.dir() + "/record.jsonl";
    shared_file(rec);  // the trials append what they saw to it
    fs::create_directories(project);
    for (auto name : {"trial.py", "broken.py", "gang.py"}) fs::copy_file(std::string{PROGRAMS_DIR} + "/" + name, project + "/" + name);
  }

  void write(const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(project + "/" + name).parent_path());
    std::ofstream(project + "/" + name) << text;
  }

  // tune run ARGS in `cwd` (the project by default), on an embedded cluster of 4 CPUs
  // unless the arguments say otherwise; no card visible.
  run_result tune_run(std::vector<std::string> args, std::chrono::seconds timeout = 120s, std::string cwd = "",
                      std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv{tune_binary(), "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    env.emplace("CUDA_VISIBLE_DEVICES", "");
    auto r = run(argv, env, timeout, cwd.empty() ? project : cwd);
    if (std::getenv("PROGRAM_TEST_DEBUG")) std::cerr << r.err;
    return r;
  }

  static nlohmann::json summary(const run_result& r) { return last_json_line(r.out); }

  std::unique_ptr<experiment_store> store() {
    auto s = experiment_store::open(exp);
    EXPECT_TRUE(s) << s.error().message();
    return s ? std::move(s).value() : nullptr;
  }

  // Every trial's results are iterations 1..n, each once.
  void expect_iterations_once(experiment_store& s) {
    auto trials = s.trials();
    ASSERT_TRUE(trials);
    for (auto& t : *trials) {
      auto results = s.results(t.id);
      ASSERT_TRUE(results);
      for (size_t i = 0; i < results->size(); ++i) EXPECT_EQ((*results)[i].iteration, static_cast<int64_t>(i) + 1) << t.id;
    }
  }

  // The errors of the stored trials.
  std::vector<std::string> errors() {
    std::vector<std::string> out;
    auto s = store();
    if (!s) return out;
    if (auto trials = s->trials())
      for (auto& t : *trials) out.push_back(t.error);
    return out;
  }

  // The program of the containment tests, in the project.
  void add_contained() {
    if (!fs::exists(project + "/contained.py"))
      fs::copy_file(std::string{PROGRAMS_DIR} + "/contained.py", project + "/contained.py");
    shared_file(files.dir() + "/helpers");  // where its helpers' pids go
  }
  // A file the trials (nobody, when the test runs as root) may append to.
  static void shared_file(const std::string& path) {
    std::ofstream{path, std::ios::app};
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::group_write |
                              fs::perms::others_read | fs::perms::others_write);
  }

  // The experiment file `name` in the project: `body` after the lines every test has.
  std::string experiment(const std::string& name, const std::string& body) {
    write(name, "working_dir: .\nexperiment_dir: " + exp + "\nmetric: val_acc\nmode: max\nprogress: lines\n" + body);
    return project + "/" + name;
  }

  // What the background tune run printed (for failure messages).
  std::string driver_log() const { return files.dir() + "/driver.log"; }
  std::string driver_output() const {
    std::ifstream in{driver_log()};
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // tune run in the background, with `env` besides this test's; its pid.
  pid_t start_driver(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      if (::chdir(project.c_str()) != 0) ::_exit(127);
      int log = ::open(driver_log().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);  // shown when a test fails
      ::dup2(log, 1);
      ::dup2(log, 2);
      for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<std::string> argv{tune_binary(), "run"};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> c;
      for (auto& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      ::_exit(127);
    }
    return pid;
  }

  int64_t stored() {
    if (!fs::exists(exp + "/experiment.db")) return 0;
    auto s = experiment_store::open(exp);
    if (!s) return 0;
    auto n = (*s)->result_count();
    return n ? *n : 0;
  }
};

TEST_F(ProgramTest, ALibtuneScriptReportsCheckpointsAndIsStoppedEarlyByAsha) {
  auto file = experiment("experiment.yaml", "command: [" + py() + ", trial.py, --record, " + rec + "]\n" +
                                                R"(num_samples: 8
max_concurrent_trials: 4
space:
  x: {uniform: [0.0, 1.0]}
  epochs: 6
  sleep: 0.05
scheduler: {type: asha, max_t: 6, grace_period: 1, reduction_factor: 2}
)");
  auto r = tune_run({file, "--num-cpus", "4"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto j = summary(r);
  EXPECT_EQ(j["trials"], 8) << j;
  EXPECT_EQ(j["errors"], 0) << j;
  EXPECT_EQ(j["metric"], "val_acc");
  EXPECT_EQ(j["experiment_dir"], exp);
  ASSERT_TRUE(j["best_trial"].is_string()) << j;
  EXPECT_TRUE(j["best_config"].contains("x")) << j;
  EXPECT_GT(j["best_value"].get<double>(), 0.5);
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  int early = 0;
  std::set<std::string> dirs;
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    early += results->size() < 6;
    // Its checkpoints were copied into the experiment folder as it reported them.
    auto copies = s->checkpoint_dir(t.id);
    ASSERT_TRUE(fs::exists(copies + "/" + std::to_string(results->size()) + "/state.json")) << t.id;
  }
  EXPECT_GE(early, 1) << "ASHA stopped no trial early";
  expect_iterations_once(*s);
  // Each trial ran in a copy of the project of its own, with `import libtune` from the
  // node: nothing was installed.
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 8u);
  for (auto& e : seen) {
    auto cwd = e["cwd"].get<std::string>();
    EXPECT_TRUE(contains(cwd, "/trials/" + e["trial"].get<std::string>() + "@")) << cwd;  // <id>@<run key>
    EXPECT_TRUE(contains(cwd, "/work")) << cwd;
    dirs.insert(cwd);
  }
  EXPECT_EQ(dirs.size(), 8u);
  EXPECT_TRUE(contains(read_all(exp + "/results.csv"), "trial-00008"));
  auto manifest = nlohmann::json::parse(read_all(exp + "/workdir.json"));
  std::set<std::string> shipped;
  for (auto& f : manifest["files"]) shipped.insert(f["path"]);
  EXPECT_TRUE(shipped.count("trial.py") && shipped.count("experiment.yaml")) << manifest;
}

// reuse_workers with a Python script (docs/trials.md, "Reused workers"): the warm
// process of a trial that ended well (done, or stopped by ASHA) runs the next one
// placed on its slot. Each trial still has its own configuration, folder, iterations
// from 1 and checkpoints, and no trial is stopped by a stop meant for the one before.
TEST_F(ProgramTest, ReusedPythonWorkersRunTheNextTrialsWithNothingOfTheLastOne) {
  auto file = experiment("reuse.yaml", "command: [" + py() + ", trial.py, --record, " + rec + "]\n" +
                                           R"(num_samples: 10
max_concurrent_trials: 2
reuse_workers: true
space:
  x: {uniform: [0.0, 1.0]}
  epochs: 6
  sleep: 0.05
scheduler: {type: asha, max_t: 6, grace_period: 1, reduction_factor: 2}
)");
  auto r = tune_run({file, "--num-cpus", "2"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto j = summary(r);
  EXPECT_EQ(j["trials"], 10) << j;
  EXPECT_EQ(j["errors"], 0) << j;
  auto s = store();
  ASSERT_TRUE(s);
  auto events = s->events();
  ASSERT_TRUE(events);
  int reused = 0;
  bool contained = false;
  std::set<std::string> stopped;
  for (auto& e : *events) {
    if (e.kind == "stop") stopped.insert(e.trial);
    if (e.kind != "ended") continue;
    reused += e.body.value("worker_reused", false);
    contained = contained || e.body.value("containment", "") == "cgroup";
  }
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    ASSERT_FALSE(results->empty()) << t.id;
    double x = t.config["x"];
    for (auto& res : *results) {
      double epoch = res.metrics["epoch"];
      EXPECT_NEAR(res.metrics["val_acc"].get<double>(), 1.0 - (x - 0.3) * (x - 0.3) - 0.1 / epoch, 1e-9)
          << t.id << ": not its own configuration";
    }
    if (results->size() < 6) {
      EXPECT_TRUE(stopped.count(t.id)) << t.id << " ended early without a stop of its own";
    }
    EXPECT_TRUE(fs::exists(s->checkpoint_dir(t.id) + "/" + std::to_string(results->size()) + "/state.json")) << t.id;
  }
  expect_iterations_once(*s);
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 10u);
  std::set<int> pids;
  for (auto& e : seen) {
    auto cwd = e["cwd"].get<std::string>();
    EXPECT_TRUE(contains(cwd, "/trials/" + e["trial"].get<std::string>() + "@")) << cwd << ": another trial's folder";
    EXPECT_EQ(e["restored_from"], 0);
    pids.insert(e["pid"].get<int>());
  }
  if (!contained) GTEST_SKIP() << "no cgroups here: workers are not reused without them";
  std::cerr << "10 trials in " << pids.size() << " processes (" << reused << " reused)\n";
  EXPECT_LT(pids.size(), 10u) << "no worker ran a second trial";
  EXPECT_EQ(reused, 10 - static_cast<int>(pids.size()));
  for (int pid : pids)
    EXPECT_TRUE(tune::test::wait_until([&] { return tune::test::process_gone(pid); }, 6s))
        << "worker " << pid << " outlived its linger";
}

TEST_F(ProgramTest, HyperBandPausesTrialsAndTheyResumeFromTheirCheckpoints) {
  auto file = experiment("hb.yaml", "command: [" + py() + ", trial.py, --record, " + rec + "]\n" +
                                        R"(num_samples: 9
max_concurrent_trials: 3
space:
  x: {uniform: [0.0, 1.0]}
  epochs: 9
  sleep: 0.05
scheduler: {type: hyperband, max_t: 9, reduction_factor: 3, brackets: 1}
)");
  auto r = tune_run({file, "--num-cpus", "3"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  ASSERT_TRUE(s);
  expect_iterations_once(*s);
  int resumed = 0;
  for (auto& e : json_lines(rec)) resumed += e["restored_from"].get<int>() > 0;
  // (Epochs of 50 ms: with 20 ms a loaded machine let a trial run on past its rung
  // before the pause reached it, and it was never resumed.)
  EXPECT_GE(resumed, 3) << "the trials HyperBand promoted go on from their checkpoints";
  auto best = summary(r);
  ASSERT_TRUE(best["best_trial"].is_string()) << best;
  auto results = s->results(best["best_trial"]);
  ASSERT_TRUE(results);
  EXPECT_EQ(results->size(), 9u) << "the best trial ran to max_t";
}

// TUNE_TRACE_STEPS (tune/core/trace.hpp, read by bench/steps.py): every trial's start
// and end, step by step, each step once and in the order the messages go.
TEST_F(ProgramTest, TheStepTraceFollowsEachTrialFromItsGroupToItsEndHeard) {
  auto file = experiment("trace.yaml", "command: [" + py() + R"(, trial.py]
num_samples: 3
space: {x: {uniform: [0.0, 1.0]}, epochs: 2, sleep: 0.01}
)");
  auto trace = files.dir() + "/steps.log";
  auto r = tune_run({file, "--num-cpus", "4"}, 120s, "", {{"TUNE_TRACE_STEPS", trace}});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  // Two chains: the messages' (the trial actor says "running" before it passes on the
  // end), and the watching thread's (the process's end may come before "running" is said).
  const std::vector<std::vector<std::string>> chains{
      {"create_sent", "create_answered", "start_sent", "start_received", "prepare", "prepared", "spawned",
       "worker_running", "end_sent", "end_heard"},
      {"spawned", "exited", "cgroup_ended", "end_sent"}};
  std::map<std::string, std::map<std::string, std::vector<long long>>> seen;  // trial -> step -> times
  std::ifstream in(trace);
  std::string step, trial;
  long long ns = 0;
  while (in >> step >> trial >> ns) seen[trial.substr(0, trial.find('@'))][step].push_back(ns);
  ASSERT_EQ(seen.size(), 3u) << read_all(trace);
  for (auto& [id, steps] : seen) {
    for (auto& chain : chains) {
      long long last = 0;
      for (auto& name : chain) {
        ASSERT_EQ(steps[name].size(), 1u) << id << " " << name << "\n" << read_all(trace);
        EXPECT_GE(steps[name][0], last) << id << ": " << name << " before the step it follows";
        last = steps[name][0];
      }
    }
    ASSERT_EQ(steps["start_answered"].size(), 1u) << id;
    EXPECT_GE(steps["start_answered"][0], steps["worker_running"][0]) << id;
  }
  // Off without the variable: nothing written.
  fs::remove_all(exp);
  fs::remove(trace);
  ASSERT_EQ(tune_run({file, "--num-cpus", "4"}).rc, 0);
  EXPECT_FALSE(fs::exists(trace));
}

TEST_F(ProgramTest, AScriptThatKnowsNothingOfLibtuneIsReadThroughItsOutput) {
  // Flags only, the working directory the one tune run started in, the configuration
  // in the command's placeholders.
  auto r = tune_run({"--metric", "val_acc", "--samples", "3", "--space", R"({"x": {"uniform": [0, 1]}})", "--metric-pattern",
                     R"(val_acc=(\S+))", "--experiment-dir", exp, "--num-cpus", "3", "--progress", "none", "--", py(),
                     "trial.py", "--mode", "stdout", "--epochs", "4", "--sleep", "0.01", "--x", "${x}"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 3u);
  for (auto& t : *trials) {
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    ASSERT_EQ(results->size(), 4u) << t.id;
    double x = t.config["x"];
    for (auto& row : *results) {
      double want = 1.0 - (x - 0.3) * (x - 0.3) - 0.1 / static_cast<double>(row.iteration);
      EXPECT_NEAR(row.metrics["val_acc"].get<double>(), want, 1e-4) << t.id << " " << row.metrics;
    }
  }
  // Named groups: several metrics, and the iteration the line names.
  fs::remove_all(exp);
  auto named = tune_run({"--metric", "val_acc", "--samples", "1", "--metric-pattern",
                         R"(epoch (?P<iteration>\d+): loss=(?P<loss>\S+) val_acc=(?P<val_acc>[0-9.]+))", "--experiment-dir", exp,
                         "--progress", "none", "--", py(), "trial.py", "--mode", "stdout", "--epochs", "3", "--sleep", "0"});
  ASSERT_EQ(named.rc, 0) << named.out << named.err;
  auto results = store()->results("trial-00001");
  ASSERT_TRUE(results);
  ASSERT_EQ(results->size(), 3u);
  EXPECT_NEAR((*results)[2].metrics["loss"].get<double>(), 1.0 / 3, 1e-4);
  EXPECT_EQ((*results)[2].iteration, 3);
}

TEST_F(ProgramTest, TheGpSearchRunsFromItsPointsToEvaluateWithTrialsInFlight) {
  // 12 trials, 3 at a time, the first at a given point, then the GP (its startup
  // random) with pending trials fantasized; every trial ends, the configs fit the space.
  auto r = tune_run({"--metric", "val_acc", "--samples", "12", "--space", R"({"x": {"uniform": [0, 1]}, "k": {"qrandint": [0, 8, 2]}})",
                     "--search", R"({"type": "gp", "n_startup_trials": 4, "points_to_evaluate": [{"x": 0.3}]})",
                     "--metric-pattern", R"(val_acc=(\S+))", "--experiment-dir", exp, "--num-cpus", "3", "--progress", "none",
                     "--", py(), "trial.py", "--mode", "stdout", "--epochs", "2", "--sleep", "0.01", "--x", "${x}"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 12u);
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, trial_state::terminated) << t.id;
    EXPECT_TRUE(t.config["x"].get<double>() >= 0 && t.config["x"].get<double>() <= 1) << t.config;
    EXPECT_EQ(t.config["k"].get<int>() % 2, 0) << t.config;
  }
  EXPECT_EQ((*trials)[0].config["x"], 0.3);
  EXPECT_EQ(s->meta("search")->get<std::string>(), "gp");
  // A space the GP cannot model is refused before any trial, naming the parameter.
  fs::remove_all(exp);
  auto bad = tune_run({"--metric", "val_acc", "--search", "gp", "--space",
                       R"({"opt": {"choice": [{"m": {"uniform": [0, 1]}}, {"b": 1}]}})", "--experiment-dir", exp, "--progress",
                       "none", "--", py(), "trial.py", "--mode", "stdout"});
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("gp: parameter \"opt\""), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(exp + "/experiment.db"));
}

TEST_F(ProgramTest, BohbWithHyperBandRunsEveryTrialAndStopsSomeEarly) {
  auto r = tune_run({"--metric", "val_acc", "--samples", "12", "--space", R"({"x": {"uniform": [0, 1]}})", "--search", "bohb",
                     "--scheduler", R"({"type": "hyperband", "max_t": 9, "reduction_factor": 3})", "--metric-pattern",
                     R"(val_acc=(\S+))", "--experiment-dir", exp, "--num-cpus", "3", "--progress", "none", "--", py(),
                     "trial.py", "--mode", "stdout", "--epochs", "9", "--sleep", "0.01", "--x", "${x}"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 12u);
  int short_runs = 0;
  for (auto& t : *trials) {
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    short_runs += results->size() < 9;
  }
  EXPECT_GT(short_runs, 0) << "HyperBand stops some trials before max_t";
  EXPECT_EQ(s->meta("search")->get<std::string>(), "bohb");
}

TEST_F(ProgramTest, TwoObjectivesAndAConstraintGiveAParetoFrontOfFeasibleTrials) {
  write("two.yaml", "working_dir: .\nexperiment_dir: " + exp + "\nprogress: none\ncommand: [" + py() +
                        R"(, trial.py, --mode, two-objectives]
metrics: {acc: max, cost: min}
constraints: [over]
space: {x: {uniform: [0, 1]}}
search: tpe
num_samples: 16
)");
  const std::string file = project + "/two.yaml";
  auto r = tune_run({file, "--num-cpus", "4"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto out = summary(r);
  EXPECT_EQ(out["metric"], "acc");
  ASSERT_TRUE(out["pareto_front"].is_array()) << out;
  ASSERT_FALSE(out["pareto_front"].empty()) << out;
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 16u);
  for (auto& f : out["pareto_front"]) {
    const double x = f["config"]["x"].get<double>();
    EXPECT_LE(x, 0.6) << "an infeasible trial on the front: " << f;
    ASSERT_EQ(f["values"].size(), 2u);
    // No feasible trial beats it in both objectives.
    for (auto& t : *trials) {
      const double y = t.config["x"].get<double>();
      if (y > 0.6) continue;
      const double acc = 1 - (y - 0.3) * (y - 0.3);
      EXPECT_FALSE(acc > f["values"][0].get<double>() + 1e-9 && y < f["values"][1].get<double>() - 1e-9)
          << t.id << " dominates " << f;
    }
  }
  // The best by the first objective is feasible too.
  EXPECT_LE(out["best_config"]["x"].get<double>(), 0.6);
  // The GP models one objective: refused before any trial.
  fs::remove_all(exp);
  auto gp = tune_run({file, "--search", "gp"});
  EXPECT_NE(gp.rc, 0);
  EXPECT_NE(gp.err.find("gp models one objective without constraints; use tpe"), std::string::npos) << gp.err;
}

TEST_F(ProgramTest, TheConfigurationReachesTheCommandLineWithNoShellToInjectInto) {
  std::string evil = "a b; touch PWNED; $(touch PWNED2) `touch PWNED3` | tee PWNED4 > PWNED5 && echo \"q'";
  auto file = experiment("argv.yaml", "command: [" + py() + ", trial.py, --mode, argv, --record, " + rec +
                                          ", '--name=${name}', --x, '${x}']\n" + R"(config_args: append
env:
  MY_VAR: hello world
  FORWARDED:
space:
  x: 0.25
  name: {choice: [)" + nlohmann::json(evil).dump() + "]}\n");
  auto r = tune_run({file}, 60s, "", {{"FORWARDED", "from the shell"}});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0]["argv"], nlohmann::json({"--mode", "argv", "--record", rec, "--name=" + evil, "--x", "0.25", "--name",
                                             evil, "--x", "0.25"}));
  EXPECT_EQ(seen[0]["env"]["MY_VAR"], "hello world");
  EXPECT_EQ(seen[0]["env"]["FORWARDED"], "from the shell");
  EXPECT_EQ(seen[0]["env"]["CUDA_VISIBLE_DEVICES"], "");  // no card: none visible
  EXPECT_TRUE(contains(seen[0]["env"]["PYTHONPATH"].get<std::string>(), "/python"));
  for (auto& f : seen[0]["files"]) EXPECT_FALSE(contains(f.get<std::string>(), "PWNED")) << f;
  for (auto& p : fs::recursive_directory_iterator(files.dir()))
    EXPECT_FALSE(contains(p.path().filename().string(), "PWNED")) << p.path();
}

TEST_F(ProgramTest, TuneignoreAndTheExperimentFolderAreNotShipped) {
  write(".tuneignore", "# what the trials do not need\ndata/\n*.bin\n");
  write("data/train.csv", "1,2,3\n");
  write("weights.bin", std::string(4096, 'w'));
  write("lib/util.py", "X = 1\n");
  exp = project + "/runs/exp";  // inside the folder that is shipped
  auto file = experiment("e.yaml", "command: [" + py() + ", trial.py, --mode, argv, --record, " + rec + "]\n");
  auto r = tune_run({file});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 1u);
  std::set<std::string> got;
  for (auto& f : seen[0]["files"]) got.insert(f);
  EXPECT_TRUE(got.count("lib/util.py") && got.count("trial.py") && got.count(".tuneignore")) << seen[0]["files"];
  for (auto& f : got) {
    EXPECT_FALSE(contains(f, "data/") || contains(f, ".bin") || contains(f, "runs/")) << f << " was shipped";
  }
}

TEST_F(ProgramTest, AScriptWithASyntaxErrorFailsWithPythonsError) {
  auto r = tune_run({"--metric", "val_acc", "--samples", "2", "--experiment-dir", exp, "--progress", "none", "--", py(),
                     "broken.py"});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;  // no trial reported the metric
  auto j = summary(r);
  EXPECT_EQ(j["errors"], 2) << r.out;
  EXPECT_TRUE(j["best_trial"].is_null());
  for (auto& e : errors()) EXPECT_TRUE(contains(e, "exit code 1") && contains(e, "SyntaxError")) << e;
}

TEST_F(ProgramTest, AProgramThatExitsAtOnceFailsWithTheEndOfItsStandardError) {
  auto r = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--progress", "none", "--", py(), "trial.py", "--mode",
                     "exit"});
  EXPECT_EQ(r.rc, 1);
  auto e = errors();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(contains(e[0], "exit code 3: cannot load the data set: /data/missing.npz")) << e[0];
}

TEST_F(ProgramTest, ACommandThatCannotBeFoundIsAnErrorBeforeAnyTrialStarts) {
  auto r = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", "python9", "trial.py"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.err, "command 'python9' not found on PATH=")) << r.err;
  EXPECT_FALSE(fs::exists(exp)) << "nothing is written for an experiment that cannot run";
  auto relative = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", "./missing.sh"});
  EXPECT_TRUE(contains(relative.err, "./missing.sh does not exist in the working directory")) << relative.err;
  auto not_exec = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", "./trial.py"});
  EXPECT_TRUE(contains(not_exec.err, "not an executable file")) << not_exec.err;
  auto no_command = tune_run({"--metric", "val_acc"});
  EXPECT_EQ(no_command.rc, 2);
  EXPECT_TRUE(contains(no_command.err, "-- COMMAND")) << no_command.err;
  auto no_metric = tune_run({"--", py(), "trial.py"});
  EXPECT_TRUE(contains(no_metric.err, "--metric NAME")) << no_metric.err;
  auto placeholder = tune_run({"--metric", "val_acc", "--space", R"({"x": 1})", "--", py(), "trial.py", "--lr", "${lr}"});
  EXPECT_TRUE(contains(placeholder.err, "${lr}") && contains(placeholder.err, "it has: x")) << placeholder.err;
  auto bad_file = tune_run({project + "/nope.yaml"});
  EXPECT_TRUE(contains(bad_file.err, "no experiment file")) << bad_file.err;
  write("bad.yaml", "metric: val_acc\nnum_samples: lots\n");
  auto bad_key = tune_run({project + "/bad.yaml", "--", py(), "trial.py"});
  EXPECT_EQ(bad_key.rc, 2);
  EXPECT_TRUE(contains(bad_key.err, "bad.yaml:2:14: num_samples")) << bad_key.err;
  auto env = tune_run({"--metric", "val_acc", "--env", "CUDA_VISIBLE_DEVICES=0", "--", py(), "trial.py"});
  EXPECT_TRUE(contains(env.err, "set by libtune")) << env.err;
  auto unset = tune_run({"--metric", "val_acc", "--env", "NOT_SET_ANYWHERE_42", "--", py(), "trial.py"});
  EXPECT_TRUE(contains(unset.err, "NOT_SET_ANYWHERE_42 is to be forwarded")) << unset.err;
  auto share = tune_run({"--metric", "val_acc", "--gpus-per-trial", "lots", "--", py(), "trial.py"});
  EXPECT_EQ(share.rc, 2);
  EXPECT_TRUE(contains(share.err, "--gpus-per-trial") && contains(share.err, "or auto")) << share.err;
  // gpu: auto from the file stays with --cpus-per-trial; no GPU in this cluster: said so.
  write("auto.yaml", "metric: val_acc\nresources_per_trial: {gpu: auto}\n");
  auto auto_gpu = tune_run({project + "/auto.yaml", "--cpus-per-trial", "1", "--experiment-dir", exp, "--", py(), "trial.py"});
  EXPECT_TRUE(contains(auto_gpu.err, "gpu \"auto\" measures trials on GPUs")) << auto_gpu.err;
  EXPECT_FALSE(fs::exists(exp));
}

TEST_F(ProgramTest, AMetricNeverReportedIsAnErrorThatSaysWhatWasReported) {
  auto r = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", py(), "trial.py", "--mode", "no-metric"});
  EXPECT_EQ(r.rc, 1);
  auto e = errors();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "it ended without reporting val_acc (it reported loss)");
  // Output that matches no pattern says so.
  fs::remove_all(exp);
  auto quiet = tune_run({"--metric", "val_acc", "--metric-pattern", R"(accuracy=(\S+))", "--experiment-dir", exp, "--", py(),
                         "trial.py", "--mode", "stdout", "--epochs", "2", "--sleep", "0"});
  auto q = errors();
  ASSERT_EQ(q.size(), 1u);
  EXPECT_TRUE(contains(q[0], "no line of its output matched the metric pattern")) << q[0];
}

TEST_F(ProgramTest, ANonNumericMetricStopsTheTrialSayingWhatItReported) {
  auto r = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", py(), "trial.py", "--mode", "not-a-number"});
  EXPECT_EQ(r.rc, 1);
  auto e = errors();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(contains(e[0], "it reported val_acc = \"high\", not a finite number")) << e[0];
}

TEST_F(ProgramTest, LinesThatAreNotReportsAreCountedAndTheTrialGoesOn) {
  auto r = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", py(), "trial.py", "--mode", "garbage"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto s = store();
  auto events = s->events("trial-00001");
  ASSERT_TRUE(events);
  bool counted = false;
  for (auto& ev : *events)
    if (ev.kind == "ended") counted = ev.body.value("ignored_lines", 0) == 3 && ev.body["ignored_example"] == "this is not json";
  EXPECT_TRUE(counted) << "the ended event counts the 3 lines that were not reports";
}

TEST_F(ProgramTest, ATrialThatIgnoresSigtermIsKilledAfterTheGracePeriod) {
  auto file = experiment("t.yaml", "command: [" + py() + ", trial.py, --mode, ignore-term]\ntime_budget_s: 1.5\nstop_grace_s: 1\n");
  auto r = tune_run({file}, 60s);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_LT(r.took, 20s);
  auto events = store()->events("trial-00001");
  ASSERT_TRUE(events);
  std::string ended;
  for (auto& ev : *events)
    if (ev.kind == "ended") ended = ev.body.value("error", "");
  EXPECT_EQ(ended, "did not stop within the grace period: killed");
}

// Ctrl-C (SIGINT; SIGTERM alike): tune run stops its trials and ends through its usual
// end, with 130; the store keeps its trials as interrupted (tune resume goes on from
// them), and its embedded cluster's folder is gone, with the dashboard's socket folder,
// which is inside it.
TEST_F(ProgramTest, SigintStopsTheTrialsAndRemovesTheEmbeddedClustersFolder) {
  auto file = experiment("int.yaml", "command: [" + py() + ", trial.py, --record, " + rec + R"(]
num_samples: 2
space:
  x: {uniform: [0.0, 1.0]}
  epochs: 300
  sleep: 0.1
)");
  auto scratch = files.dir() + "/tmpdir";  // TMPDIR: where the embedded cluster's folder goes
  fs::create_directories(scratch);
  auto listing = [&](bool deep) {
    std::string out;
    if (deep)
      for (auto& e : fs::recursive_directory_iterator(scratch)) out += e.path().string() + "\n";
    else
      for (auto& e : fs::directory_iterator(scratch)) out += e.path().string() + "\n";
    return out;
  };
  pid_t driver = start_driver({file, "--num-cpus", "2", "--dashboard-port", "0"},
                              {{"TMPDIR", scratch}, {"CUDA_VISIBLE_DEVICES", ""}});
  ASSERT_TRUE(wait_until([&] { return stored() >= 4; }, 60s, 50ms)) << driver_output();
  ASSERT_GT(processes_running({"--record", rec}), 0) << "the check below would see nothing";
  EXPECT_TRUE(contains(listing(true), "/libtune-dashboard-")) << "the dashboard's socket folder is not in the cluster's";
  ::kill(driver, SIGINT);
  ::kill(driver, SIGINT);  // a terminal's Ctrl-C and the Python driver's after it: one stop
  int st = 0;
  ASSERT_EQ(::waitpid(driver, &st, 0), driver);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGINT) << st << "\n" << driver_output();
  EXPECT_TRUE(contains(driver_output(), "tune run: stopped by SIGINT")) << driver_output();
  EXPECT_EQ(listing(false), "") << "left behind in TMPDIR";
  EXPECT_TRUE(wait_until([&] { return processes_running({"--record", rec}) == 0; }, 5s)) << "its trials run on";
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  EXPECT_EQ(trials->size(), 2u);
  for (auto& t : *trials) EXPECT_EQ(t.state, "running") << t.id << ": kept as interrupted, for tune resume";
}

TEST_F(ProgramTest, WorkingDirectoryProblemsAreErrorsBeforeAnyTrial) {
  auto missing = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--working-dir", files.dir() + "/nowhere", "--",
                           py(), "trial.py"});
  EXPECT_EQ(missing.rc, 1);
  EXPECT_TRUE(contains(missing.err, "the working directory " + files.dir() + "/nowhere does not exist")) << missing.err;
  write("big/blob.dat", std::string(3 << 20, 'b'));
  write("small.txt", "s");
  write("limit.yaml", "working_dir: .\nworking_dir_limit: 1MiB\nmetric: val_acc\ncommand: [" + py() + ", trial.py]\n");
  auto large = tune_run({project + "/limit.yaml", "--experiment-dir", exp});
  EXPECT_EQ(large.rc, 1);
  EXPECT_TRUE(contains(large.err, "over the limit of 1 MiB") && contains(large.err, "big/blob.dat (3 MiB)") &&
              contains(large.err, ".tuneignore"))
      << large.err;
  fs::remove_all(project + "/big");
  fs::create_symlink("/etc", project + "/etc-link");
  auto link = tune_run({"--metric", "val_acc", "--experiment-dir", exp, "--", py(), "trial.py"});
  EXPECT_TRUE(contains(link.err, "link etc-link points outside")) << link.err;
  fs::remove(project + "/etc-link");
  // A file the driver cannot read (as another user when run as root: root reads all).
  write("secret.key", "k");
  fs::permissions(project + "/secret.key", fs::perms::owner_read | fs::perms::owner_write);
  std::vector<std::string> as_user;
  if (::geteuid() == 0) {
    if (run({"setpriv", "--version"}).rc != 0) GTEST_SKIP() << "no setpriv to run tune as another user";
    run({"chown", "-R", "65534:65534", files.dir()});
    run({"chown", "0:0", project + "/secret.key"});
    as_user = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"};
  } else {
    fs::permissions(project + "/secret.key", fs::perms::none);
  }
  std::vector<std::string> argv = as_user;
  argv.insert(argv.end(), {tune_binary(), "run", "--metric", "val_acc", "--experiment-dir", exp, "--", py(), "trial.py"});
  auto unreadable = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}, {"HOME", files.dir()}}, 60s, project);
  EXPECT_EQ(unreadable.rc, 1);
  EXPECT_TRUE(contains(unreadable.err, "cannot read " + project + "/secret.key") && contains(unreadable.err, ".tuneignore"))
      << unreadable.err;
  EXPECT_FALSE(fs::exists(exp));
}

TEST_F(ProgramTest, AReportFloodHoldsBoundedMemoryAndLosesNothing) {
  // Exec'd, not forked from a warm interpreter: that path is covered as well.
  auto file = experiment("flood.yaml", "command: [" + py() + ", trial.py, --mode, flood, --record, " + rec + "]\n" +
                                           "space: {flood_s: 4}\nenv: {LIBTUNE_FRESH_PYTHON: '1'}\n");
  auto r = tune_run({file}, 120s);
  ASSERT_EQ(r.rc, 0) << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 1u);
  int64_t flooded = seen[0]["flooded"];
  auto results = store()->results("trial-00001");
  ASSERT_TRUE(results);
  EXPECT_EQ(static_cast<int64_t>(results->size()), flooded + 1) << "every line it wrote is stored";
  EXPECT_GT(flooded, 20000) << "not much of a flood";
  // The driver and the embedded node (one process): bounded, however fast it wrote.
  // Its resting size is about 40 MiB; reading a pipe until it was empty held 150-540.
  EXPECT_LT(r.max_rss_kib, 100 * 1024) << flooded << " reports of 230 bytes";
  std::cerr << "flood: " << flooded << " reports in 4 s; tune run's largest resident set " << r.max_rss_kib / 1024 << " MiB\n";
}

// A head and two nodes on loopback (2 CPUs each), tune run against them.

// --- containment (docs/containment.md): nothing a trial starts outlives it ----------

// The pids a file lists, one per line.
std::vector<int> pids_in(const std::string& path) {
  std::vector<int> out;
  std::ifstream in(path);
  for (int p; in >> p;) out.push_back(p);
  return out;
}

bool running(int pid) {
  if (::kill(pid, 0) != 0) return false;
  auto stat = read_all("/proc/" + std::to_string(pid) + "/stat");
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

bool all_gone(const std::vector<int>& pids, std::chrono::milliseconds within = 3000ms) {
  return wait_until([&] { return std::none_of(pids.begin(), pids.end(), running); }, within, 20ms).has_value();
}

// A trial's "ended" event.
nlohmann::json ended_event(experiment_store& s, const std::string& trial) {
  if (auto ev = s.events(trial))
    for (auto& e : *ev)
      if (e.kind == "ended") return e.body;
  return nullptr;
}

class ContainmentTest : public ProgramTest, public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(Mode, ContainmentTest, ::testing::Values("auto", "subreaper"));

// A helper in a session of its own (setsid, double fork) dies with the trial that
// started it: when the trial ends, when it is stopped, when its time is up.
TEST_P(ContainmentTest, HelpersThatLeftTheTrialsProcessGroupDieWithIt) {
  auto pids = files.dir() + "/helpers";
  add_contained();
  auto file = experiment("escape.yaml", "command: [" + py() + ", contained.py, --pids, " + pids + "]\n" + R"(num_samples: 1
space:
  mode: {grid_search: [escape, forever]}
stop: {max_iterations: 5}
)");
  auto r = tune_run({file, "--num-cpus", "2", "--containment", GetParam()});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(summary(r)["errors"], 0) << r.out;
  auto helpers = pids_in(pids);
  ASSERT_EQ(helpers.size(), 2u) << "each trial started its helper";
  EXPECT_TRUE(all_gone(helpers)) << "a helper outlived its trial";
  auto s = store();
  for (auto id : {"trial-00001", "trial-00002"}) {
    auto end = ended_event(*s, id);
    EXPECT_EQ(end.value("containment", ""), GetParam() == "auto" ? "cgroup" : "subreaper") << end;
    EXPECT_EQ(end.value("left_behind_count", 0), 1) << id << ": " << end;
    auto ev = s->events(id);
    ASSERT_TRUE(ev);
    EXPECT_TRUE(std::any_of(ev->begin(), ev->end(), [](auto& e) { return e.kind == "left_behind"; })) << id;
  }
  if (GetParam() == "auto" && !ended_event(*s, "trial-00001").contains("host_memory_peak"))
    GTEST_LOG_(INFO) << "no memory accounting here";
}

TEST_P(ContainmentTest, ATrialStoppedByTheTimeBudgetTakesItsHelperWithIt) {
  auto pids = files.dir() + "/helpers";
  add_contained();
  auto file = experiment("budget.yaml", "command: [" + py() + ", contained.py, --pids, " + pids + "]\n" + R"(space: {mode: forever}
time_budget_s: 1.5
stop_grace_s: 1
)");
  auto r = tune_run({file, "--containment", GetParam()});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto helpers = pids_in(pids);
  ASSERT_EQ(helpers.size(), 1u);
  EXPECT_TRUE(all_gone(helpers));
}

// Where the node finds no cgroup (here: /sys/fs/cgroup hidden under a tmpfs in a mount
// namespace of its own, as in some containers), `auto` falls back to the subreaper, says
// so, and still kills the helper that left the trial's process group.
TEST_F(ProgramTest, WithoutCgroupsANodeFallsBackToTheSubreaperAndStillLeavesNothing) {
  if (::geteuid() != 0 || ::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "needs root and unshare";
  add_contained();
  auto pids = files.dir() + "/helpers";
  auto file = experiment("hidden.yaml", "command: [" + py() + ", contained.py, --pids, " + pids + "]\nspace: {mode: escape}\n");
  auto r = run({"/usr/bin/unshare", "-m", "--", "/bin/sh", "-c", "mount -t tmpfs tmpfs /sys/fs/cgroup && exec \"$@\"", "sh",
                tune_binary(), "run", file},
               {{"CUDA_VISIBLE_DEVICES", ""}}, 120s, project);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto helpers = pids_in(pids);
  ASSERT_EQ(helpers.size(), 1u);
  EXPECT_TRUE(all_gone(helpers));
  auto end = ended_event(*store(), "trial-00001");
  EXPECT_EQ(end.value("containment", ""), "subreaper") << end;
  EXPECT_EQ(end.value("left_behind_count", 0), 1) << end;
}

// Host limits through the cgroup (root on this machine; skipped where the node cannot
// enforce them, which it says).
std::string limits_or_empty() {
  auto c = containment::open("auto", "probe");
  return c && (*c)->caps().cgroup ? (*c)->caps().describe() : "";
}

TEST_F(ProgramTest, AForkBombIsHeldAtItsProcessLimitWhileItsNeighbourCompletes) {
  auto caps = limits_or_empty();
  if (caps.find("pids") == std::string::npos || caps.find("not enforced: pids") != std::string::npos)
    GTEST_SKIP() << "pids not enforced here: " << caps;
  add_contained();
  auto file = experiment("bomb.yaml", "command: [" + py() + ", contained.py]\n" + R"(space:
  mode: {grid_search: [bomb, calm]}
)");
  auto r = tune_run({file, "--num-cpus", "2", "--trial-max-pids", "64"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto res = s->results(t.id);
    ASSERT_TRUE(res);
    if (t.config.value("mode", "") == "bomb") {
      ASSERT_EQ(res->size(), 1u);
      EXPECT_LT((*res)[0].metrics["forked"].get<double>(), 64) << "fork went past pids.max";
      EXPECT_GT((*res)[0].metrics["forked"].get<double>(), 10);
    } else {
      EXPECT_EQ(res->size(), 10u) << "the neighbour did not finish";
    }
  }
}

TEST_F(ProgramTest, AMemoryHogIsKilledAtItsRequestAndSaysSoWhileItsNeighbourCompletes) {
  auto caps = limits_or_empty();
  if (caps.find("memory") == std::string::npos || caps.find("not enforced: memory") != std::string::npos)
    GTEST_SKIP() << "memory not enforced here: " << caps;
  add_contained();
  auto file = experiment("hog.yaml", "command: [" + py() + ", contained.py]\n" + R"(space:
  mode: {grid_search: [hog, calm]}
resources_per_trial: {cpu: 1, memory: 268435456}
)");
  auto r = tune_run({file, "--num-cpus", "2"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 2u);
  for (auto& t : *trials) {
    if (t.config.value("mode", "") == "hog") {
      EXPECT_EQ(t.state, "error");
      EXPECT_TRUE(contains(t.error, "OOM killer") && contains(t.error, "256 MiB")) << t.error;
      auto res = s->results(t.id);
      ASSERT_TRUE(res);
      EXPECT_LE(res->size(), 16u) << "it got past 256 MiB";
      EXPECT_GE(res->size(), 4u);
    } else {
      EXPECT_EQ(t.state, "terminated") << t.error;
    }
  }
}

TEST_F(ProgramTest, ACpuHogIsHeldToItsShare) {
  auto caps = limits_or_empty();
  if (caps.find("cpu") == std::string::npos || caps.find("not enforced: memory, cpu") != std::string::npos ||
      caps.find("not enforced: cpu") != std::string::npos)
    GTEST_SKIP() << "cpu not enforced here: " << caps;
  add_contained();
  auto file = experiment("spin.yaml", "command: [" + py() + ", contained.py]\n" + R"(space: {mode: spin, seconds: 3}
resources_per_trial: {cpu: 0.25}
)");
  auto r = tune_run({file, "--num-cpus", "2"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto s = store();
  auto res = s->results("trial-00001");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->size(), 1u);
  double share = (*res)[0].metrics["cpu_share"].get<double>();
  // Two busy threads (one CPU's worth under the GIL) held to a quarter of a CPU.
  EXPECT_LT(share, 0.35) << "it used " << share << " of a CPU";
  EXPECT_GT(share, 0.1);
  auto t = s->trial("trial-00001");
  ASSERT_TRUE(t);
  EXPECT_GT(t->info.value("cpu_seconds", 0.0), 0.3) << t->info;
  EXPECT_LT(t->info.value("cpu_seconds", 0.0), 1.4) << t->info;
}

TEST_F(ProgramTest, ANodeThatCannotEnforceAMemoryRequestRefusesTheTrialSayingWhy) {
  add_contained();
  auto file = experiment("mem.yaml", "command: [" + py() + ", contained.py]\n" + R"(space: {mode: calm}
resources_per_trial: {cpu: 1, memory: 268435456}
max_failures: 0
)");
  auto r = tune_run({file, "--containment", "subreaper"});
  auto errs = errors();
  ASSERT_FALSE(errs.empty()) << r.out << r.err;
  EXPECT_TRUE(contains(errs[0], "cannot enforce host memory")) << errs[0];
}

class ProgramClusterTest : public ProgramTest {
 protected:
  int port = free_port();
  std::string address = "127.0.0.1:" + std::to_string(port);
  std::vector<std::pair<std::string, int>> nodes;  // id, pid

  void SetUp() override {
    ProgramTest::SetUp();
    auto h = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1"});
    ASSERT_EQ(h.rc, 0) << h.out << h.err;
    for (int i = 0; i < 2; ++i) {
      auto n = files.tune({"start", "--address", address, "--num-cpus", "2"});
      ASSERT_EQ(n.rc, 0) << n.out << n.err;
      nodes.emplace_back(node_id_in(n.out), pid_in(n.out));
    }
  }
  void TearDown() override { files.tune({"stop", "--grace", "3"}); }

  // The arguments with this cluster's address and token, before a command's `--`.
  std::vector<std::string> at_cluster(std::vector<std::string> args) {
    auto end = std::find(args.begin(), args.end(), "--");
    args.insert(end, {"--address", address, "--token-file", files.token_file()});
    return args;
  }

};

TEST_F(ProgramClusterTest, ATrialWhoseNodeIsKilledGoesOnElsewhereFromItsCheckpoint) {
  auto file = experiment("ft.yaml", "command: [" + py() + ", trial.py, --record, " + rec + "]\n" + R"(num_samples: 2
max_failures: 2
resources_per_trial: {cpu: 1}
space:
  x: {uniform: [0.0, 1.0]}
  epochs: 40
  sleep: 0.1
)");
  pid_t driver = start_driver(at_cluster({file}));
  // The node that runs a trial (both may: PACK puts them together), once results are in.
  std::string victim;
  ASSERT_TRUE(wait_until(
      [&] {
        if (stored() < 10) return false;
        auto s = experiment_store::open(exp);
        auto trials = s ? (*s)->trials() : expected<std::vector<trial_row>>{status{errc::not_found, ""}};
        if (trials)
          for (auto& t : *trials)
            if (t.state == "running" && !t.info.value("node", "").empty()) victim = t.info.value("node", "");
        return !victim.empty();
      },
      60s, 50ms))
      << "no results; tune run printed:\n" << driver_output();
  int killed = 0;
  for (auto& [id, pid] : nodes)
    if (id == victim) killed += ::kill(pid, SIGKILL) == 0;
  ASSERT_EQ(killed, 1) << victim << " is not one of the nodes";
  int st = 0;
  ASSERT_TRUE(wait_until([&] { return ::waitpid(driver, &st, WNOHANG) == driver; }, 120s)) << "the experiment did not end";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  auto s = store();
  auto done = s->trials();
  ASSERT_TRUE(done);
  int restarted = 0;
  for (auto& t : *done) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    EXPECT_EQ(results->size(), 40u) << t.id;
    if (auto ev = s->events(t.id))
      for (auto& e : *ev) restarted += e.kind == "restart";
  }
  EXPECT_GE(restarted, 1);
  expect_iterations_once(*s);
  int from_checkpoint = 0;
  for (auto& e : json_lines(rec)) from_checkpoint += e["restored_from"].get<int>() > 0;
  EXPECT_GE(from_checkpoint, 1) << "the restarted trial went on from its checkpoint";
}

// A node killed with SIGKILL takes every process of its trials with it, the ones that
// left their process group too (each trial's keeper kills its cgroup, or sweeps as a
// subreaper, when the node dies). tune status says how each node contains its trials.
TEST_F(ProgramClusterTest, ANodeKilledWithSigkillLeavesNoProcessOfItsTrialsBehind) {
  auto status = files.tune({"status", "--address", address, "--token-file", files.token_file()});
  ASSERT_EQ(status.rc, 0) << status.err;
  EXPECT_TRUE(contains(status.out, "containment: ")) << status.out;
  auto pids = files.dir() + "/helpers";
  add_contained();
  auto file = experiment("nodekill.yaml", "command: [" + py() + ", contained.py, --pids, " + pids + "]\n" + R"(num_samples: 2
max_failures: 3
resources_per_trial: {cpu: 1}
space: {mode: forever}
stop: {max_iterations: 200}
)");
  pid_t driver = start_driver(at_cluster({file}));
  ASSERT_TRUE(wait_until([&] { return pids_in(pids).size() >= 2; }, 60s, 50ms)) << "the trials started no helpers";
  auto helpers = pids_in(pids);
  for (auto& [id, pid] : nodes) ::kill(pid, SIGKILL);  // both: every trial's node dies
  EXPECT_TRUE(all_gone(helpers, 5000ms)) << "a helper outlived its node";
  ::kill(driver, SIGKILL);
  ::waitpid(driver, nullptr, 0);
}

TEST_F(ProgramClusterTest, AKilledDriverIsResumedWithTuneResume) {
  // --record names this test's trials alone (other tests' trials may run beside them).
  auto file = experiment("resume.yaml", "command: [" + py() + ", trial.py, --record, " + rec + R"(]
num_samples: 3
max_concurrent_trials: 3
resources_per_trial: {cpu: 1}
space:
  x: {uniform: [0.0, 1.0]}
  epochs: 30
  sleep: 0.1
)");
  pid_t driver = start_driver(at_cluster({file}));
  // Killed once results are stored and a checkpoint copy of each trial is (committed).
  auto copied = [&] {
    auto s = experiment_store::open(exp);
    if (!s) return false;
    auto trials = (*s)->trials();
    if (!trials || trials->size() < 3) return false;
    for (auto& t : *trials) {
      auto events = (*s)->events(t.id);
      if (!events || std::none_of(events->begin(), events->end(), [](auto& e) { return e.kind == "checkpoint_stored"; }))
        return false;
    }
    return true;
  };
  ASSERT_TRUE(wait_until([&] { return stored() >= 15 && copied(); }, 60s, 50ms))
      << "no results; tune run printed:\n" << driver_output();
  ASSERT_GT(processes_running({"--record", rec}), 0) << "the check below would see nothing";
  ::kill(-driver, SIGKILL);
  ::waitpid(driver, nullptr, 0);
  // Its trials end with it.
  EXPECT_TRUE(wait_until([&] { return processes_running({"--record", rec}) == 0; }, 10s)) << "the dead driver's trials run on";
  auto resumed = files.tune({"resume", exp});
  ASSERT_EQ(resumed.rc, 0) << resumed.out << resumed.err;
  EXPECT_TRUE(contains(resumed.err, "start again from their checkpoints")) << resumed.err;
  auto s = store();
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 3u);
  int restored = 0;
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    EXPECT_EQ(results->size(), 30u) << t.id;
    restored += t.info.contains("restored_from");
  }
  EXPECT_EQ(restored, 3) << "each went on from its checkpoint";
  expect_iterations_once(*s);
  EXPECT_NE(summary(resumed)["best_trial"], nullptr) << resumed.out;
}

TEST_F(ProgramClusterTest, AProgramMissingOnTheNodesFailsItsTrialsAndTheClusterRunsOn) {
  // The driver cannot know a remote node's PATH: each trial fails to start, saying so.
  auto r = tune_run(at_cluster({"--metric", "val_acc", "--samples", "2", "--experiment-dir", exp, "--progress", "none", "--",
                                "python9", "trial.py"}));
  EXPECT_EQ(r.rc, 1) << r.err;
  for (auto& e : errors())
    EXPECT_TRUE(contains(e, ": command 'python9' not found on PATH=") && contains(e, "node node-")) << e;
  fs::remove_all(exp);
  auto ok = tune_run(at_cluster({"--metric", "val_acc", "--samples", "2", "--experiment-dir", exp, "--progress", "none", "--",
                                 py(), "trial.py", "--epochs", "2", "--sleep", "0"}));
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(summary(ok)["errors"], 0);
  auto status = files.status(address);
  ASSERT_TRUE(status.is_object());
  int alive = 0;
  for (auto& n : status["nodes"]) alive += n.value("alive", false);
  EXPECT_EQ(alive, 2);
}

}  // namespace
}  // namespace tune::test

namespace tune::test {
namespace {

// Shipping the working directory between hosts: the head on host 0, a node on host 1, and
// tune run on host 2 with the project only in a tmpfs of its own mount namespace, so that
// no other process can read it by any path: the node gets it by content, over the network.
class ProgramNetnsTest : public ProgramTest {
 protected:
  std::unique_ptr<netns_lab> lab;
  std::string head = netns_lab::address(0) + ":6380";
  std::string node_id;

  void SetUp() override {
    ProgramTest::SetUp();
    if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (run({"ip", "netns", "list"}).rc != 0) GTEST_SKIP() << "no `ip netns` here";
    lab = std::make_unique<netns_lab>(3);
    if (!lab->ok()) {
      auto why = lab->why();
      lab.reset();
      GTEST_SKIP() << "cannot make network namespaces here: " << why;
    }
    auto h = files.tune({"start", "--head", "--host", netns_lab::address(0)}, lab->on(0), runtime(0));
    ASSERT_EQ(h.rc, 0) << h.out << h.err;
    auto n = files.tune({"start", "--address", head, "--num-cpus", "2"}, lab->on(1), runtime(1));
    ASSERT_EQ(n.rc, 0) << n.out << n.err;
    node_id = node_id_in(n.out);
  }
  void TearDown() override {
    if (!lab) return;
    for (int h : {1, 0}) files.tune({"stop", "--grace", "3"}, lab->on(h), runtime(h));
    lab.reset();
  }
  std::string runtime(int host) const { return files.dir() + "/host" + std::to_string(host); }
  std::string node_dir() const { return runtime(1) + "/" + node_id; }

  // tune run on host 2, from a private copy of the project.
  run_result drive(const std::string& name) {
    std::string own = files.dir() + "/driver-only";
    fs::create_directories(own);
    std::string script =
        "own=\"$1\" src=\"$2\" tune=\"$3\"; shift 3; "
        "mount -t tmpfs tune-driver \"$own\" && cp -a \"$src\"/. \"$own\"/ && cd \"$own\" && exec \"$tune\" run \"$@\"";
    std::vector<std::string> argv = lab->on(2);
    argv.insert(argv.end(), {"sh", "-c", script, "sh", own, project, tune_binary(), name, "--address", head, "--token-file",
                             files.token_file()});
    auto r = run(argv, {{"CUDA_VISIBLE_DEVICES", ""}}, 90s);
    EXPECT_TRUE(fs::is_empty(own)) << "the driver's copy is visible outside it";
    return r;
  }
};

TEST_F(ProgramNetnsTest, AWorkingDirectoryOnlyTheDriverHasIsShippedToANodeOnAnotherHost) {
  write("lib/model.py", "DEPTH = 3\n");
  write("data/big.bin", std::string(2 << 20, 'd'));
  write(".tuneignore", "data/\n");
  write("e.yaml", "working_dir: .\nmetric: val_acc\nexperiment_dir: " + exp + "\nnum_samples: 2\nprogress: none\n" +
                      "command: [" + py() + ", trial.py, --mode, argv, --record, " + rec + "]\n");
  auto r = drive("e.yaml");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 2u);
  for (auto& e : seen) {
    EXPECT_TRUE(contains(e["cwd"].get<std::string>(), node_dir() + "/trials/trial-0000")) << e["cwd"] << " not on host 1's node";
    std::set<std::string> got(e["files"].begin(), e["files"].end());
    EXPECT_TRUE(got.count("lib/model.py") && got.count("trial.py") && !got.count("data/big.bin")) << e["files"];
  }
  // The node's cache holds every shipped file under its SHA-256 (by sha256sum, another
  // implementation than ours), and not the ignored one.
  auto manifest = nlohmann::json::parse(read_all(exp + "/workdir.json"));
  for (auto& f : manifest["files"]) {
    auto cached = node_dir() + "/files/" + f["sha256"].get<std::string>();
    auto sum = run({"sha256sum", cached});
    ASSERT_EQ(sum.rc, 0) << f << " not in the node's cache";
    EXPECT_EQ(sum.out.substr(0, 64), f["sha256"]);
  }
  EXPECT_EQ(manifest["files"].size(), 6u) << manifest;  // .tuneignore, broken.py, e.yaml, gang.py, lib/model.py, trial.py
  // A second experiment fetches nothing: the node has it all.
  fs::remove_all(exp);
  auto again = drive("e.yaml");
  ASSERT_EQ(again.rc, 0) << again.out << again.err;
  auto log = read_all(runtime(1) + "/" + node_id + ".log");
  size_t fetches = 0;
  for (auto p = log.find("working directory: fetched"); p != std::string::npos; p = log.find("working directory: fetched", p + 1))
    ++fetches;
  EXPECT_EQ(fetches, 1u) << log;
}

// --- trials of several workers (docs/workers.md) ----------------------------------------

TEST_F(ProgramTest, AGangsWorkersGetTheirRanksMeetAtRankZerosPortAndOnlyRankZeroReports) {
  auto file = experiment("gang.yaml", "command: [" + py() + ", gang.py, --record, " + rec + R"(]
num_samples: 2
workers: {count: 3, resources: {cpu: 0.5}, join_timeout_s: 60}
space: {x: {uniform: [0.0, 1.0]}}
)");
  auto r = tune_run({file, "--num-cpus", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto seen = json_lines(rec);
  ASSERT_EQ(seen.size(), 6u) << r.err;
  std::map<std::string, std::set<std::string>> ranks, ports;
  for (auto& w : seen) {
    EXPECT_EQ(w["WORLD_SIZE"], "3");
    EXPECT_EQ(w["LOCAL_WORLD_SIZE"], "3");  // one node: all of them local
    EXPECT_EQ(w["LOCAL_RANK"], w["RANK"]);
    EXPECT_EQ(w["NODE_RANK"], "0");
    EXPECT_EQ(w["MASTER_ADDR"], "127.0.0.1");
    std::string id = w["TUNE_TRIAL_ID"];
    ranks[id].insert(w["RANK"].get<std::string>());
    ports[id].insert(w["MASTER_PORT"].get<std::string>());
  }
  ASSERT_EQ(ranks.size(), 2u);
  for (auto& [id, rs] : ranks) {
    EXPECT_EQ(rs, (std::set<std::string>{"0", "1", "2"})) << id;
    EXPECT_EQ(ports[id].size(), 1u) << id << ": one rendezvous per gang";
  }
  auto s = store();
  ASSERT_TRUE(s);
  auto trials = s->trials();
  ASSERT_TRUE(trials);
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = s->results(t.id);
    ASSERT_TRUE(results);
    ASSERT_EQ(results->size(), 3u) << t.id << ": rank 0's results are the trial's, the others' are not";
    for (auto& row : *results) EXPECT_EQ(row.metrics["rank"], 0);
    auto events = s->events(t.id);
    ASSERT_TRUE(events);
    int running = 0;
    for (auto& e : *events)
      if (e.kind == "workers_running") {
        ++running;
        EXPECT_EQ(e.body["world_size"], 3);
        EXPECT_EQ(e.body["workers"].size(), 3u);
      }
    EXPECT_EQ(running, 1) << t.id;
  }
}

TEST_F(ProgramTest, AWorkerThatFailsEndsItsGangWhichRestartsAndThenFailsNamingTheRank) {
  auto file = experiment("gang.yaml", "command: [" + py() + ", gang.py, --record, " + rec + R"(, --fail-rank, 2, --leader-sleep, 60]
max_failures: 1
workers: {count: 3, resources: {cpu: 0.5}}
)");
  auto began = std::chrono::steady_clock::now();
  auto r = tune_run({file, "--num-cpus", "2"});
  auto took = std::chrono::steady_clock::now() - began;
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(summary(r)["errors"], 1) << r.out;
  EXPECT_LT(took, 30s) << "rank 0 sleeps 60 s: it was not ended with the gang";
  EXPECT_EQ(json_lines(rec).size(), 6u) << "two attempts of three workers";
  auto errors = this->errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(contains(errors[0], "worker rank 2 (node ")) << errors[0];
  EXPECT_TRUE(contains(errors[0], "exit code 3")) << errors[0];
  EXPECT_TRUE(contains(r.err, "rank 2 fails on purpose")) << r.err;
  EXPECT_EQ(processes_running({"--record", rec}), 0) << "a worker outlived its gang";
}

TEST_F(ProgramTest, AWorkerThatNeverJoinsIsNamedWhenTheJoinTimeoutEnds) {
  auto file = experiment("gang.yaml", "command: [" + py() + ", gang.py, --record, " + rec + R"(, --no-join-rank, 1]
workers: {count: 2, resources: {cpu: 0.5}, join_timeout_s: 1}
)");
  auto r = tune_run({file, "--num-cpus", "2"});
  EXPECT_EQ(summary(r)["errors"], 1) << r.out << r.err;
  auto errors = this->errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(contains(errors[0], "worker ranks 0, 1 did not join the others within 1 s")) << errors[0];
  EXPECT_EQ(processes_running({"--record", rec}), 0) << "a worker outlived its gang";
}

TEST_F(ProgramTest, AGangThatCanNeverFitOrIsMisstatedIsRefusedBeforeAnyTrial) {
  auto zero = tune_run({experiment("z.yaml", "command: [" + py() + ", gang.py]\nworkers: {count: 0}\n"), "--num-cpus", "2"});
  EXPECT_EQ(zero.rc, 2) << zero.err;
  EXPECT_TRUE(contains(zero.err, "workers.count")) << zero.err;
  auto both = tune_run({experiment("b.yaml", "command: [" + py() + ", gang.py]\nworkers: {count: 2}\nbundles: [{cpu: 1}]\n"),
                        "--num-cpus", "2"});
  EXPECT_NE(both.rc, 0);
  EXPECT_TRUE(contains(both.err, "leave out bundles")) << both.err;
  auto bad = tune_run({experiment("r.yaml", "command: [" + py() + ", gang.py]\nworkers: {count: 2, resources: {cpu: -1}}\n"),
                       "--num-cpus", "2"});
  EXPECT_NE(bad.rc, 0);
  EXPECT_TRUE(contains(bad.err, "workers.resources")) << bad.err;
  auto big = tune_run({experiment("f.yaml", "command: [" + py() + ", gang.py]\nworkers: {count: 5, resources: {cpu: 1}}\n"),
                       "--num-cpus", "4"},
                      60s);
  EXPECT_EQ(summary(big)["errors"], 1) << big.out;
  EXPECT_TRUE(contains(big.err, "is infeasible: the 5 bundles do not fit together")) << big.err;
  fs::remove_all(exp);  // the infeasible experiment's folder
  auto spread = tune_run({experiment("s.yaml", "command: [" + py() + ", gang.py]\nstrategy: strict_spread\n"
                                               "workers: {count: 2, resources: {cpu: 1}}\n"),
                          "--num-cpus", "4"},
                         60s);
  EXPECT_TRUE(contains(spread.err, "STRICT_SPREAD needs 2 nodes")) << spread.err;
  EXPECT_EQ(json_lines(rec).size(), 0u) << "a worker started";
}

}  // namespace
}  // namespace tune::test
