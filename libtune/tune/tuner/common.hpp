// What the tuner's pure parts share: the metric's direction, configurations, and a
// trial scheduler's decisions. No CAF, no CUDA (DESIGN.md: the pure core).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tune {

enum class mode { min, max };

// One objective of a multi-objective experiment: a reported metric and its direction.
struct objective {
  std::string name;
  mode direction = mode::max;
};

// A sampled configuration: a JSON object (nested objects for nested parameters).
using config = nlohmann::json;

// True when `a` is a better metric value than `b` in this mode.
inline bool better(mode m, double a, double b) { return m == mode::max ? a > b : a < b; }

// What a trial scheduler decides after a result.
enum class decision {
  go_on,  // keep running
  stop,   // end the trial now (early stopping)
  pause,  // stop it and keep it for later (synchronous HyperBand, PBT)
};

inline const char* to_string(decision d) {
  return d == decision::go_on ? "continue" : d == decision::stop ? "stop" : "pause";
}

}  // namespace tune
