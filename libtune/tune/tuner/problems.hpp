// Benchmark problems for the search algorithms (minimizing), with their search spaces
// and known optima: what search_test's quality tests and bench_search measure on, so
// that ours and Optuna (bench/python/search_optuna.py, the same formulas) are compared
// on exactly the same functions.
//
//   branin       2-D, x1 in [-5, 10], x2 in [0, 15]; minimum 0.397887 (three minimizers)
//   hartmann6    6-D, each in [0, 1]; minimum -3.32237
//   rosenbrock20 20-D, each in [-2.048, 2.048]; minimum 0 at (1, ..., 1)
//
// Two objectives (both minimized), measured by the hypervolume against a reference:
//   zdt1         30-D in [0, 1] (Zitzler, Deb, Thiele 2000); front f2 = 1 - sqrt(f1);
//                reference (1.1, 11): the best hypervolume is 12.1 - 1/3 = 11.7667
//   dtlz2        11-D in [0, 1] (Deb et al. 2002, two objectives); front a quarter of the
//                unit circle; reference (3, 3): the best hypervolume is 9 - pi/4 = 8.2146
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tune/tuner/space.hpp"

namespace tune {

struct search_problem {
  std::string name;
  search_space space;
  std::function<double(const config&)> f;
  double optimum = 0;
};

double branin(double x1, double x2);
double hartmann6(const double* x);
// Hartmann6 at a fidelity z in [0, 1] (Kandasamy et al. 2017's multi-fidelity form):
// alpha_1 lowered by 0.1 (1 - z); z = 1 is hartmann6.
double hartmann6_at_fidelity(const double* x, double z);
double rosenbrock(const std::vector<double>& x);

// The problems above, by name; empty name: all of them.
std::vector<search_problem> search_problems(const std::string& name = {});

struct two_objective_problem {
  std::string name;
  search_space space;
  std::function<std::vector<double>(const config&)> f;
  std::vector<double> reference;
  double best_hypervolume = 0;
};

std::vector<double> zdt1(const std::vector<double>& x);
std::vector<double> dtlz2(const std::vector<double>& x);
std::vector<two_objective_problem> two_objective_problems(const std::string& name = {});

}  // namespace tune
