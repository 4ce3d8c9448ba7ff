// What a trial sees from inside its worker process, and how it talks back.
//
// The node starts the worker with (see docs/trials.md):
//   CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES=<the bundle's GPU UUIDs, in order>
//   TUNE_TRIAL_ID, TUNE_NODE_ID, TUNE_TRIAL_DIR (its own folder: checkpoints, files)
//   TUNE_TRIAL_CONFIG  the configuration, a JSON object
//   TUNE_TRIAL_GPUS    a JSON list, one entry per card in CUDA's numbering:
//                      {"uuid", "pci_bus_id", "index" (on the machine), "share", "memory_quota", "logical"}
//   TUNE_REPORT_FD=3   where reports go, one JSON object a line
// Inside, the cards are numbered 0..k-1: gpus()[i].local is what CUDA and any
// device_ids list must use, and no other card exists for the process.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

struct trial_gpu {
  int local = 0;           // CUDA's device number inside the trial (0..k-1)
  int index = 0;           // the card's index on its machine (PCI order), for people
  std::string uuid;        // "GPU-8f3c..." (or "LOGICAL-..." for a declared GPU)
  std::string pci_bus_id;  // "00000000:06:00.0"
  double share = 1;        // the part of the card this trial holds
  int64_t memory_quota = 0;  // bytes of the card this trial may use
  bool logical = false;
};

class trial_context {
 public:
  // Reads the environment the node set. Outside a worker it is an error that says so.
  static expected<trial_context> from_environment();
  // The same from explicit values (tests, and programs that run a trainable by hand).
  static expected<trial_context> make(std::string trial_id, const std::string& config_json,
                                      const std::string& gpus_json, int report_fd = -1);

  const std::string& trial_id() const { return trial_id_; }
  const std::string& node_id() const { return node_id_; }
  const std::string& trial_dir() const { return trial_dir_; }

  // The configuration. A missing key or one of another type is an error naming it.
  const std::string& config_json() const { return config_json_; }
  expected<double> number(const std::string& key) const;
  expected<int64_t> integer(const std::string& key) const;
  expected<std::string> text(const std::string& key) const;
  // With a default when the key is absent; a value of the wrong type is still an
  // error naming the key (never silently replaced by the default).
  expected<double> number_or(const std::string& key, double fallback) const;
  expected<int64_t> integer_or(const std::string& key, int64_t fallback) const;
  expected<std::string> text_or(const std::string& key, const std::string& fallback) const;
  // true, false, 1 or 0.
  expected<bool> flag_or(const std::string& key, bool fallback) const;

  // The cards this trial holds, in CUDA's numbering inside the trial.
  const std::vector<trial_gpu>& gpus() const { return gpus_; }
  // {0, 1, ..., k-1}: the only valid device_ids.
  std::vector<int> device_ids() const;

  // Reports metrics (one result); numbers only. Sends them to the node at once.
  status report(const std::map<std::string, double>& metrics);
  // With the iteration it is (a trial resumed from a checkpoint goes on counting from
  // there); the next plain report() counts on from it.
  status report(const std::map<std::string, double>& metrics, int64_t iteration);
  // Says the trial is done with its work, with an optional final message.
  status done(const std::string& message = {});

  // Checkpoints: the folder for the checkpoint of `iteration` (created,
  // <trial dir>/checkpoints/<iteration>); write its files there, then report it.
  // The node tells the trial's owner where it is, its size and its file count.
  expected<std::string> checkpoint_dir(int64_t iteration) const;
  status report_checkpoint(int64_t iteration);
  // The checkpoint folder this trial starts from (resumed after a pause, or given
  // another trial's state by PBT); empty when it starts afresh.
  const std::string& restore_dir() const { return restore_dir_; }

  // True once the node asked the trial to stop (SIGTERM): finish the step, return.
  static bool should_stop();
  // Installs the SIGTERM handler behind should_stop() (from_environment does it).
  static void watch_stop_signal();
  // A reused worker's next trial starts without the last one's stop request.
  static void forget_stop();
  // Writes one line on the report channel as it is (the worker's protocol lines).
  bool say(const std::string& line) { return static_cast<bool>(write_line(line)); }

 private:
  status write_line(const std::string& line);

  std::string trial_id_, node_id_, trial_dir_, config_json_, restore_dir_;
  std::vector<trial_gpu> gpus_;
  int report_fd_ = -1;
  int64_t iteration_ = 0;
};

}  // namespace tune
