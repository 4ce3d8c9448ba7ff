// The accuracy targets on the real data, with default hyperparameters, 5 epochs:
// MLP >= 0.87 and CNN >= 0.90 test accuracy. The MLP runs on the CPU everywhere (CI);
// the CNN runs on the CPU only with TUNE_TRAIN_SLOW_TESTS=1 (see README.md for times),
// and on a GPU when there is one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "tune/train/trainer.hpp"

namespace tune::train {
namespace {

const fashion_mnist& data() {
  static auto d = load_fashion_mnist();
  return *d;
}

bool have_data() {
  static auto d = load_fashion_mnist();
  return d.has_value();
}

void expect_accuracy(const std::string& model, device_spec dev, double target) {
  ASSERT_TRUE(have_data()) << load_fashion_mnist().error().message();
  hyperparameters hp;
  hp.model = model;
  train_options o;
  o.device = dev;
  o.on_epoch = [](const epoch_report& r) {
    std::printf("  epoch %d: train_acc %.4f val_acc %.4f, %.0f samples/s, %.2f s\n", r.epoch, r.train_acc,
                r.val_acc, r.samples_per_s, r.seconds);
    return true;
  };
  auto r = train(hp, data(), o);
  ASSERT_TRUE(r) << r.error().message();
  std::printf("  %s on %s: test_acc %.4f val_acc %.4f in %.1f s\n", model.c_str(), r->device.c_str(), r->test_acc,
              r->val_acc, r->seconds);
  EXPECT_EQ(r->epochs, 5);
  EXPECT_GE(r->test_acc, target);
  EXPECT_GE(r->val_acc, target - 0.02);
}

bool slow_tests() {
  const char* e = std::getenv("TUNE_TRAIN_SLOW_TESTS");
  return e && std::string{e} == "1";
}

TEST(Accuracy, MlpOnCpu) { expect_accuracy("mlp", {}, 0.87); }

TEST(Accuracy, CnnOnCpu) {
  if (!slow_tests()) GTEST_SKIP() << "takes minutes on a small CPU: set TUNE_TRAIN_SLOW_TESTS=1 to run it";
  expect_accuracy("cnn", {}, 0.90);
}

TEST(Accuracy, MlpOnGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
  expect_accuracy("mlp", {true, 0}, 0.87);
}

TEST(Accuracy, CnnOnGpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device here";
  expect_accuracy("cnn", {true, 0}, 0.90);
}

// A stop request ends training within a step, and the result says it was stopped.
TEST(Accuracy, StopFlagEndsTrainingEarly) {
  ASSERT_TRUE(have_data());
  hyperparameters hp;
  hp.width = 32;
  hp.depth = 1;
  std::atomic<bool> stop{false};
  train_options o;
  int epochs_seen = 0;
  o.on_epoch = [&](const epoch_report&) {
    ++epochs_seen;
    stop = true;
    return true;
  };
  o.stop = &stop;
  auto r = train(hp, data(), o);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(r->epochs, 1);
  EXPECT_EQ(epochs_seen, 1);
  EXPECT_TRUE(std::isnan(r->test_acc));
}

}  // namespace
}  // namespace tune::train
