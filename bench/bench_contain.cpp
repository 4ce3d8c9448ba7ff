// What containment costs a trial, step by step: its cgroup made with limits, its keeper
// and worker started (the keeper born in the cgroup), the worker's end, the cgroup's
// usage read, killed, emptied and removed; against the subreaper (no cgroup) and no
// containment at all. `/bin/true` stands in for the trial; `--parallel N` runs N such
// trials at once from N threads (the node's watch threads). Medians in ms, and the
// machine's busy CPU per trial (this process and the kernel's deferred work), as JSON.
//   bench_contain [--rounds 200] [--parallel 1]
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <chrono>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "tune/trial/cgroup.hpp"
#include "tune/trial/process.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) { return std::chrono::duration<double, std::milli>(clock_type::now() - t).count(); }

// The machine's busy CPU time so far (every core, the kernel's work included), in ms.
double busy_ms() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
  return (user + nice + system + irq + softirq) * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 200, parallel = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::stoi(argv[++i]);
    else if (a == "--parallel" && i + 1 < argc) parallel = std::stoi(argv[++i]);
    else {
      std::cerr << "usage: bench_contain [--rounds 200] [--parallel 1]\n";
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  auto via = tune::spawner::start();
  if (!via) {
    std::cerr << via.error().message() << "\n";
    return 1;
  }
  nlohmann::json out = nlohmann::json::object();
  for (std::string mode : {"none", "subreaper", "cgroup"}) {
    std::shared_ptr<tune::containment> c;
    if (mode != "none") {
      auto opened = tune::containment::open(mode, "bench-contain");
      if (!opened) {
        out[mode] = opened.error().message();
        continue;
      }
      c = *opened;
    }
    std::mutex mu;
    std::map<std::string, std::vector<double>> t;
    auto work = [&](int thread) {
      for (int r = 0; r < rounds; ++r) {
        auto total = clock_type::now();
        std::unique_ptr<tune::trial_cgroup> cg;
        tune::process_spec spec{{"/bin/true"}, {{"PATH", "/usr/bin:/bin"}}, ""};
        auto s = clock_type::now();
        if (c) {
          tune::host_limits limits{c->caps().memory ? int64_t{1} << 30 : 0, 1.0, 1024};
          auto made = c->make('t' + std::to_string(thread) + "-" + std::to_string(r), limits);
          if (!made) {
            std::cerr << made.error().message() << "\n";
            std::exit(1);
          }
          cg = std::move(*made);
          spec.contain = cg->spec();
        }
        double make_ms = ms_since(s);
        s = clock_type::now();
        auto p = tune::worker_process::start(spec, via->get());
        if (!p) {
          std::cerr << p.error().message() << "\n";
          std::exit(1);
        }
        double start_ms = ms_since(s);
        std::vector<std::string> reports;
        s = clock_type::now();
        auto e = (*p)->wait(std::chrono::seconds(10), reports);
        double wait_ms = ms_since(s);
        s = clock_type::now();
        if (cg) {
          (void)cg->usage();
          (void)cg->end((*p)->group());
        }
        double end_ms = ms_since(s);
        double total_ms = ms_since(total);
        std::lock_guard<std::mutex> lock(mu);
        if (!e || !e->ok()) std::cerr << "a trial did not end well\n";
        t["make"].push_back(make_ms);
        t["start"].push_back(start_ms);
        t["run_and_exit"].push_back(wait_ms);
        t["end"].push_back(end_ms);
        t["total"].push_back(total_ms);
      }
    };
    std::vector<std::thread> threads;
    auto wall = clock_type::now();
    double busy = busy_ms();
    for (int i = 0; i < parallel; ++i) threads.emplace_back(work, i);
    for (auto& th : threads) th.join();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the kernel's deferred work (cgroups freed)
    nlohmann::json j{{"wall_ms", ms_since(wall)},
                     {"machine_cpu_ms_per_trial", (busy_ms() - busy) / (rounds * parallel)}};
    for (auto& [k, v] : t) j[k + "_p50_ms"] = median(v);
    if (c) j["describe"] = c->caps().describe();
    out[mode] = j;
  }
  out["rounds"] = rounds;
  out["parallel"] = parallel;
  std::cout << out.dump() << std::endl;
  return 0;
}
