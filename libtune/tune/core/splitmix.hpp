// A small seeded generator (splitmix64) whose sequence is fixed by this file alone, so
// the trainer's shuffles, splits and initial weights, and PBT's choices, are the same on
// every machine and library (std::shuffle and std::normal_distribution are
// implementation-defined). The tuner's searches use tune/tuner/rng.hpp (xoshiro256**);
// PBT keeps this one so that a seed gives the same exploits and explores as before.
#pragma once

#include <cmath>
#include <cstdint>

namespace tune {

class splitmix_rng {
 public:
  explicit splitmix_rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n) (Lemire's multiply-shift; the tiny bias is irrelevant here).
  uint64_t below(uint64_t n) { return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * n) >> 64); }

  // Uniform in (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

  // Standard normal (Box-Muller, one value per call for simplicity).
  double normal() {
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace tune
