// The training loop, shared by the CPU and GPU: per-epoch shuffling, SGD steps, a
// report after each epoch (with validation accuracy, which is what tuning compares),
// a stop flag checked between steps, and the test accuracy at the end.
#pragma once

#include <cmath>
#include <atomic>
#include <functional>
#include <string>

#include "tune/core/status.hpp"
#include "tune/train/backend.hpp"
#include "tune/train/data.hpp"
#include "tune/train/model.hpp"

namespace tune::train {

struct epoch_report {
  int epoch = 0;  // 1-based
  double train_loss = 0, train_acc = 0;  // over the epoch's steps, before each update
  double val_loss = 0, val_acc = 0;      // after the epoch
  double samples_per_s = 0;              // training steps only (no evaluation)
  double seconds = 0;                    // the whole epoch, evaluation included
  int devices = 1;                       // devices the steps ran on (data-parallel: 2+)
  // The last epoch only (hp.epochs): the test split, evaluated before this report;
  // NaN in the others.
  double test_loss = std::nan(""), test_acc = std::nan("");
};

struct train_result {
  std::string device;  // the backend's name, e.g. "cpu" or "cuda:0 (NVIDIA H200)"
  int devices = 1;     // devices the steps ran on (data-parallel: 2+)
  int epochs = 0;      // completed
  bool stopped = false;  // the stop flag or the callback ended training early
  double val_acc = 0;
  double test_acc = 0;  // NaN when stopped: a stopped trial is not tested
  double test_loss = 0;
  double samples_per_s = 0;  // all training steps together
  double seconds = 0;        // everything: setup, data upload, training, evaluation
};

struct train_options {
  // cpu, one CUDA device, or several (data-parallel: hp.batch_size is the whole step's
  // batch, split across them; see backend.hpp and README.md).
  device_spec device;
  // Called after each epoch; returning false stops training (e.g. an early-stopping
  // scheduler's decision). May be empty.
  std::function<bool(const epoch_report&)> on_epoch;
  // Checked between steps; when it turns true, training stops within one step.
  const std::atomic<bool>* stop = nullptr;
};

// Trains hp.model on data.train for hp.epochs; errors name the bad hyperparameter or
// why the device cannot be used.
expected<train_result> train(const hyperparameters& hp, const fashion_mnist& data, const train_options& options = {});

// Where one training step's time goes on this device (backend::profile_steps): the
// model set up as train() does, then `steps` steps of the first epoch timed op by op.
expected<std::vector<backend::op_time>> profile(const hyperparameters& hp, const fashion_mnist& data,
                                                const device_spec& device, int steps);

}  // namespace tune::train
