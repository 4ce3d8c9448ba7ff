// Which of a trial's checkpoints the experiment folder keeps (Ray's CheckpointConfig,
// plan.hpp's checkpoint_rules): with num_to_keep 0 every one; else the num_to_keep best
// by score_attribute in score_order, or the num_to_keep newest when there is no score
// attribute; and always those in `always` (the newest reported, the newest stored, any a
// start on its way restores from), whatever their rank. A checkpoint whose score is not
// known (its result has not come yet, or did not report the attribute) is kept, and not
// counted among the num_to_keep: as Ray, which ranks such a one above the scored ones.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "tune/tuner/plan.hpp"

namespace tune {

// `candidates`: the checkpoints' iterations; `scores`: the score attribute's value at
// an iteration, where its result reported one. The kept subset of `candidates`.
std::set<int64_t> checkpoints_kept(const checkpoint_rules& rules, const std::vector<int64_t>& candidates,
                                   const std::map<int64_t, double>& scores, const std::set<int64_t>& always);

// Whether a checkpoint not copied yet need not be copied at all: the rule would remove
// it at once beside those already stored (never one whose score is not known yet).
bool checkpoint_needless(const checkpoint_rules& rules, int64_t iteration, const std::vector<int64_t>& stored,
                         const std::map<int64_t, double>& scores, const std::set<int64_t>& always);

}  // namespace tune
