// A simulated view of a machine's cards, for tests and demos on a machine without
// GPUs: a folder that plays the driver. With TUNE_SIMULATED_GPUS=DIR, a node takes its
// cards from DIR/cards.json instead of the CUDA runtime (they are logical for its
// trials: those run on the CPU), and its GPU audit reads what runs on them from DIR
// instead of NVML: every libtune process on the machine that is given the same folder
// sees the same cards, as they would see the same real ones.
//
//   DIR/cards.json   [{"uuid": "GPU-sim-0", "memory": "16GiB", "name": "simulated H200"}, ...]
//   DIR/procs/PID    {"GPU-sim-0": 21474836480, ...}: process PID holds these bytes on
//                    these cards, as long as it lives (a file of a process that has
//                    ended is not read, and is removed, as the driver frees a context)
//
// A program plays "a process on a card" by writing its own procs file (hold() below, or
// `{"GPU-sim-0": 1073741824}` by hand); a trial does the same with the UUIDs in its
// CUDA_VISIBLE_DEVICES. docs/gpu-sharing.md shows both.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tune/core/gpu_instance.hpp"
#include "tune/core/status.hpp"
#include "tune/host/gpu_sampler.hpp"

namespace tune {

class simulated_gpus : public gpu_sampler {
 public:
  // Reads DIR/cards.json; an error names the file and what is wrong in it.
  static expected<std::shared_ptr<simulated_gpus>> open(const std::string& dir);

  // The cards, in file order, indices 0.., marked logical and simulated.
  const std::vector<gpu_instance>& cards() const { return cards_; }
  const std::string& dir() const { return dir_; }

  // The cards with the processes that live and hold memory on them now.
  expected<std::vector<gpu_card_sample>> sample() override;

  // Process `pid` holds `bytes` on each card named (by UUID); an empty map lets go of
  // every card. The file is replaced whole (never read half-written).
  static status hold(const std::string& dir, int pid, const std::map<std::string, int64_t>& bytes);

 private:
  simulated_gpus() = default;
  std::string dir_;
  std::vector<gpu_instance> cards_;
};

// The folder of the simulated view (TUNE_SIMULATED_GPUS), "" when none is set.
std::string simulated_gpus_dir();

}  // namespace tune
