// What the train tests share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace tune::train {

// ||a - b|| / ||b|| over n floats (b all zero: the absolute error).
inline double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace tune::train
