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
  // Played by a simulated view (TUNE_SIMULATED_GPUS, tune/host/simulated_gpus.hpp): logical
  // for its trials, but audited and shared with the machine's other programs as a card.
  bool simulated = false;

  friend bool operator==(const gpu_instance&, const gpu_instance&) = default;
};

// Whether other programs on the machine can use this card too (a real card, or a
// simulated one): what they hold there counts (docs/gpu-sharing.md). A logical card is
// its node's alone.
inline bool shared_card(const gpu_instance& g) { return !g.logical || g.simulated; }
}  // namespace tune
