// One GPU of a node, as detected (CUDA runtime, in PCI bus order) or declared.
#pragma once

#include <cstdint>
#include <string>

namespace tune {

struct gpu_instance {
  int32_t index = 0;        // position on its node in PCI bus order: 0, 1, ...
  std::string uuid;         // "GPU-8f3c..." (CUDA_VISIBLE_DEVICES accepts it)
  std::string pci_bus_id;   // "0000:17:00.0"
  std::string name;         // "NVIDIA H200"
  int64_t memory_total = 0; // bytes
  bool logical = false;     // declared (--num-gpus on a machine without GPUs), not a real card

  friend bool operator==(const gpu_instance&, const gpu_instance&) = default;
};

}  // namespace tune
