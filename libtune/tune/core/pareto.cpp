#include "tune/core/pareto.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tune {

bool dominates(const point& a, const point& b) {
  bool better = false;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] > b[i]) return false;
    better = better || a[i] < b[i];
  }
  return better;
}

std::vector<int> nondominated_ranks(const std::vector<point>& points) {
  const std::size_t n = points.size();
  std::vector<std::vector<std::size_t>> dominated(n);  // i dominates these
  std::vector<int> count(n, 0), rank(n, -1);           // how many dominate i
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      if (dominates(points[i], points[j])) dominated[i].push_back(j), ++count[j];
      else if (dominates(points[j], points[i])) dominated[j].push_back(i), ++count[i];
    }
  std::vector<std::size_t> front;
  for (std::size_t i = 0; i < n; ++i)
    if (count[i] == 0) front.push_back(i), rank[i] = 0;
  for (int r = 0; !front.empty(); ++r) {
    std::vector<std::size_t> next;
    for (std::size_t i : front)
      for (std::size_t j : dominated[i])
        if (--count[j] == 0) rank[j] = r + 1, next.push_back(j);
    front = std::move(next);
  }
  return rank;
}

std::vector<std::size_t> pareto_front(const std::vector<point>& points) {
  // In lexicographic order a point can only be dominated by one before it, and if it is
  // dominated at all then by one on the front (dominance is transitive): so each point
  // is checked against the front found so far only, not against every other point and
  // without the full sort's n^2 memory (the head runs this on every dashboard refresh).
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return points[a] < points[b]; });
  std::vector<std::size_t> front;
  const bool two = !points.empty() && std::all_of(points.begin(), points.end(), [](const point& p) { return p.size() == 2; });
  if (two) {
    // Two objectives: a sweep. A point is on the front when its second value is below
    // every earlier one's, or when it equals the latest front point (equal points are
    // both on it: neither dominates the other).
    for (std::size_t i : order) {
      if (front.empty() || points[i][1] < points[front.back()][1] || points[i] == points[front.back()]) front.push_back(i);
    }
  } else {
    for (std::size_t i : order)
      if (std::none_of(front.begin(), front.end(), [&](std::size_t f) { return dominates(points[f], points[i]); }))
        front.push_back(i);
  }
  std::sort(front.begin(), front.end());
  return front;
}

namespace {

// Points strictly below the reference in every objective, in `dims` objectives.
double volume(std::vector<point> pts, const point& ref, std::size_t dims) {
  if (pts.empty()) return 0;
  if (dims == 1) {
    double lo = ref[0];
    for (const auto& p : pts) lo = std::min(lo, p[0]);
    return ref[0] - lo;
  }
  if (dims == 2) {  // sweep by the first objective, keeping the staircase
    std::sort(pts.begin(), pts.end(), [](const point& a, const point& b) { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]); });
    double v = 0, best_y = ref[1];
    for (const auto& p : pts)
      if (p[1] < best_y) v += (ref[0] - p[0]) * (best_y - p[1]), best_y = p[1];
    return v;
  }
  // Slices along the last objective: between consecutive values, the (dims-1)-volume of
  // the points at or below the slice.
  const std::size_t last = dims - 1;
  std::sort(pts.begin(), pts.end(), [&](const point& a, const point& b) { return a[last] < b[last]; });
  double v = 0;
  std::vector<point> below;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    below.push_back(pts[i]);
    const double top = i + 1 < pts.size() ? pts[i + 1][last] : ref[last];
    if (top > pts[i][last]) v += volume(below, ref, last) * (top - pts[i][last]);
  }
  return v;
}

}  // namespace

double hypervolume(std::vector<point> points, const point& reference) {
  std::erase_if(points, [&](const point& p) {
    if (p.size() < reference.size()) return true;
    for (std::size_t i = 0; i < reference.size(); ++i)
      if (!(p[i] < reference[i])) return true;
    return false;
  });
  if (points.empty() || reference.empty()) return 0;
  // Only the front counts.
  std::vector<point> front;
  for (std::size_t i : pareto_front(points)) front.push_back(points[i]);
  return volume(std::move(front), reference, reference.size());
}

std::vector<std::size_t> greedy_hypervolume_subset(const std::vector<point>& points, std::size_t k,
                                                   const point& reference) {
  std::vector<std::size_t> chosen, left(points.size());
  std::iota(left.begin(), left.end(), 0);
  std::vector<point> set;
  double base = 0;
  while (chosen.size() < k && !left.empty()) {
    std::size_t best = 0;
    double best_gain = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < left.size(); ++j) {
      set.push_back(points[left[j]]);
      const double gain = hypervolume(set, reference) - base;
      set.pop_back();
      if (gain > best_gain) best_gain = gain, best = j;
    }
    set.push_back(points[left[best]]);
    base += best_gain;
    chosen.push_back(left[best]);
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(best));
  }
  return chosen;
}

std::vector<std::size_t> select_by_fronts(const std::vector<point>& points, std::size_t k) {
  std::vector<std::size_t> chosen;
  if (points.empty() || k == 0) return chosen;
  const auto ranks = nondominated_ranks(points);
  point reference(points.front().size(), -std::numeric_limits<double>::infinity());
  for (const auto& p : points)
    for (std::size_t i = 0; i < p.size() && i < reference.size(); ++i) reference[i] = std::max(reference[i], p[i]);
  for (auto& r : reference) r += std::max(0.1 * std::fabs(r), 1e-9);
  for (int r = 0; chosen.size() < k; ++r) {
    std::vector<std::size_t> front;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] == r) front.push_back(i);
    if (front.empty()) break;
    if (chosen.size() + front.size() <= k) {
      chosen.insert(chosen.end(), front.begin(), front.end());
      continue;
    }
    std::vector<point> fp;
    for (std::size_t i : front) fp.push_back(points[i]);
    for (std::size_t j : greedy_hypervolume_subset(fp, k - chosen.size(), reference)) chosen.push_back(front[j]);
  }
  return chosen;
}

}  // namespace tune
