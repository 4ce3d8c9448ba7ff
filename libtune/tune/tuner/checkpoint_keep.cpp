#include "tune/tuner/checkpoint_keep.hpp"

#include <algorithm>

namespace tune {

std::set<int64_t> checkpoints_kept(const checkpoint_rules& rules, const std::vector<int64_t>& candidates,
                                   const std::map<int64_t, double>& scores, const std::set<int64_t>& always) {
  std::set<int64_t> kept(candidates.begin(), candidates.end());
  if (rules.num_to_keep <= 0 || kept.size() <= static_cast<size_t>(rules.num_to_keep)) return kept;
  bool by_score = !rules.score_attribute.empty();
  bool max = rules.score_order == mode::max;
  std::vector<int64_t> ranked;
  for (auto at : kept)
    if (!by_score || scores.count(at)) ranked.push_back(at);
  // Best first: by score, then the newer first.
  std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) {
    if (by_score) {
      double sa = scores.at(a), sb = scores.at(b);
      if (sa != sb) return max ? sa > sb : sa < sb;
    }
    return a > b;
  });
  for (size_t i = static_cast<size_t>(rules.num_to_keep); i < ranked.size(); ++i)
    if (!always.count(ranked[i])) kept.erase(ranked[i]);
  return kept;
}

bool checkpoint_needless(const checkpoint_rules& rules, int64_t iteration, const std::vector<int64_t>& stored,
                         const std::map<int64_t, double>& scores, const std::set<int64_t>& always) {
  if (rules.num_to_keep <= 0 || always.count(iteration)) return false;
  if (!rules.score_attribute.empty() && !scores.count(iteration)) return false;
  auto all = stored;
  all.push_back(iteration);
  return !checkpoints_kept(rules, all, scores, always).count(iteration);
}

}  // namespace tune
