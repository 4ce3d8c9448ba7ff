// Benchmark problems for the search algorithms (minimizing), with their search spaces
// and known optima: what search_test's quality tests and bench_search measure on, so
// that ours and Optuna (bench/python/search_optuna.py, the same formulas) are compared
// on exactly the same functions.
//
//   branin       2-D, x1 in [-5, 10], x2 in [0, 15]; minimum 0.397887 (three minimizers)
//   hartmann6    6-D, each in [0, 1]; minimum -3.32237
//   rosenbrock20 20-D, each in [-2.048, 2.048]; minimum 0 at (1, ..., 1)
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
double rosenbrock(const std::vector<double>& x);

// The problems above, by name; empty name: all of them.
std::vector<search_problem> search_problems(const std::string& name = {});

}  // namespace tune
