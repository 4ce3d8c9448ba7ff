// NVML, loaded at run time (dlopen "libnvidia-ml.so.1"): no build-time dependency on
// the driver. What the GPU audit needs from it: the cards with their UUIDs, memory and
// utilisation, and the compute processes on each card with the memory each uses and
// the share of time its kernels ran (where the driver says).
//
// NVML sees every card of the machine (CUDA_VISIBLE_DEVICES does not apply to it) and
// reports process ids as the kernel's PID namespace of the driver sees them: inside a
// container with its own PID namespace they may not match /proc here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tune/core/status.hpp"
#include "tune/host/gpu_sampler.hpp"

namespace tune {

class nvml : public gpu_sampler {
 public:
  // Loads the library and initialises it; errors say why (no driver, no library).
  // `library` is for tests: another file name to load.
  static expected<std::shared_ptr<nvml>> load(const std::string& library = "libnvidia-ml.so.1");
  ~nvml() override;
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;

  expected<std::vector<gpu_card_sample>> sample() override;

 private:
  struct api;
  nvml() = default;
  void read_process_utilization(void* device, unsigned int index, gpu_card_sample& c);
  void* lib_ = nullptr;
  std::unique_ptr<api> api_;
  std::vector<gpu_process_sample> buffer_;
  std::vector<unsigned long long> util_seen_;  // per card: the newest per-process sample read
};

}  // namespace tune
