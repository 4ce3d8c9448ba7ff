// bench_start: how long a trial takes from the controller's start (its placement group
// asked for) to its first result, for a C++ trainable and for a Python program trial
// (bench/python/sleeper.py, reporting at once through the libtune module), side by side:
// --trials (40) of each, one at a time, alternately, on a head and a node process on
// loopback. The same Python script run by hand here (fork, exec, its report read from a
// pipe) is the interpreter's own start-up; what libtune adds is the difference.
// Last line: {"cpp_p50_ms", "python_p50_ms", "python_alone_p50_ms", "python_added_p50_ms", ...}.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>
#include <iostream>
#include <nlohmann/json.hpp>

#include "procs.hpp"
#include "tune/tune.hpp"

namespace {

void sleeper(tune::trial_context& ctx) {
  int64_t reports = ctx.integer("reports").value();
  for (int64_t i = 1; i <= reports; ++i)
    if (!ctx.report({{"score", static_cast<double>(i)}})) return;
}
TUNE_TRAINABLE(sleeper);

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

// The script by hand: from fork to its first report line on fd 3, in milliseconds.
double by_hand(const std::string& python, const std::string& dir) {
  int fds[2];
  if (::pipe(fds) != 0) tune::bench::die("pipe");
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 3);
    if (::chdir(dir.c_str()) != 0) ::_exit(127);
    ::setenv("TUNE_TRIAL_ID", "by-hand", 1);
    ::setenv("TUNE_TRIAL_CONFIG", R"({"reports": 1, "sleep_ms": 0})", 1);
    ::setenv("TUNE_REPORT_FD", "3", 1);
    ::execl(python.c_str(), python.c_str(), "sleeper.py", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  char c;
  double ms = -1;
  if (::read(fds[0], &c, 1) == 1)
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  tune::run_if_trial_worker(argc, argv);  // first: trials run this program
  int trials = 40;
  std::string python = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--trials" && i + 1 < argc) trials = std::stoi(argv[++i]);
    else if (a == "--python-bin" && i + 1 < argc) python = argv[++i];
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_start [--trials 40] [--python-bin /usr/bin/python3]\n";
      return 0;
    } else {
      tune::bench::die("unknown option " + a + " (see --help)");
    }
  }
  const char* moved = std::getenv("BENCH_PYTHON_DIR");
  std::string dir = moved && *moved ? moved : BENCH_PYTHON_DIR;
  const char* module = std::getenv("LIBTUNE_PYTHON_DIR");
  std::string module_dir = module && *module ? module : LIBTUNE_PYTHON_DIR;
  tune::bench::make_scratch("bench_start");
  // Two nodes, told apart by a custom resource: one puts each trial in a cgroup of its own
  // (the default wherever the node can), the other contains them with a subreaper keeper
  // (no cgroup): the difference is what a cgroup costs a trial's start.
  auto address = tune::bench::start_loopback_cluster(1, "--num-cpus 1 --containment cgroup --resources '{\"cgroup\": 64}'");
  auto out = tune::bench::run(tune::bench::tune_binary() + " start --address " + address +
                              " --num-cpus 1 --containment subreaper --resources '{\"subreaper\": 64}'");
  if (out.find("joined") == std::string::npos) tune::bench::die("the subreaper node did not start: " + out);
  tune::cluster_options o;
  o.address = address;
  o.token_file = tune::bench::scratch::token_path;
  auto c = tune::cluster::start(o);
  if (!c) tune::bench::die(c.error().message());
  // By hand first: the interpreter, its imports and the script, with nothing of libtune's.
  ::setenv("PYTHONPATH", module_dir.c_str(), 1);
  std::vector<double> alone;
  for (int i = 0; i < trials; ++i) alone.push_back(by_hand(python, dir));
  std::map<std::string, std::vector<double>> latency;
  tune::search_space space{{"reports", 1}, {"sleep_ms", 0}};
  for (int round = 0; round < 4 * 4; ++round) {  // the four kinds in turn, in rounds of trials / 4
    bool py = round % 2 == 1;
    std::string where = (round / 2) % 2 == 0 ? "cgroup" : "subreaper";
    tune::tune_config cfg;
    cfg.name = "bench_start";
    cfg.metric = "score";
    cfg.num_samples = std::max(1, trials / 4);
    cfg.max_concurrent_trials = 1;
    cfg.resources_per_trial = tune::resources{{"cpu", 1}, {where, 1}};
    cfg.progress = tune::progress_style::none;
    cfg.experiment_dir = tune::bench::scratch::dir + "/exp-" + std::to_string(round);
    auto r = py ? tune::tuner{*c, tune::program{.command = {python, "sleeper.py"}, .working_dir = dir}, space, cfg}.fit()
                : tune::tuner{*c, "sleeper", space, cfg}.fit();
    if (!r) tune::bench::die(r.error().message());
    auto rows = r->trials();
    if (!rows || r->errors() > 0) tune::bench::die("trials failed: see " + cfg.experiment_dir);
    for (auto& t : *rows) {
      auto h = r->history(t.id);
      if (!h || h->empty()) tune::bench::die(t.id + " reported nothing");
      if (t.info.value("containment", where) != where)
        tune::bench::die(t.id + " ran with " + t.info.value("containment", std::string{"?"}) + ", not " + where);
      latency[std::string{py ? "python" : "cpp"} + (where == "cgroup" ? "" : "_subreaper")].push_back((h->front().time - t.created) * 1000);
    }
  }
  double py50 = percentile(latency["python"], 0.5), alone50 = percentile(alone, 0.5);
  double cpp50 = percentile(latency["cpp"], 0.5), cpp_sr50 = percentile(latency["cpp_subreaper"], 0.5);
  double py_sr50 = percentile(latency["python_subreaper"], 0.5);
  nlohmann::json j{{"cpp_p50_ms", cpp50},
                   {"cpp_p90_ms", percentile(latency["cpp"], 0.9)},
                   {"python_p50_ms", py50},
                   {"python_p90_ms", percentile(latency["python"], 0.9)},
                   {"cpp_subreaper_p50_ms", cpp_sr50},
                   {"python_subreaper_p50_ms", py_sr50},
                   {"cgroup_added_cpp_p50_ms", cpp50 - cpp_sr50},
                   {"cgroup_added_python_p50_ms", py50 - py_sr50},
                   {"python_alone_p50_ms", alone50},
                   {"python_added_p50_ms", py50 - alone50},
                   {"trials", latency["python"].size()},
                   {"python_bin", python},
                   {"cpus", std::thread::hardware_concurrency()}};
  std::cout << j.dump() << std::endl;
  return 0;
}
