// One interface over the CPU and GPU implementations of a network, so the training
// loop (trainer.cpp) is shared. Calls are coarse on purpose: a GPU backend keeps the
// data, the parameters and the per-epoch sums on the device and only synchronises in
// end_epoch and evaluate.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tune/core/status.hpp"
#include "tune/train/data.hpp"
#include "tune/train/model.hpp"

namespace tune::train {

// Where a network runs: the CPU, one CUDA device, or several CUDA devices trained
// data-parallel (each step's batch split across them, see README.md). Device numbers
// are as the process sees them: a trial process sees only its cards, as 0..k-1.
// device_spec{true, i} is still one device, cuda:i.
struct device_spec {
  device_spec() = default;
  device_spec(bool cuda_device, int device_index = 0) : cuda(cuda_device), index(device_index) {}

  bool cuda = false;
  int index = 0;             // the device when `indices` is empty and `all` is false
  std::vector<int> indices;  // 2+ distinct devices: data-parallel over them, in this
                             // order (the first holds the reference replica)
  bool all = false;          // every CUDA device the process sees (1: as cuda:0)

  // The CUDA devices in use, in order (`all` asks cuda_device_count()); empty for the
  // CPU, and for `all` where no device is visible.
  std::vector<int> devices() const;
  // "cpu", "cuda:N", "cuda:N,M,..." or "cuda:all" (parse_device reads each back).
  std::string to_string() const;
};

// "cpu"; "cuda" (= cuda:0) or "cuda:N"; "cuda:N,M,..." (distinct, data-parallel over
// those devices); "cuda:all" (every visible device). "gpu" works in place of "cuda".
expected<device_spec> parse_device(std::string_view text);

// Number of CUDA devices this process can use; 0 without CUDA or without a device.
int cuda_device_count();

enum class split_id { train, validation, test };

struct sums {
  double loss = 0;      // sum over samples of the cross-entropy loss
  int64_t correct = 0;  // samples whose largest logit is the label
  int64_t count = 0;
};

inline sums operator+(const sums& a, const sums& b) { return {a.loss + b.loss, a.correct + b.correct, a.count + b.count}; }

class backend {
 public:
  virtual ~backend() = default;
  virtual std::string name() const = 0;

  // Replaces the parameters (layout of model.hpp) and zeroes the momentum.
  virtual status set_parameters(std::span<const float> params) = 0;
  virtual expected<std::vector<float>> parameters() = 0;

  // Makes a split resident (the GPU copies it to the device once).
  virtual status load(split_id which, const image_set& data) = 0;

  // Starts an epoch over the train split in this order (a permutation of its rows),
  // with this epoch's learning rate (the trainer's schedule).
  virtual status begin_epoch(std::span<const int32_t> order, float lr) = 0;
  // One SGD step on rows order[first, first + count); steps come in order, first = 0,
  // then first + count of the previous one; count <= batch_size.
  virtual status step(int64_t first, int count) = 0;
  // Loss and accuracy sums over the epoch's steps (before each step's update).
  virtual expected<sums> end_epoch() = 0;

  // Loss and accuracy of the current parameters on a loaded split.
  virtual expected<sums> evaluate(split_id which) = 0;

  // How many devices a step runs on: 1, or k for a data-parallel backend.
  virtual int devices() const { return 1; }
  // The parameters as replica r holds them (0 <= r < devices()); replica 0's are what
  // parameters() returns. For tests: data-parallel replicas must stay identical.
  virtual expected<std::vector<float>> replica_parameters(int r) {
    if (r != 0) return status{errc::invalid_argument, "replica " + std::to_string(r) + " of a one-device backend"};
    return parameters();
  }

  // For tests: mean loss and its gradient (layout of model.hpp) on n given samples
  // (normalised floats, n <= batch_size), without updating anything; logits optional.
  virtual expected<float> loss_and_gradient(std::span<const float> x, std::span<const int32_t> y, int n,
                                            std::vector<float>* grad, std::vector<float>* logits) = 0;

  // Where a training step's time goes (tune_train --profile): one row per launch group
  // of the step, its mean time on the device over `steps` full-batch steps run one
  // launch after another (the device never waits for the host between them), then a
  // row "step (graph)": the mean of a whole step replayed as the trainer runs it. The
  // parameters are updated as by step(): call between begin_epoch and end_epoch.
  struct op_time {
    std::string op;
    double us = 0;
  };
  virtual expected<std::vector<op_time>> profile_steps(int steps) {
    (void)steps;
    return status{errc::invalid_argument, "profiling is for one CUDA device: use --device cuda or cuda:N"};
  }
};

// The backend for this device; errors say why the device cannot be used.
expected<std::unique_ptr<backend>> make_backend(const hyperparameters& hp, const network& net,
                                                const device_spec& device);

// The implementations (the factory picks one).
expected<std::unique_ptr<backend>> make_cpu_backend(const hyperparameters& hp, const network& net);
expected<std::unique_ptr<backend>> make_cuda_backend(const hyperparameters& hp, const network& net, int device);
// Data-parallel over 2+ distinct CUDA devices (cuda_backend.cu): hp.batch_size is the
// whole step's batch, split across them.
expected<std::unique_ptr<backend>> make_data_parallel_backend(const hyperparameters& hp, const network& net,
                                                              const std::vector<int>& devices);

}  // namespace tune::train
