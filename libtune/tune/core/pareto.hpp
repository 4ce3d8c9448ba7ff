// Several objectives, all minimized (losses; negate a maximized one): dominance,
// non-dominated sorting, the Pareto front, hypervolumes. Pure, no CAF.
#pragma once

#include <cstddef>
#include <vector>

namespace tune {

using point = std::vector<double>;

// a is at least as good as b in every objective and better in one.
bool dominates(const point& a, const point& b);

// Each point's front: 0 for those no other point dominates, 1 for those only front 0
// dominates, and so on (Deb's fast non-dominated sort).
std::vector<int> nondominated_ranks(const std::vector<point>& points);

// The indices of front 0, in the points' order.
std::vector<std::size_t> pareto_front(const std::vector<point>& points);

// The volume dominated by the points and bounded by `reference` (a point not below the
// reference in every objective adds nothing). Exact; a sweep in 2-D, slices of the
// last objective above (fine for the few objectives and hundreds of points of tuning).
double hypervolume(std::vector<point> points, const point& reference);

// `k` of the points chosen greedily, each adding the most hypervolume to those chosen
// before (bounded by `reference`), in the order chosen.
std::vector<std::size_t> greedy_hypervolume_subset(const std::vector<point>& points, std::size_t k,
                                                   const point& reference);

// `k` of the points, best first by non-dominated fronts: whole fronts while they fit,
// then the greedy hypervolume subset of the front that does not (the reference: each
// objective's worst value plus 10% of its size). MOTPE's good set, MO-ASHA's and
// HyperBand's promotions.
std::vector<std::size_t> select_by_fronts(const std::vector<point>& points, std::size_t k);

}  // namespace tune
