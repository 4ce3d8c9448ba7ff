// The trainer's random numbers: the splitmix64 generator of tune/core/splitmix.hpp,
// whose sequence is fixed by that file alone (shuffles, splits and initial weights are
// the same on every machine and library).
#pragma once

#include "tune/core/splitmix.hpp"

namespace tune::train {

using rng = tune::splitmix_rng;

}  // namespace tune::train
