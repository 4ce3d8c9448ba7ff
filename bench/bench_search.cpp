// bench_search: how good the configs our search algorithms find are, and what a
// suggestion costs, on the problems of tune/tuner/problems.hpp (minimizing), side by
// side with Optuna (bench/python/search_optuna.py, same problems, budgets and seeds)
// when given --optuna PYTHON (a Python with Optuna, e.g. a virtual environment's).
//
// For each problem, concurrency c (c trials suggested before the oldest one's value
// comes back: what a cluster running c trials at once does) and sampler: the best value
// in --evals evaluations, median over --seeds seeds. Samplers: random, tpe (our
// defaults: multivariate, with the constant liar), tpe_no_liar (multivariate, ignoring
// running trials), tpe_independent (each parameter on its own, with the liar: our TPE
// before multivariate), gp (GP-based Bayesian optimisation). Optuna's counterparts, by
// the same names: its random sampler, its TPE with its defaults (in Optuna 5.0:
// multivariate, constant_liar=True), with constant_liar=False, with multivariate=False,
// and its GPSampler with its defaults.
// Two-objective problems (--two-objective, tune/tuner/problems.hpp): the hypervolume
// of everything evaluated in --two-objective-evals, median over the seeds (higher is
// better), our random search and TPE (MOTPE) against Optuna's random sampler, its
// TPESampler (its default for several objectives) and NSGA-II (rows "nsga2").
// The last line is one JSON object: {"results": [{problem, concurrency, sampler, ours,
// optuna, ours_seeds, optuna_seeds, ours_rank, optuna_rank}], "ms_per_trial": {sampler:
// ms}, "optuna_ms_per_trial": ...}; a rank is the mean over seeds of the entry's rank
// among every sampler's, ours and Optuna's, on that problem and concurrency.
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <sstream>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "tune/core/pareto.hpp"
#include "tune/tuner/problems.hpp"
#include "tune/tuner/search.hpp"

namespace po = boost::program_options;
using namespace tune;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

expected<std::unique_ptr<search_algorithm>> make(const std::string& sampler, const search_problem& p, int evals,
                                                  uint64_t seed) {
  if (sampler == "random") return make_random_search(p.space, {.num_samples = evals, .seed = seed});
  if (sampler == "tpe") return make_tpe(p.space, {.num_samples = evals, .constant_liar = true, .seed = seed});
  if (sampler == "tpe_no_liar") return make_tpe(p.space, {.num_samples = evals, .constant_liar = false, .seed = seed});
  if (sampler == "tpe_independent")
    return make_tpe(p.space, {.num_samples = evals, .multivariate = false, .seed = seed});
  if (sampler == "gp") return make_gp(p.space, {.num_samples = evals, .seed = seed});
  return status{errc::invalid_argument,
                "unknown sampler " + sampler + ": random, tpe, tpe_no_liar, tpe_independent or gp"};
}

struct outcome {
  double best = INFINITY;
  double suggest_ms = 0;  // per trial
};

// c trials in flight, the oldest completed when there are c: `evaluate` gives a
// config's value(s), `tell` completes a trial with them. The suggestion time per trial
// in ms.
template <class Value, class Evaluate, class Tell>
expected<double> drive(search_algorithm& alg, int evals, int c, const Evaluate& evaluate, const Tell& tell) {
  std::deque<std::pair<std::string, Value>> in_flight;
  double suggest_s = 0;
  auto complete = [&] {
    auto [id, v] = in_flight.front();
    in_flight.pop_front();
    return tell(id, v);
  };
  for (int i = 0; i < evals; ++i) {
    auto id = 't' + std::to_string(i);
    auto t0 = std::chrono::steady_clock::now();
    auto cfg = alg.suggest(id);
    suggest_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!cfg) return cfg.error();
    if (!*cfg) return status{errc::inconsistent, alg.name() + " suggested nothing at trial " + std::to_string(i)};
    in_flight.emplace_back(id, evaluate(**cfg));
    if (static_cast<int>(in_flight.size()) >= c)
      if (auto s = complete(); !s) return s;
  }
  while (!in_flight.empty())
    if (auto s = complete(); !s) return s;
  return 1000 * suggest_s / evals;
}

// One run: the best value found.
expected<outcome> run(search_algorithm& alg, const search_problem& p, int evals, int c) {
  outcome out;
  auto ms = drive<double>(alg, evals, c, p.f, [&](const std::string& id, double v) {
    out.best = std::min(out.best, v);
    return alg.on_complete(id, v);
  });
  if (!ms) return ms.error();
  out.suggest_ms = *ms;
  return out;
}

// Mean rank (1 = best; ties share the mean of their ranks) of every entry (each
// sampler, ours and Optuna's) on each seed, among the entries of the same problem and
// concurrency: "ours_rank" and "optuna_rank" in each row.
void add_mean_ranks(nlohmann::json& results) {
  std::map<std::pair<std::string, int>, std::vector<std::pair<nlohmann::json*, std::string>>> cells;
  for (auto& r : results)
    for (const char* side : {"ours", "optuna"})
      if (r.contains(std::string(side) + "_seeds"))
        cells[{r["problem"], r["concurrency"]}].emplace_back(&r, side);
  for (auto& [cell, entries] : cells) {
    std::vector<double> rank_sum(entries.size(), 0);
    std::size_t seeds = SIZE_MAX;
    for (auto& [r, side] : entries) seeds = std::min(seeds, (*r)[side + "_seeds"].size());
    for (std::size_t s = 0; s < seeds; ++s)
      for (std::size_t i = 0; i < entries.size(); ++i) {
        auto at = [&](const nlohmann::json& r, const std::string& side) {
          const double x = r[side + "_seeds"][s].get<double>();
          return r.value("higher_is_better", false) ? -x : x;
        };
        const double v = at(*entries[i].first, entries[i].second);
        double below = 0, equal = 0;
        for (auto& [r, side] : entries) {
          const double w = at(*r, side);
          below += w < v, equal += w == v;
        }
        rank_sum[i] += below + (equal + 1) / 2;
      }
    for (std::size_t i = 0; i < entries.size(); ++i)
      (*entries[i].first)[entries[i].second + "_rank"] = seeds ? rank_sum[i] / seeds : 0.0;
  }
}

// One two-objective run: the hypervolume of everything evaluated.
expected<outcome> run_two(search_algorithm& alg, const two_objective_problem& p, int evals, int c) {
  outcome out;
  std::vector<point> found;
  auto ms = drive<std::vector<double>>(alg, evals, c, p.f, [&](const std::string& id, const std::vector<double>& v) {
    found.push_back(v);
    return alg.on_complete(id, v, {});
  });
  if (!ms) return ms.error();
  out.best = hypervolume(found, p.reference);
  out.suggest_ms = *ms;
  return out;
}

// The one-objective problems: a row per problem, concurrency and sampler; 0, or an
// exit code.
int run_single_objective(const std::vector<std::string>& names, const std::vector<std::string>& samplers,
                         const std::vector<int>& conc, int seeds, int evals, nlohmann::json& results,
                         std::map<std::string, std::vector<double>>& ms_of) {
  for (auto& name : names) {
    auto ps = search_problems(name);
    if (ps.empty()) {
      std::cerr << "bench_search: unknown problem " << name << " (branin, hartmann6, rosenbrock20)\n";
      return 2;
    }
    auto& p = ps[0];
    for (int c : conc)
      for (auto& sampler : samplers) {
        std::vector<double> best, cost;
        for (int seed = 0; seed < seeds; ++seed) {
          auto alg = make(sampler, p, evals, static_cast<uint64_t>(seed));
          if (!alg) {
            std::cerr << "bench_search: " << alg.error().message() << "\n";
            return 2;
          }
          auto o = run(**alg, p, evals, c);
          if (!o) {
            std::cerr << "bench_search: " << o.error().message() << "\n";
            return 1;
          }
          best.push_back(o->best);
          cost.push_back(o->suggest_ms);
        }
        ms_of[sampler + "/" + p.name].push_back(median(cost));
        nlohmann::json row{{"problem", p.name}, {"concurrency", c}, {"sampler", sampler}, {"ours", median(best)},
                           {"optimum", p.optimum}, {"ms_per_trial", median(cost)}, {"ours_seeds", best}};
        std::cerr << row.dump() << "\n";
        results.push_back(row);
      }
  }
  return 0;
}

// Runs search_optuna.py (`cmd`) and puts its medians and per-seed values beside ours
// in out["results"], its costs in out["optuna_ms_per_trial"]; 0, or an exit code.
int run_optuna(const std::string& cmd, nlohmann::json& out) {
  std::cerr << "bench_search: " << cmd << "\n";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) {
    std::cerr << "bench_search: cannot run " << cmd << "\n";
    return 1;
  }
  std::map<std::tuple<std::string, int, std::string>, nlohmann::json> theirs;
  nlohmann::json optuna_ms = nlohmann::json::object();
  char line[1 << 16];
  while (std::fgets(line, sizeof line, f)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    theirs[{j["problem"], j["concurrency"], j["sampler"]}] = j;
    optuna_ms[j["sampler"].get<std::string>() + "/" + j["problem"].get<std::string>() + "/c" +
              std::to_string(j["concurrency"].get<int>())] = j["ms_per_trial"];
  }
  if (int rc = ::pclose(f); rc != 0) {
    std::cerr << "bench_search: " << cmd << " failed (status " << rc << "): is Optuna installed for it?\n";
    return 1;
  }
  for (auto& [key, j] : theirs)  // Optuna's samplers we have no counterpart of (NSGA-II)
    if (std::get<2>(key) == "nsga2")
      out["results"].push_back({{"problem", j["problem"]}, {"concurrency", j["concurrency"]}, {"sampler", "nsga2"},
                                {"ours", nullptr}, {"higher_is_better", true}});
  for (auto& r : out["results"]) {
    std::tuple<std::string, int, std::string> key{r["problem"], r["concurrency"], ""};
    auto s = r["sampler"].get<std::string>();
    std::get<2>(key) = s;  // the same names on both sides
    if (auto it = theirs.find(key); it != theirs.end()) {
      r["optuna"] = it->second["median"];
      r["optuna_seeds"] = it->second["best"];
    }
  }
  out["optuna_ms_per_trial"] = optuna_ms;
  return 0;
}

// The two-objective problems: a row per problem, concurrency and sampler (random,
// tpe); 0, or the exit code of an error.
int run_two_objective(const std::vector<std::string>& names, const std::vector<int>& conc, int seeds, int evals2,
                      nlohmann::json& results, std::map<std::string, std::vector<double>>& ms_of) {
  for (auto& name : names) {
    auto ps = two_objective_problems(name);
    if (ps.empty()) {
      std::cerr << "bench_search: unknown two-objective problem " << name << " (zdt1, dtlz2)\n";
      return 2;
    }
    auto& p = ps[0];
    for (int c : conc)
      for (std::string sampler : {"random", "tpe"}) {
        std::vector<double> hv, cost;
        for (int seed = 0; seed < seeds; ++seed) {
          auto alg = sampler == "random"
                         ? make_random_search(p.space, {.num_samples = evals2, .seed = static_cast<uint64_t>(seed)})
                         : make_tpe(p.space, {.num_samples = evals2, .seed = static_cast<uint64_t>(seed),
                                              .directions = {mode::min, mode::min}});
          if (!alg) {
            std::cerr << "bench_search: " << alg.error().message() << "\n";
            return 2;
          }
          auto o = run_two(**alg, p, evals2, c);
          if (!o) {
            std::cerr << "bench_search: " << o.error().message() << "\n";
            return 1;
          }
          // Ranks compare lower-is-better values: the hypervolume's negation there.
          hv.push_back(o->best);
          cost.push_back(o->suggest_ms);
        }
        ms_of[sampler + "/" + p.name].push_back(median(cost));
        nlohmann::json row{{"problem", p.name},         {"concurrency", c},      {"sampler", sampler},
                           {"ours", median(hv)},        {"best_hypervolume", p.best_hypervolume},
                           {"higher_is_better", true},  {"ms_per_trial", median(cost)},
                           {"ours_seeds", hv}};
        std::cerr << row.dump() << "\n";
        results.push_back(row);
      }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc(
      "usage: bench_search [options]\nThe best value our samplers (and Optuna's) find on benchmark problems");
  desc.add_options()("help,h", "this help")("seeds", po::value<int>()->default_value(20), "seeds per cell")(
      "evals", po::value<int>()->default_value(100), "evaluations per run")(
      "problems", po::value<std::string>()->default_value("branin,hartmann6,rosenbrock20"), "problems (comma-separated)")(
      "concurrency", po::value<std::string>()->default_value("1,8"), "trials in flight (comma-separated)")(
      "samplers", po::value<std::string>()->default_value("random,tpe,tpe_no_liar,tpe_independent,gp"), "our samplers")(
      "two-objective", po::value<std::string>()->default_value("zdt1,dtlz2"),
      "two-objective problems (comma-separated; empty: none), run with random and tpe")(
      "two-objective-evals", po::value<int>()->default_value(200), "evaluations per two-objective run")(
      "optuna", po::value<std::string>()->default_value(""), "a Python with Optuna: run it side by side");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "bench_search: " << e.what() << "\n" << desc;
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  int seeds = vm["seeds"].as<int>(), evals = vm["evals"].as<int>();
  if (seeds < 1 || evals < 1) {
    std::cerr << "bench_search: --seeds and --evals must be at least 1\n";
    return 2;
  }
  std::vector<int> conc;
  for (auto& c : split(vm["concurrency"].as<std::string>())) conc.push_back(std::max(1, std::atoi(c.c_str())));
  nlohmann::json results = nlohmann::json::array(), ms = nlohmann::json::object();
  std::map<std::string, std::vector<double>> ms_of;
  if (int rc = run_single_objective(split(vm["problems"].as<std::string>()), split(vm["samplers"].as<std::string>()),
                                    conc, seeds, evals, results, ms_of);
      rc)
    return rc;
  const int evals2 = vm["two-objective-evals"].as<int>();
  if (int rc = run_two_objective(split(vm["two-objective"].as<std::string>()), conc, seeds, evals2, results, ms_of); rc)
    return rc;
  for (auto& [k, v] : ms_of) ms[k] = median(v);
  nlohmann::json out{{"seeds", seeds}, {"evals", evals}, {"results", results}, {"ms_per_trial", ms}};
  if (auto py = vm["optuna"].as<std::string>(); !py.empty()) {
    std::string cmd = py + " " + BENCH_PYTHON_DIR "/search_optuna.py --seeds " + std::to_string(seeds) + " --evals " +
                      std::to_string(evals) + " --problems '" + vm["problems"].as<std::string>() + "' --concurrency " +
                      vm["concurrency"].as<std::string>() + " --samplers " + vm["samplers"].as<std::string>() +
                      " --two-objective '" + vm["two-objective"].as<std::string>() + "' --two-objective-evals " +
                      std::to_string(evals2);
    if (int rc = run_optuna(cmd, out); rc) return rc;
  }
  add_mean_ranks(out["results"]);
  std::cout << out.dump() << std::endl;
  return 0;
}
