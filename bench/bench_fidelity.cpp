// bench_fidelity: schedulers and searches on a multi-fidelity problem, in simulated
// time through the real experiment engine (tune/tuner/engine.hpp), its schedulers and
// search algorithms: the best value found against the budget spent.
//
// The problem: Hartmann 6-D with a fidelity (the multi-fidelity Hartmann of Kandasamy et
// al. 2017, as BoTorch's AugmentedHartmann): at iteration t of max_t the trial reports
// f(x, z) with z = t / max_t and alpha_1 lowered by 0.1 (1 - z): low iterations are
// cheap and biased, the last is Hartmann6 itself (minimum -3.32237). Every iteration
// takes one time unit; `--workers` trials run at once; a trial that HyperBand pauses
// resumes from its checkpoint (taken every iteration). The budget is counted in
// iterations run, in units of max_t (a "full evaluation").
//
// For each (scheduler, search): the best value at the full fidelity (iteration max_t)
// found once 25%, 50% and 100% of --budget full evaluations are spent, median over
// --seeds. The last line is one JSON object: {"results": [{scheduler, search, budget,
// best}], ...}.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "tune/tuner/engine.hpp"
#include "tune/tuner/problems.hpp"

namespace po = boost::program_options;
using namespace tune;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Hartmann6 at fidelity z in [0, 1], at a config's x0..x5.
double hartmann6_at(const config& c, double z) {
  double x[6];
  for (int j = 0; j < 6; ++j) x[j] = c["x" + std::to_string(j)].get<double>();
  return hartmann6_at_fidelity(x, z);
}

// One simulated experiment; the best full-fidelity value at each mark.
expected<std::vector<double>> simulate(const std::string& scheduler_name, const std::string& search_name,
                                       std::uint64_t seed, int64_t max_t, int workers, double budget,
                                       const std::vector<double>& marks) {
  search_space space;
  for (int j = 0; j < 6; ++j) space.add("x" + std::to_string(j), uniform(0, 1));
  const int samples = 100000;  // the budget ends the experiment, not the samples
  expected<std::unique_ptr<search_algorithm>> search =
      search_name == "random" ? make_random_search(space, {.num_samples = samples, .seed = seed})
      : search_name == "tpe"  ? make_tpe(space, {.num_samples = samples, .seed = seed})
                              : make_bohb(space, {.num_samples = samples, .seed = seed});
  if (!search) return search.error();
  scheduler_spec spec = scheduler_name == "asha"
                            ? scheduler_spec{asha{.max_t = max_t, .grace_period = 1, .reduction_factor = 3}}
                            : scheduler_spec{hyperband{.max_t = max_t, .reduction_factor = 3}};
  auto scheduler = make_scheduler(spec, "loss", mode::min);
  if (!scheduler) return scheduler.error();
  engine_options eo;
  eo.metric = "loss";
  eo.direction = mode::min;
  eo.max_concurrent = workers;
  eo.stop.max_iterations = max_t;
  auto engine = experiment_engine::make(**search, **scheduler, eo);
  if (!engine) return engine.error();
  auto& e = **engine;
  std::map<std::string, std::pair<config, int64_t>> running;  // trial -> config, iteration done
  double spent = 0, best = INFINITY, now = 0;
  std::vector<double> out;
  std::function<status(std::vector<engine_action>)> apply = [&](std::vector<engine_action> acts) -> status {
    for (auto& a : acts) {
      if (a.what == engine_action::kind::start) {
        running[a.trial] = {a.cfg, a.restore_iteration >= 0 ? a.restore_iteration : 0};
      } else {  // stop or pause: the process ends
        running.erase(a.trial);
        auto more = e.on_ended(a.trial, true);
        if (!more) return more.error();
        if (auto st = apply(*more); !st) return st;
      }
    }
    return status::ok();
  };
  while (out.size() < marks.size()) {
    auto acts = e.step(now);
    if (!acts) return acts.error();
    if (auto st = apply(*acts); !st) return st;
    if (running.empty()) break;
    std::vector<std::string> ids;
    for (auto& [id, r] : running) ids.push_back(id);
    for (auto& id : ids) {
      auto it = running.find(id);
      if (it == running.end()) continue;
      const int64_t t = ++it->second.second;
      const double v = hartmann6_at(it->second.first, static_cast<double>(t) / static_cast<double>(max_t));
      spent += 1.0 / static_cast<double>(max_t);
      if (t == max_t) best = std::min(best, v);
      e.on_checkpoint(id, t);
      auto more = e.on_result(id, t, {{"loss", v}});
      if (!more) return more.error();
      if (auto st = apply(*more); !st) return st;
      while (out.size() < marks.size() && spent >= marks[out.size()] * budget) out.push_back(best);
    }
    now += 1;
  }
  while (out.size() < marks.size()) out.push_back(best);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc(
      "usage: bench_fidelity [options]\nSchedulers and searches on multi-fidelity Hartmann6: best value vs budget");
  desc.add_options()("help,h", "this help")("seeds", po::value<int>()->default_value(20), "seeds")(
      "max-t", po::value<int64_t>()->default_value(27), "iterations of a full evaluation")(
      "workers", po::value<int>()->default_value(8), "trials at once")(
      "budget", po::value<double>()->default_value(100), "full evaluations' worth of iterations")(
      "pairs", po::value<std::string>()->default_value("asha/random,hyperband/random,asha/tpe,hyperband/bohb"),
      "scheduler/search pairs (comma-separated)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& ex) {
    std::cerr << "bench_fidelity: " << ex.what() << "\n" << desc;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  const int seeds = vm["seeds"].as<int>(), workers = vm["workers"].as<int>();
  const int64_t max_t = vm["max-t"].as<int64_t>();
  const double budget = vm["budget"].as<double>();
  if (seeds < 1 || workers < 1 || max_t < 3 || !(budget > 0)) {
    std::cerr << "bench_fidelity: --seeds and --workers >= 1, --max-t >= 3, --budget > 0\n";
    return 2;
  }
  const std::vector<double> marks{0.25, 0.5, 1.0};
  nlohmann::json results = nlohmann::json::array();
  std::stringstream pairs(vm["pairs"].as<std::string>());
  for (std::string pair; std::getline(pairs, pair, ',');) {
    const auto slash = pair.find('/');
    const std::string sched = pair.substr(0, slash), search = slash == std::string::npos ? "" : pair.substr(slash + 1);
    if ((sched != "asha" && sched != "hyperband") || (search != "random" && search != "tpe" && search != "bohb")) {
      std::cerr << "bench_fidelity: unknown pair " << pair << " (asha|hyperband / random|tpe|bohb)\n";
      return 2;
    }
    std::vector<std::vector<double>> at(marks.size());
    for (int seed = 0; seed < seeds; ++seed) {
      auto r = simulate(sched, search, static_cast<std::uint64_t>(seed), max_t, workers, budget, marks);
      if (!r) {
        std::cerr << "bench_fidelity: " << pair << ": " << r.error().message() << "\n";
        return 1;
      }
      for (size_t m = 0; m < marks.size(); ++m) at[m].push_back((*r)[m]);
    }
    for (size_t m = 0; m < marks.size(); ++m) {
      nlohmann::json row{{"scheduler", sched}, {"search", search}, {"budget", marks[m] * budget},
                         {"best", median(at[m])}, {"best_seeds", at[m]}};
      std::cerr << row.dump() << "\n";
      results.push_back(row);
    }
  }
  std::cout << nlohmann::json{{"problem", "hartmann6 multi-fidelity"}, {"optimum", -3.32237}, {"max_t", max_t},
                              {"workers", workers}, {"seeds", seeds}, {"results", results}}
                   .dump()
            << std::endl;
  return 0;
}
