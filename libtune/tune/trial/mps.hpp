// CUDA MPS for a node's trials (opt-in: `tune start --mps`). Without it, the kernels
// of processes sharing a card are time-sliced: eight small trials on one card run
// about as fast together as one alone. Under MPS they run side by side, and each
// trial's memory quota is enforced by the driver when it allocates
// (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), on top of the node's GPU audit.
//
// The node runs its own MPS control daemon (`nvidia-cuda-mps-control -f`, in the
// foreground, as a worker process that dies with the node) over exactly its cards,
// with pipe and log folders of its own, so it neither needs nor touches a machine-wide
// MPS setup, and changes no card setting.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

class mps_daemon {
 public:
  // Starts the daemon for these cards (UUIDs) with folders under `dir`; waits until it
  // listens. Errors say why (no nvidia-cuda-mps-control, it exited, with its output).
  static expected<std::unique_ptr<mps_daemon>> start(const std::string& dir, const std::vector<std::string>& cards,
                                                      std::map<std::string, std::string> env,
                                                      const std::string& program = "nvidia-cuda-mps-control");
  ~mps_daemon();  // asks it to quit (its servers with it), then ends it
  mps_daemon(const mps_daemon&) = delete;
  mps_daemon& operator=(const mps_daemon&) = delete;

  // What a client (a trial) needs in its environment to use it.
  std::map<std::string, std::string> client_env() const;
  int pid() const { return pid_; }

  // CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for a client whose devices 0..k-1 have these
  // quotas in bytes: "0=17179M,1=8192M" (MiB, rounded down).
  static std::string memory_limits(const std::vector<int64_t>& quotas);

 private:
  mps_daemon() = default;
  std::string pipe_dir_, log_dir_, program_;
  std::map<std::string, std::string> env_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> pid_{0};
};

}  // namespace tune
