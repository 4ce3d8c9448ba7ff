// The GPU against the CPU reference: forward and backward on random inputs, then
// whole epochs (gather, fused kernels, CUDA graphs, partial last batch, evaluation).
// Skips where there is no CUDA device (this includes builds without CUDA).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tune/train/backend.hpp"
#include "tune/train/rng.hpp"
#include "tune/train/trainer.hpp"
#include "tune/train/test_util.hpp"

namespace tune::train {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here"

// How much the CPU's own gradients move when inputs and weights are perturbed by
// TF32's rounding (relative 5e-4): ReLU and max-pool choices near a tie flip, and in
// hidden layers that alone is a 1-4% change on random inputs (measured). A TF32 GPU
// cannot be asked to be closer to the CPU than the CPU is to itself.
std::vector<float> perturbed_cpu_gradient(backend& cpu, std::vector<float> w, std::vector<float> x,
                                          const std::vector<int32_t>& y, int n) {
  rng q{9};
  for (auto& v : w) v *= 1 + 5e-4f * static_cast<float>(q.normal());
  for (auto& v : x) v *= 1 + 5e-4f * static_cast<float>(q.normal());
  std::vector<float> g;
  cpu.set_parameters(w);
  cpu.loss_and_gradient(x, y, n, &g, nullptr);
  return g;
}

void compare_forward_backward(hyperparameters hp, double tol) {
  auto net = describe(hp);
  auto cpu = make_cpu_backend(hp, net);
  auto gpu = make_cuda_backend(hp, net, 0);
  ASSERT_TRUE(cpu) << cpu.error().message();
  ASSERT_TRUE(gpu) << gpu.error().message();
  auto w = init_parameters(net, 11);
  rng r{3};
  for (auto& v : w) v += 0.01f * static_cast<float>(r.normal());
  ASSERT_TRUE((*cpu)->set_parameters(w));
  ASSERT_TRUE((*gpu)->set_parameters(w));
  const int n = hp.batch_size;
  std::vector<float> x(size_t(n) * net.input_features);
  std::vector<int32_t> y(n);
  for (auto& v : x) v = static_cast<float>(r.normal());
  for (auto& v : y) v = static_cast<int32_t>(r.below(10));
  std::vector<float> gc, gg, lc, lg;
  auto loss_c = (*cpu)->loss_and_gradient(x, y, n, &gc, &lc);
  auto loss_g = (*gpu)->loss_and_gradient(x, y, n, &gg, &lg);
  ASSERT_TRUE(loss_c) << loss_c.error().message();
  ASSERT_TRUE(loss_g) << loss_g.error().message();
  EXPECT_NEAR(*loss_g, *loss_c, tol * std::abs(*loss_c));
  EXPECT_LE(rel_err(lg.data(), lc.data(), lc.size()), tol) << "logits";
  std::vector<float> gp;
  if (hp.tf32) gp = perturbed_cpu_gradient(**cpu, w, x, y, n);
  for (size_t li = 0; li < net.layers.size(); ++li) {
    const auto& l = net.layers[li];
    double wtol = tol, btol = tol;
    if (hp.tf32) {  // the CPU's own sensitivity, doubled, where it exceeds tol
      wtol = std::max(tol, 2 * rel_err(gp.data() + l.weight_offset, gc.data() + l.weight_offset, l.weight_count()));
      btol = std::max(tol, 2 * rel_err(gp.data() + l.bias_offset, gc.data() + l.bias_offset, l.out));
    }
    const double we = rel_err(gg.data() + l.weight_offset, gc.data() + l.weight_offset, l.weight_count());
    const double be = rel_err(gg.data() + l.bias_offset, gc.data() + l.bias_offset, l.out);
    std::printf("  %s%s layer %zu: weight gradient error %.2e (limit %.1e), bias %.2e (limit %.1e)\n",
                hp.model.c_str(), hp.tf32 ? " tf32" : "", li, we, wtol, be, btol);
    EXPECT_LE(we, wtol) << hp.model << " layer " << li << " weight gradient";
    EXPECT_LE(be, btol) << hp.model << " layer " << li << " bias gradient";
  }
}

TEST(Gpu, MlpForwardBackwardMatchesCpuFp32) {
  SKIP_WITHOUT_GPU();
  hyperparameters hp;
  hp.batch_size = 64;
  compare_forward_backward(hp, 1e-4);
}

TEST(Gpu, CnnForwardBackwardMatchesCpuFp32) {
  SKIP_WITHOUT_GPU();
  hyperparameters hp;
  hp.model = "cnn";
  hp.batch_size = 32;
  compare_forward_backward(hp, 1e-4);
}

// The fused first conv block and the thin classifier are the default; the library
// path they replace (cuDNN, cuBLAS for every layer) stays right too.
TEST(Gpu, LibraryKernelsForEveryLayerMatchCpuToo) {
  SKIP_WITHOUT_GPU();
  ::setenv("TUNE_TRAIN_DIRECT_CONV", "0", 1);
  for (const char* m : {"mlp", "cnn"}) {
    hyperparameters hp;
    hp.model = m;
    hp.batch_size = 32;
    compare_forward_backward(hp, 1e-4);
  }
  ::unsetenv("TUNE_TRAIN_DIRECT_CONV");
}

// The pooled gradient kernels (off unless TUNE_TRAIN_POOLED_GRADS=1) against the CPU too.
TEST(Gpu, PooledGradientKernelsMatchCpu) {
  SKIP_WITHOUT_GPU();
  ::setenv("TUNE_TRAIN_POOLED_GRADS", "1", 1);
  hyperparameters hp;
  hp.model = "cnn";
  for (int batch : {32, 7}) {  // 7: a last slice of fewer samples than the others
    hp.batch_size = batch;
    compare_forward_backward(hp, 1e-4);
  }
  ::unsetenv("TUNE_TRAIN_POOLED_GRADS");
}

// A classifier layer is thin (own kernels) when it has few outputs; a batch of 3000
// rows with 512 inputs exercises the kernels' grid-stride loops.
TEST(Gpu, ThinClassifierMatchesCpuOnALargeBatch) {
  SKIP_WITHOUT_GPU();
  hyperparameters hp;
  hp.batch_size = 3000;
  hp.depth = 1;
  compare_forward_backward(hp, 1e-4);
}

// tune_train --profile: every part of the step named, each timed, and the graph's
// whole step no longer than the sum of its parts run one by one (plus slack).
TEST(Gpu, ProfileTimesEveryPartOfTheStep) {
  SKIP_WITHOUT_GPU();
  fashion_mnist data;
  auto& d = data.train;
  d.count = 2000;
  d.rows = d.cols = 28;
  rng r{5};
  for (int i = 0; i < d.count * 784; ++i) d.pixels.push_back(uint8_t(r.below(256)));
  for (int i = 0; i < d.count; ++i) d.labels.push_back(uint8_t(r.below(10)));
  hyperparameters hp;
  hp.model = "cnn";
  hp.batch_size = 64;
  auto rows = profile(hp, data, device_spec{true, 0}, 10);
  ASSERT_TRUE(rows) << rows.error().message();
  double sum = 0;
  for (const auto& row : *rows) {
    std::printf("  %-44s %8.1f us\n", row.op.c_str(), row.us);
    EXPECT_GT(row.us, 0) << row.op;
  }
  for (size_t i = 0; i + 1 < rows->size(); ++i) sum += (*rows)[i].us;
  ASSERT_GE(rows->size(), 10u);
  EXPECT_EQ(rows->front().op, "layer 1: conv1 block fwd (fused)");
  EXPECT_EQ(rows->back().op, "step (graph)");
  EXPECT_LE(rows->back().us, 1.5 * sum);
  // More steps than the epoch holds: the error says so; the CPU cannot be profiled.
  auto many = profile(hp, data, device_spec{true, 0}, 20);
  ASSERT_FALSE(many);
  EXPECT_NE(many.error().message().find("ask for fewer steps"), std::string::npos) << many.error().message();
}

TEST(Gpu, ProfilingTheCpuSaysToUseACudaDevice) {  // runs everywhere
  fashion_mnist data;
  data.train.count = 300;
  data.train.rows = data.train.cols = 28;
  data.train.pixels.assign(300 * 784, 0);
  data.train.labels.assign(300, 0);
  hyperparameters hp;
  auto cpu = profile(hp, data, device_spec{}, 1);
  ASSERT_FALSE(cpu);
  EXPECT_NE(cpu.error().message().find("--device cuda"), std::string::npos) << cpu.error().message();
}

TEST(Gpu, Tf32MatchesCpuWithinOnePercent) {
  SKIP_WITHOUT_GPU();
  for (const char* m : {"mlp", "cnn"}) {
    hyperparameters hp;
    hp.model = m;
    hp.batch_size = 32;
    hp.tf32 = true;
    compare_forward_backward(hp, 1e-2);
  }
}

// Two epochs over 3.5 batches: eager first steps, captured graphs, the partial batch's
// own graph, the on-device sums, then evaluation; parameters must stay close to the
// CPU's.
TEST(Gpu, EpochsMatchCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* m : {"mlp", "cnn"}) {
    hyperparameters hp;
    hp.model = m;
    hp.batch_size = 16;
    auto net = describe(hp);
    auto cpu = make_cpu_backend(hp, net);
    auto gpu = make_cuda_backend(hp, net, 0);
    ASSERT_TRUE(cpu && gpu) << (gpu ? "" : gpu.error().message());
    image_set d;
    d.count = 56;
    d.rows = d.cols = 28;
    rng r{5};
    for (int i = 0; i < 56 * 784; ++i) d.pixels.push_back(uint8_t(r.below(256)));
    for (int i = 0; i < 56; ++i) d.labels.push_back(uint8_t(r.below(10)));
    auto w = init_parameters(net, 2);
    for (auto* b : {&**cpu, &**gpu}) {
      ASSERT_TRUE(b->set_parameters(w));
      ASSERT_TRUE(b->load(split_id::train, d));
      ASSERT_TRUE(b->load(split_id::validation, d));
      ASSERT_TRUE(b->load(split_id::test, d));
    }
    for (int epoch = 0; epoch < 3; ++epoch) {
      auto order = permutation(56, epoch);
      sums s[2];
      for (int k = 0; k < 2; ++k) {
        backend& b = k ? **gpu : **cpu;
        ASSERT_TRUE(b.begin_epoch(order, 0.05f));
        for (int first = 0; first < 56; first += 16) {
          auto st = b.step(first, std::min(16, 56 - first));
          ASSERT_TRUE(st) << st.message();
        }
        auto e = b.end_epoch();
        ASSERT_TRUE(e) << e.error().message();
        s[k] = *e;
      }
      EXPECT_EQ(s[1].count, 56);
      EXPECT_NEAR(s[1].loss, s[0].loss, 1e-3 * std::abs(s[0].loss)) << m << " epoch " << epoch;
      EXPECT_NEAR(double(s[1].correct), double(s[0].correct), 1.0) << m << " epoch " << epoch;
    }
    auto pc = *(*cpu)->parameters();
    auto pg = (*gpu)->parameters();
    ASSERT_TRUE(pg) << pg.error().message();
    EXPECT_LE(rel_err(pg->data(), pc.data(), pc.size()), 1e-3) << m;
    auto ec = (*cpu)->evaluate(split_id::test);
    auto eg = (*gpu)->evaluate(split_id::test);
    ASSERT_TRUE(eg) << eg.error().message();
    EXPECT_EQ(eg->count, 56);
    EXPECT_NEAR(eg->loss, ec->loss, 1e-3 * std::abs(ec->loss));
  }
}

// cuDNN's algorithm choices are kept in the machine's cache folder by the first trial
// and read back by later ones; choices cuDNN does not take (a damaged or foreign file)
// are measured again, and the forward/backward results stay those of the CPU.
TEST(Gpu, CudnnChoicesAreRememberedAndABadMemoIsMeasuredAgain) {
  SKIP_WITHOUT_GPU();
  namespace fs = std::filesystem;
  auto dir = fs::temp_directory_path() / ("tune_cudnn_memo_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  ::setenv("TUNE_DATA_CACHE_DIR", dir.c_str(), 1);
  // Every layer through cuDNN (by default only the second block's forward is), so every
  // kind of choice is remembered.
  ::setenv("TUNE_TRAIN_DIRECT_CONV", "0", 1);
  hyperparameters hp;
  hp.model = "cnn";
  hp.batch_size = 32;
  compare_forward_backward(hp, 1e-4);
  std::vector<fs::path> memos;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("cudnn-algos-", 0) == 0) memos.push_back(e.path());
  ASSERT_EQ(memos.size(), 1u);
  std::ifstream in(memos[0]);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_GE(lines, 5) << "forward and filter for both layers, data for the second";
  compare_forward_backward(hp, 1e-4);  // from the memo
  // Every choice replaced by one cuDNN refuses (algorithm 15), then a half line.
  std::string bad;
  std::ifstream again(memos[0]);
  while (std::getline(again, line)) bad += line.substr(0, line.find(' ')) + " 15 3\n";
  std::ofstream(memos[0], std::ios::trunc) << bad << "fwd/1x32 3";
  compare_forward_backward(hp, 1e-4);
  ::unsetenv("TUNE_TRAIN_DIRECT_CONV");
  ::unsetenv("TUNE_DATA_CACHE_DIR");
  fs::remove_all(dir);
}

TEST(Gpu, BadDeviceIndexIsNamed) {
  SKIP_WITHOUT_GPU();
  hyperparameters hp;
  auto b = make_cuda_backend(hp, describe(hp), 99);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message().find("cuda:99"), std::string::npos) << b.error().message();
}

TEST(Gpu, WithoutCudaTheErrorSaysSo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "there is a CUDA device";
  hyperparameters hp;
  auto b = make_backend(hp, describe(hp), device_spec{true, 0});
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message().find("cuda:0"), std::string::npos) << b.error().message();
}

}  // namespace
}  // namespace tune::train
