// Helpers of the search algorithms' tests (search_test.cpp, gp_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tune/tuner/search.hpp"

namespace tune::search_testing {

inline bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

inline std::unique_ptr<search_algorithm> ok(expected<std::unique_ptr<search_algorithm>> a) {
  EXPECT_TRUE(a) << a.error().message();
  return a ? std::move(*a) : nullptr;
}

// Runs `alg` sequentially: suggest, evaluate, complete. The configs, in order.
inline std::vector<config> run(search_algorithm& alg, const std::function<double(const config&)>& f,
                               int max_trials = 100000) {
  std::vector<config> out;
  for (int i = 0; i < max_trials; ++i) {
    const std::string id = std::to_string(i);
    auto c = alg.suggest(id);
    EXPECT_TRUE(c) << c.error().message();
    if (!c || !c->has_value()) break;
    out.push_back(**c);
    EXPECT_TRUE(alg.on_complete(id, f(**c)));
  }
  return out;
}

}  // namespace tune::search_testing
