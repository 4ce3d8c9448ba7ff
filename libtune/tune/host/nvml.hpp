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

namespace tune {

struct gpu_process_sample {
  int pid = 0;
  int64_t memory = -1;  // bytes; -1 when NVML cannot say (e.g. without privileges)
  // Percent of the time since the last sample that a kernel of this process ran on the
  // card (NVML's per-process SM utilisation, averaged over its samples); -1: not known
  // (no sample since the last look, or the driver does not say).
  int sm_util = -1;
};

struct gpu_card_sample {
  int index = 0;  // NVML's index (not CUDA's numbering)
  std::string uuid;  // "GPU-xxxxxxxx-...", as CUDA formats it too
  std::string pci_bus_id;
  int64_t total = 0, used = 0;  // bytes
  int util = -1;  // percent of the last sample period a kernel ran on the card (-1: not known)
  std::vector<gpu_process_sample> processes;
};

class nvml {
 public:
  // Loads the library and initialises it; errors say why (no driver, no library).
  // `library` is for tests: another file name to load.
  static expected<std::shared_ptr<nvml>> load(const std::string& library = "libnvidia-ml.so.1");
  ~nvml();
  nvml(const nvml&) = delete;
  nvml& operator=(const nvml&) = delete;

  // Every card with its processes, now. A card that fails to answer is an error naming
  // it (the audit then says so and tries again at its next sample).
  expected<std::vector<gpu_card_sample>> sample();

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
