// A numeric domain's internal coordinates, shared by the model-based searches (TPE,
// the GP): where distances between values mean something. Internal to the tuner.
#pragma once

#include <algorithm>
#include <cmath>

#include <boost/math/special_functions/erf.hpp>

#include "tune/tuner/space.hpp"

namespace tune::detail {

// A numeric domain's internal coordinates: log for log domains; integers and
// quantized domains widened by half a step (a value stands for its step's interval);
// for a normal domain its cumulative distribution, in [0, 1] (the prior, nearly flat
// there, is then nearly the domain's normal).
struct axis {
  numeric_spec spec;
  double low = 0, high = 1;

  explicit axis(const numeric_spec& s) : spec(s) {
    if (s.normal) return;
    const double step = s.q > 0 ? s.q : s.integer ? 1.0 : 0.0;
    double lo = s.lo, hi = s.hi;
    if (step > 0 && !s.log) lo -= step / 2, hi += step / 2;
    if (s.log && s.integer && !(s.q > 0)) hi += 1;  // lograndint: floor of a log-uniform below hi+1
    low = s.log ? std::log(lo) : lo;
    high = s.log ? std::log(hi) : hi;
  }
  bool degenerate() const { return !(high > low); }
  bool holds(const observation& o) const {
    return !o.categorical && std::isfinite(o.value) && o.value >= spec.lo && o.value <= spec.hi;
  }
  double internal(double v) const {
    if (spec.normal) return std::clamp(0.5 * std::erfc(-(v - spec.mean) / (spec.sd * std::sqrt(2.0))), 0.0, 1.0);
    return std::clamp(spec.log ? std::log(v) : v, low, high);
  }
  double external(double x) const {
    if (spec.normal) {
      const double u = std::clamp(x, 1e-12, 1 - 1e-12);
      return param_sampler::snap(spec, spec.mean + spec.sd * std::sqrt(2.0) * boost::math::erf_inv(2 * u - 1));
    }
    if (degenerate()) return spec.lo;
    double v = spec.log ? std::exp(x) : x;
    if (spec.log && spec.integer && !(spec.q > 0)) v = std::floor(v);
    return param_sampler::snap(spec, v);
  }
  // The same coordinates scaled to [0, 1] (the GP's unit cube).
  double to_unit(double v) const { return degenerate() ? 0.5 : (internal(v) - low) / (high - low); }
  double from_unit(double u) const { return external(low + std::clamp(u, 0.0, 1.0) * (high - low)); }
};

}  // namespace tune::detail
