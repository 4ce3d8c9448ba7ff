// What runs on a machine's cards now, as the GPU audit reads it: NVML on real cards
// (nvml.hpp), or a simulated view of cards that a test or a demo plays
// (simulated_gpus.hpp). Through this interface a test can put "another program" on a
// card without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

struct gpu_process_sample {
  int pid = 0;
  int64_t memory = -1;  // bytes; -1 when it cannot be said (e.g. NVML without privileges)
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

class gpu_sampler {
 public:
  virtual ~gpu_sampler() = default;
  // Every card with its processes, now. A card that fails to answer is an error naming
  // it (the audit then says so and tries again at its next sample).
  virtual expected<std::vector<gpu_card_sample>> sample() = 0;
};

}  // namespace tune
