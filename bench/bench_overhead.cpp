// bench_overhead: what the tuner adds to the trials' own time. --trials trials (2,000)
// of --reports results each (10), each result after --sleep-ms of sleep (50 ms:
// standing in for work done elsewhere), one logical GPU each, on a cluster of node
// processes on loopback (--nodes 4 x --gpus-per-node 16 = 64 slots). The ideal wall
// time is trials x reports x sleep / slots (15.6 s); the benchmark reports the
// experiment's wall time over it, median of --repeats runs. Everything real: a head and
// node daemons, a placement group and a worker process per trial, every result stored.
// Last line: {"wall_over_ideal": ..., "wall_s": ..., "ideal_s": ..., ...}.
//
// --python: the trial is bench/python/sleeper.py (the same workload, reporting through the
// libtune Python module), run as `PYTHON sleeper.py` in its shipped working directory;
// --both runs the C++ and the Python trials alternately, side by side, and reports both.
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "procs.hpp"
#include "tune/tune.hpp"

namespace {

// CPU seconds of the cluster's daemons (their pid files in the runtime folder): each
// process's own, and its reaped children's (a node's: the trials' keepers and workers).
struct cpu_split {
  double head = 0, nodes = 0, trials = 0, driver = 0;
};

// utime, stime, cutime, cstime of a process, in seconds (zeros when it is gone).
std::array<double, 4> times_of(int pid) {
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');
  std::array<double, 4> t{};
  if (close == std::string::npos) return t;
  std::istringstream f(text.substr(close + 2));
  std::string skip;
  for (int i = 3; i < 14; ++i) f >> skip;  // fields 3..13
  for (auto& v : t) {
    f >> v;
    v /= tick;
  }
  return t;
}

// The children of a process (every thread's), from /proc.
std::vector<int> children_of(int pid) {
  std::vector<int> out;
  std::error_code ec;
  for (auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "children");
    for (int child; in >> child;) out.push_back(child);
  }
  return out;
}

cpu_split cluster_cpu(const std::string& runtime_dir) {
  cpu_split c;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(runtime_dir, ec)) {
    auto name = e.path().filename().string();
    if (name.size() < 5 || name.substr(name.size() - 4) != ".pid") continue;
    int pid = 0;
    std::ifstream(e.path()) >> pid;
    if (pid <= 0) continue;
    auto t = times_of(pid);
    (name.rfind("head", 0) == 0 ? c.head : c.nodes) += t[0] + t[1];
    // The trials' processes: reaped by the node, or by its spawner (a child of the
    // node that forks the keepers, which reap the workers), live ones by now.
    c.trials += t[2] + t[3];
    for (int child : children_of(pid)) {
      auto k = times_of(child);
      c.trials += k[0] + k[1] + k[2] + k[3];
      for (int grandchild : children_of(child)) {
        auto g = times_of(grandchild);
        c.trials += g[0] + g[1] + g[2] + g[3];
      }
    }
  }
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  c.driver = static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
             static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec) / 1e6;
  return c;
}

void sleeper(tune::trial_context& ctx) {
  int64_t reports = ctx.integer("reports").value(), sleep_ms = ctx.integer("sleep_ms").value();
  for (int64_t i = 1; i <= reports; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    if (!ctx.report({{"score", static_cast<double>(i)}})) return;
  }
}
TUNE_TRAINABLE(sleeper);

}  // namespace

int main(int argc, char** argv) {
  tune::run_if_trial_worker(argc, argv);  // first: trials run this program
  int trials = 2000, reports = 10, sleep_ms = 50, nodes = 4, gpus_per_node = 16, repeats = 1;
  std::string keep;  // experiments kept here (for a look at their timelines)
  std::string containment = "auto";  // the nodes' --containment
  bool cpp = true, python = false, with_tls = false, reuse = false;
  std::string python_bin = ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const char* moved = std::getenv("BENCH_PYTHON_DIR");  // the sources moved to another machine
  std::string python_dir = moved && *moved ? moved : BENCH_PYTHON_DIR;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) tune::bench::die(a + " needs a value");
      return std::stoi(argv[++i]);
    };
    if (a == "--keep") {
      if (i + 1 >= argc) tune::bench::die("--keep needs a folder");
      keep = argv[++i];
    } else if (a == "--containment") {
      if (i + 1 >= argc) tune::bench::die("--containment needs auto, cgroup or subreaper");
      containment = argv[++i];
    } else if (a == "--trials") trials = next();
    else if (a == "--reports") reports = next();
    else if (a == "--sleep-ms") sleep_ms = next();
    else if (a == "--nodes") nodes = next();
    else if (a == "--gpus-per-node") gpus_per_node = next();
    else if (a == "--repeats") repeats = next();
    else if (a == "--python") cpp = false, python = true;
    else if (a == "--both") cpp = python = true;
    else if (a == "--tls") with_tls = true;
    else if (a == "--reuse") reuse = true;
    else if (a == "--python-bin") {
      if (i + 1 >= argc) tune::bench::die("--python-bin needs a program");
      python_bin = argv[++i];
    } else if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_overhead [--trials 2000] [--reports 10] [--sleep-ms 50] [--nodes 4]\n"
                   "                      [--gpus-per-node 16] [--repeats 1] [--keep DIR]\n"
                   "                      [--python | --both] [--python-bin /usr/bin/python3]\n"
                   "                      [--containment auto|cgroup|subreaper] [--tls] [--reuse]\n"
                   "  --keep DIR  write the experiments to DIR/exp-N and keep them (else a scratch folder)\n"
                   "  --python    the trials are bench/python/sleeper.py (same workload), not the C++ sleeper\n"
                   "  --both      C++ and Python trials alternately, each run --repeats times\n"
                   "  --tls       also a second cluster that uses TLS, its C++ runs alternating with the plain ones\n"
                   "  --reuse     also C++ runs with reuse_workers (a worker runs the next trial on its slot),\n"
                   "              alternating with the plain ones (\"cpp_reuse\")\n";
      return 0;
    } else {
      tune::bench::die("unknown option " + a + " (see --help)");
    }
  }
  if (trials < 1 || reports < 1 || sleep_ms < 0 || nodes < 1 || gpus_per_node < 1 || repeats < 1)
    tune::bench::die("every count must be at least 1");
  tune::bench::make_scratch("bench_overhead");
  auto& dir = tune::bench::scratch::dir;
  auto address = tune::bench::start_loopback_cluster(nodes, "--num-gpus " + std::to_string(gpus_per_node) +
                                                                  " --num-cpus " + std::to_string(gpus_per_node) +
                                                                  " --containment " + containment);
  tune::cluster_options o;
  o.address = address;
  o.token_file = tune::bench::scratch::token_path;
  auto c = tune::cluster::start(o);
  if (!c) tune::bench::die(c.error().message());
  std::optional<tune::cluster> secure;  // --tls: the same cluster again, with TLS
  if (with_tls) {
    const std::string tdir = dir + "/tls";
    tune::bench::run(tune::bench::tune_binary() + " tls init " + tdir);
    const std::string flags = "--tls-cert " + tdir + "/cluster.crt --tls-key " + tdir + "/cluster.key --tls-ca " + tdir + "/ca.crt";
    tune::cluster_options t = o;
    t.address = tune::bench::start_loopback_cluster(nodes, "--num-gpus " + std::to_string(gpus_per_node) + " --num-cpus " +
                                                               std::to_string(gpus_per_node) + " --containment " + containment +
                                                               " " + flags,
                                                    flags, 1);
    t.tls_cert = tdir + "/cluster.crt";
    t.tls_key = tdir + "/cluster.key";
    t.tls_ca = tdir + "/ca.crt";
    auto s = tune::cluster::start(t);  // after the plain one: this process dials with TLS from here on
    if (!s) tune::bench::die(s.error().message());
    secure.emplace(std::move(*s));
  }
  int slots = nodes * gpus_per_node;
  double ideal = static_cast<double>(trials) * reports * sleep_ms / 1000.0 / slots;
  struct kind {
    std::string name{};
    std::vector<double> ratios{}, walls{};
    nlohmann::json runs = nlohmann::json::array();
  };
  std::vector<kind> kinds;
  if (cpp) kinds.push_back({"cpp"});
  if (python) kinds.push_back({"python"});
  if (secure) kinds.push_back({"cpp_tls"});
  if (reuse) kinds.push_back({"cpp_reuse"});
  for (int k = 0; k < repeats; ++k) {
    for (auto& kd : kinds) {  // alternately: both see the same machine
      tune::tune_config cfg;
      cfg.name = "bench_overhead";
      cfg.metric = "score";
      cfg.num_samples = trials;
      cfg.resources_per_trial = tune::resources{{"gpu", 1}};
      cfg.progress = tune::progress_style::none;
      cfg.experiment_dir = (keep.empty() ? dir : keep) + "/exp-" + kd.name + "-" + std::to_string(k);
      cfg.reuse_workers = kd.name == "cpp_reuse";
      tune::search_space space{{"reports", reports}, {"sleep_ms", sleep_ms}};
      const auto& runtime = dir;  // every daemon's pid file (with --tls both clusters': the idle one's CPU counts too)
      auto cpu0 = cluster_cpu(runtime);
      auto r = kd.name == "cpp" || kd.name == "cpp_reuse" ? tune::tuner{*c, "sleeper", space, cfg}.fit()
               : kd.name == "cpp_tls" ? tune::tuner{*secure, "sleeper", space, cfg}.fit()
                                : tune::tuner{*c, tune::program{.command = {python_bin, "sleeper.py"}, .working_dir = python_dir},
                                              space, cfg}
                                      .fit();
      if (!r) tune::bench::die(r.error().message());
      if (r->results != static_cast<int64_t>(trials) * reports || r->errors() > 0)
        tune::bench::die("stored " + std::to_string(r->results) + " results, " + std::to_string(r->errors()) +
                         " trials failed (see " + cfg.experiment_dir + ")");
      double ratio = r->wall_s / ideal;
      std::cerr << kd.name << " run " << k + 1 << ": " << trials << " trials in " << r->wall_s << " s, ideal " << ideal
                << " s: " << ratio << "\n";
      kd.ratios.push_back(ratio);
      kd.walls.push_back(r->wall_s);
      // Every CPU cost per trial (ms): where the tuner's own time goes.
      auto cpu1 = cluster_cpu(runtime);
      auto per_trial = [&](double s) { return std::round(s * 1e6 / trials) / 1e3; };
      nlohmann::json cost{{"controller", per_trial(r->controller_cpu_s)},
                          {"driver_other", per_trial(cpu1.driver - cpu0.driver - r->controller_cpu_s)},
                          {"head", per_trial(cpu1.head - cpu0.head)},
                          {"nodes", per_trial(cpu1.nodes - cpu0.nodes)},
                          {"trial_processes", per_trial(cpu1.trials - cpu0.trials)}};
      std::cerr << "  CPU ms per trial: " << cost.dump() << "\n";
      kd.runs.push_back({{"wall_s", r->wall_s}, {"wall_over_ideal", ratio}, {"controller_cpu_s", r->controller_cpu_s},
                         {"cpu_ms_per_trial", cost}});
    }
  }
  nlohmann::json j{{"ideal_s", ideal},
                   {"trials", trials},
                   {"reports", reports},
                   {"sleep_ms", sleep_ms},
                   {"slots", slots},
                   {"nodes", nodes},
                   {"cpus", std::thread::hardware_concurrency()},
                   {"containment", containment}};
  for (auto& kd : kinds) {
    nlohmann::json part{{"wall_over_ideal", tune::bench::median(kd.ratios)}, {"wall_s", tune::bench::median(kd.walls)}, {"runs", kd.runs}};
    if (kinds.size() == 1) j.update(part);  // one kind: its numbers at the top, as before
    else j[kd.name] = part;
  }
  if (python) j["python_bin"] = python_bin;
  std::cout << j.dump() << std::endl;
  return 0;
}
