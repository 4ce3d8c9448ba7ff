// The CPU backend's gradients against finite differences: for each layer's weights
// and bias, the derivative of the loss along a random direction, measured by central
// differences, must match the analytic gradient's dot product with that direction.
#include <gtest/gtest.h>

#include <cmath>

#include "tune/train/backend.hpp"
#include "tune/train/rng.hpp"

namespace tune::train {
namespace {

struct problem {
  std::vector<float> x;
  std::vector<int32_t> y;
};

problem random_problem(const network& net, int n, uint64_t seed) {
  rng r{seed};
  problem p;
  for (int64_t i = 0; i < n * net.input_features; ++i) p.x.push_back(static_cast<float>(r.normal()));
  for (int i = 0; i < n; ++i) p.y.push_back(static_cast<int32_t>(r.below(net.classes)));
  return p;
}

void check_gradients(const hyperparameters& hp, int rows, int cols) {
  auto net = describe(hp, rows, cols, 10);
  auto b = make_cpu_backend(hp, net);
  ASSERT_TRUE(b) << b.error().message();
  const int n = hp.batch_size;
  auto prob = random_problem(net, n, 99);
  auto w = init_parameters(net, 5);
  rng r{7};
  for (auto& v : w) v += 0.05f * static_cast<float>(r.normal());  // nonzero biases too
  ASSERT_TRUE((*b)->set_parameters(w));
  std::vector<float> g;
  ASSERT_TRUE((*b)->loss_and_gradient(prob.x, prob.y, n, &g, nullptr));
  auto loss_at = [&](const std::vector<float>& p) {
    (*b)->set_parameters(p);
    return double(*(*b)->loss_and_gradient(prob.x, prob.y, n, nullptr, nullptr));
  };
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const auto& l = net.layers[li];
    for (auto [offset, count] : {std::pair{l.weight_offset, l.weight_count()}, std::pair{l.bias_offset, size_t(l.out)}}) {
      for (int trial = 0; trial < 3; ++trial) {
        std::vector<double> d(count);
        double norm = 0;
        for (auto& v : d) {
          v = r.normal();
          norm += v * v;
        }
        norm = std::sqrt(norm);
        double analytic = 0;
        for (size_t i = 0; i < count; ++i) analytic += g[offset + i] * d[i] / norm;
        // Small enough that few ReLUs and max-pool choices flip, large enough for float
        // rounding of the loss (1e-2 fails on the CNN's pooling, 3e-4 on rounding).
        const double eps = 3e-3;
        auto plus = w, minus = w;
        for (size_t i = 0; i < count; ++i) {
          plus[offset + i] += static_cast<float>(eps * d[i] / norm);
          minus[offset + i] -= static_cast<float>(eps * d[i] / norm);
        }
        const double numeric = (loss_at(plus) - loss_at(minus)) / (2 * eps);
        EXPECT_NEAR(numeric, analytic, 3e-2 * std::max(std::abs(numeric), std::abs(analytic)) + 5e-4)
            << hp.model << " layer " << li << (offset == l.bias_offset ? " bias" : " weights") << " trial " << trial;
      }
    }
  }
}

TEST(Gradients, TinyMlpMatchesFiniteDifferences) {
  hyperparameters hp;
  hp.width = 7;
  hp.depth = 2;
  hp.batch_size = 5;
  check_gradients(hp, 4, 5);
}

TEST(Gradients, TinyCnnMatchesFiniteDifferences) {
  hyperparameters hp;
  hp.model = "cnn";
  hp.width = 6;
  hp.batch_size = 3;
  check_gradients(hp, 8, 8);
}

// One step by hand: the update is PyTorch's SGD with momentum and weight decay.
TEST(Gradients, StepIsSgdWithMomentumAndWeightDecay) {
  hyperparameters hp;
  hp.width = 4;
  hp.depth = 1;
  hp.batch_size = 2;
  hp.lr = 0.1;
  hp.momentum = 0.5;
  hp.weight_decay = 0.01;
  auto net = describe(hp, 2, 2, 10);
  auto b = make_cpu_backend(hp, net);
  ASSERT_TRUE(b);
  image_set d;
  d.count = 2;
  d.rows = d.cols = 2;
  d.pixels = {0, 50, 100, 150, 200, 250, 30, 60};
  d.labels = {3, 7};
  ASSERT_TRUE((*b)->load(split_id::train, d));
  auto w0 = init_parameters(net, 3);
  ASSERT_TRUE((*b)->set_parameters(w0));
  std::vector<float> x;
  for (auto p : d.pixels) x.push_back(normalise(p));
  std::vector<float> g;
  ASSERT_TRUE((*b)->loss_and_gradient(x, std::vector<int32_t>{3, 7}, 2, &g, nullptr));
  std::vector<int32_t> order{0, 1};
  ASSERT_TRUE((*b)->begin_epoch(order, 0.1f));
  ASSERT_TRUE((*b)->step(0, 2));  // v = g + wd w; w -= lr v
  auto w1 = *(*b)->parameters();
  for (size_t i = 0; i < w0.size(); ++i) EXPECT_NEAR(w1[i], w0[i] - 0.1f * (g[i] + 0.01f * w0[i]), 1e-6);
  auto s = (*b)->end_epoch();
  EXPECT_EQ(s->count, 2);
}

}  // namespace
}  // namespace tune::train
