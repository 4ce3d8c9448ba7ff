// What this machine has: CPUs (those this process may run on), memory, and GPUs.
// GPUs come from the CUDA runtime when libtune is built with CUDA, in PCI bus order,
// after any inherited CUDA_VISIBLE_DEVICES; a machine without a driver or a card has
// none. Nothing here allocates GPU memory beyond the runtime's own probe.
#pragma once

#include <string>
#include <vector>

#include "tune/core/gpu_instance.hpp"
#include "tune/core/node_resources.hpp"
#include "tune/core/quantity.hpp"

namespace tune {

struct gpu_probe {
  std::vector<gpu_instance> gpus;  // indices 0.. in PCI bus order
  std::string note;                // why there are none: "built without CUDA", "no CUDA device", ...
  std::string error;               // a setting that is wrong (TUNE_SIMULATED_GPUS): start nothing on it
};

struct host_info {
  std::string hostname;
  quantity cpus;
  int64_t memory = 0;  // bytes (MemTotal)
  gpu_probe gpu;
};

// This machine's name, without probing anything else.
std::string hostname();

// Asks the CUDA runtime (when built with it). Never fails: problems go into `note`.
gpu_probe detect_gpus();
// This machine: its name, CPUs, memory, and GPUs: the simulated view's cards when
// TUNE_SIMULATED_GPUS is set (tune/host/simulated_gpus.hpp; a view that cannot be read
// is the probe's `error`), else detect_gpus().
host_info detect_host();

// `count` logical GPUs for a machine without cards (tests, CPU-only clusters):
// UUIDs "LOGICAL-<owner>-<i>" (owner: a node id, unique in a cluster), marked logical,
// each with `memory` bytes.
std::vector<gpu_instance> logical_gpus(const std::string& owner, int count, int64_t memory);
// The memory a logical GPU declares (16 GiB), for quotas of shares.
inline constexpr int64_t logical_gpu_memory = int64_t{16} << 30;

// `count` GPUs for a node: the first `count` of this machine's cards, or, on a machine
// without any, `count` logical ones (owner as for logical_gpus). `option` names the
// setting in errors ("--num-gpus 3: this machine has only 2 GPUs").
expected<std::vector<gpu_instance>> first_gpus(const std::vector<gpu_instance>& cards, int count,
                                               const std::string& owner, const std::string& option);

// This machine as a node: its CPUs, memory and GPUs.
expected<node_resources> local_node_resources(const host_info& host);

}  // namespace tune
