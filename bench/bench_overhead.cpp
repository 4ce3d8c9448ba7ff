// bench_overhead: what the tuner adds to the trials' own time. --trials trials (2,000)
// of --reports results each (10), each result after --sleep-ms of sleep (50 ms:
// standing in for work done elsewhere), one logical GPU each, on a cluster of node
// processes on loopback (--nodes 4 x --gpus-per-node 16 = 64 slots). The ideal wall
// time is trials x reports x sleep / slots (15.6 s); the benchmark reports the
// experiment's wall time over it, median of --repeats runs. Everything real: a head and
// node daemons, a placement group and a worker process per trial, every result stored.
// Last line: {"wall_over_ideal": ..., "wall_s": ..., "ideal_s": ..., ...}.
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "procs.hpp"
#include "tune/tune.hpp"

namespace {

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
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) tune::bench::die(a + " needs a value");
      return std::stoi(argv[++i]);
    };
    if (a == "--keep") {
      if (i + 1 >= argc) tune::bench::die("--keep needs a folder");
      keep = argv[++i];
    } else if (a == "--trials") trials = next();
    else if (a == "--reports") reports = next();
    else if (a == "--sleep-ms") sleep_ms = next();
    else if (a == "--nodes") nodes = next();
    else if (a == "--gpus-per-node") gpus_per_node = next();
    else if (a == "--repeats") repeats = next();
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_overhead [--trials 2000] [--reports 10] [--sleep-ms 50] [--nodes 4]\n"
                   "                      [--gpus-per-node 16] [--repeats 1] [--keep DIR]\n"
                   "  --keep DIR  write the experiments to DIR/exp-N and keep them (else a scratch folder)\n";
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
                                                                  " --num-cpus " + std::to_string(gpus_per_node));
  tune::cluster_options o;
  o.address = address;
  o.token_file = tune::bench::scratch::token_path;
  auto c = tune::cluster::start(o);
  if (!c) tune::bench::die(c.error().message());
  int slots = nodes * gpus_per_node;
  double ideal = static_cast<double>(trials) * reports * sleep_ms / 1000.0 / slots;
  std::vector<double> ratios, walls;
  nlohmann::json runs = nlohmann::json::array();
  for (int k = 0; k < repeats; ++k) {
    tune::tune_config cfg;
    cfg.name = "bench_overhead";
    cfg.metric = "score";
    cfg.num_samples = trials;
    cfg.resources_per_trial = tune::resources{{"gpu", 1}};
    cfg.progress = tune::progress_style::none;
    cfg.experiment_dir = (keep.empty() ? dir : keep) + "/exp-" + std::to_string(k);
    tune::tuner t{*c, "sleeper", tune::search_space{{"reports", reports}, {"sleep_ms", sleep_ms}}, cfg};
    auto r = t.fit();
    if (!r) tune::bench::die(r.error().message());
    if (r->results != static_cast<int64_t>(trials) * reports || r->errors() > 0)
      tune::bench::die("stored " + std::to_string(r->results) + " results, " + std::to_string(r->errors()) +
                       " trials failed (see " + cfg.experiment_dir + ")");
    double ratio = r->wall_s / ideal;
    std::cerr << "run " << k + 1 << ": " << trials << " trials in " << r->wall_s << " s, ideal " << ideal
              << " s: " << ratio << "\n";
    ratios.push_back(ratio);
    walls.push_back(r->wall_s);
    runs.push_back({{"wall_s", r->wall_s}, {"wall_over_ideal", ratio}, {"controller_cpu_s", r->controller_cpu_s}});
  }
  nlohmann::json j{{"wall_over_ideal", tune::bench::median(ratios)},
                   {"wall_s", tune::bench::median(walls)},
                   {"ideal_s", ideal},
                   {"trials", trials},
                   {"reports", reports},
                   {"sleep_ms", sleep_ms},
                   {"slots", slots},
                   {"nodes", nodes},
                   {"cpus", std::thread::hardware_concurrency()},
                   {"runs", runs}};
  std::cout << j.dump() << std::endl;
  return 0;
}
