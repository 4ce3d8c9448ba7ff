#include "tune/tuner/problems.hpp"

#include <cmath>
#include <numbers>

namespace tune {

namespace {
}

double branin(double x1, double x2) {
  const double a = 1, b = 5.1 / (4 * std::numbers::pi * std::numbers::pi), c = 5 / std::numbers::pi, r = 6, s = 10, t = 1 / (8 * std::numbers::pi);
  const double u = x2 - b * x1 * x1 + c * x1 - r;
  return a * u * u + s * (1 - t) * std::cos(x1) + s;
}

double hartmann6(const double* x) { return hartmann6_at_fidelity(x, 1.0); }

double hartmann6_at_fidelity(const double* x, double z) {
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  static const double A[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                 {0.05, 10, 17, 0.1, 8, 14},
                                 {3, 3.5, 1.7, 10, 17, 8},
                                 {17, 8, 0.05, 10, 0.1, 14}};
  static const double P[4][6] = {{1312, 1696, 5569, 124, 8283, 5886},
                                 {2329, 4135, 8307, 3736, 1004, 9991},
                                 {2348, 1451, 3522, 2883, 3047, 6650},
                                 {4047, 8828, 8732, 5743, 1091, 381}};
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += A[i][j] * (x[j] - P[i][j] * 1e-4) * (x[j] - P[i][j] * 1e-4);
    sum += (alpha[i] - (i == 0 ? 0.1 * (1 - z) : 0.0)) * std::exp(-inner);
  }
  return -sum;
}

double rosenbrock(const std::vector<double>& x) {
  double sum = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) sum += 100 * std::pow(x[i + 1] - x[i] * x[i], 2) + std::pow(1 - x[i], 2);
  return sum;
}

std::vector<search_problem> search_problems(const std::string& name) {
  std::vector<search_problem> all;
  all.push_back({"branin", search_space{{"x1", uniform(-5, 10)}, {"x2", uniform(0, 15)}},
                 [](const config& c) { return branin(c["x1"].get<double>(), c["x2"].get<double>()); }, 0.397887});
  search_space h;
  for (int j = 0; j < 6; ++j) h.add('x' + std::to_string(j), uniform(0, 1));
  all.push_back({"hartmann6", h,
                 [](const config& c) {
                   double x[6];
                   for (int j = 0; j < 6; ++j) x[j] = c['x' + std::to_string(j)].get<double>();
                   return hartmann6(x);
                 },
                 -3.32237});
  search_space r;
  for (int j = 0; j < 20; ++j) r.add('x' + std::to_string(j), uniform(-2.048, 2.048));
  all.push_back({"rosenbrock20", r,
                 [](const config& c) {
                   std::vector<double> x(20);
                   for (int j = 0; j < 20; ++j) x[j] = c['x' + std::to_string(j)].get<double>();
                   return rosenbrock(x);
                 },
                 0.0});
  if (name.empty()) return all;
  std::vector<search_problem> out;
  for (auto& p : all)
    if (p.name == name) out.push_back(p);
  return out;
}

std::vector<double> zdt1(const std::vector<double>& x) {
  double sum = 0;
  for (std::size_t i = 1; i < x.size(); ++i) sum += x[i];
  const double g = 1 + 9 * sum / static_cast<double>(x.size() - 1);
  return {x[0], g * (1 - std::sqrt(x[0] / g))};
}

std::vector<double> dtlz2(const std::vector<double>& x) {
  double g = 0;
  for (std::size_t i = 1; i < x.size(); ++i) g += (x[i] - 0.5) * (x[i] - 0.5);
  return {(1 + g) * std::cos(x[0] * std::numbers::pi / 2), (1 + g) * std::sin(x[0] * std::numbers::pi / 2)};
}

std::vector<two_objective_problem> two_objective_problems(const std::string& name) {
  auto unit_cube = [](int n) {
    search_space s;
    for (int j = 0; j < n; ++j) s.add('x' + std::to_string(j), uniform(0, 1));
    return s;
  };
  auto of = [](int n, std::vector<double> (*f)(const std::vector<double>&)) {
    return [n, f](const config& c) {
      std::vector<double> x(static_cast<std::size_t>(n));
      for (int j = 0; j < n; ++j) x[static_cast<std::size_t>(j)] = c['x' + std::to_string(j)].get<double>();
      return f(x);
    };
  };
  std::vector<two_objective_problem> all;
  all.push_back({"zdt1", unit_cube(30), of(30, zdt1), {1.1, 11}, 12.1 - 1.0 / 3});
  all.push_back({"dtlz2", unit_cube(11), of(11, dtlz2), {3, 3}, 9 - std::numbers::pi / 4});
  if (name.empty()) return all;
  std::vector<two_objective_problem> out;
  for (auto& p : all)
    if (p.name == name) out.push_back(p);
  return out;
}

}  // namespace tune
