// Auto-packing (`resources_per_trial = {gpu: "auto"}`): each trial's GPU share from
// what the experiment's trials were measured to use, apart from actors (so every rule
// is tested with made-up measurements: auto_share_test.cpp). The controller feeds it
// the GPU audit's figures that come with results and ends, and asks it which share a
// trial starts with.
//
//   probing: the first `probe_trials` trials are probes, on `probe_share`, until each
//            has reported `probe_results` results with its memory measured, or ended;
//            trials that start meanwhile get the probe share too (the card is not left
//            idle while the probes are measured).
//   sized:   the share is the smallest 1/k of the smallest card that holds the largest
//            peak seen (of any trial) plus `margin` of it, and no less than `min_share`;
//            every later trial starts on it. Those on the probe share keep it until they
//            end.
//   outgrown: a trial killed by the audit over its memory quota (or failed with its
//            peak within 10% of its quota: under MPS the driver refuses the allocation
//            instead) is restarted from its checkpoint, not counted as a failure, on
//            the share that holds its new peak; later trials get that share too. A
//            trial that outgrew a whole card fails as any other.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/quantity.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/core/status.hpp"

namespace tune {

struct auto_share_options {
  double margin = 0.25;          // the share holds the measured peak plus this much of it
  double probe_share = 0.25;     // the probes' share
  int probe_trials = 1;          // trials that probe
  int probe_results = 2;         // results each probe reports before the share is decided
  double min_share = 1.0 / 16;   // no trial gets less (at most 16 trials per card)
};

// Checks the options (each named in the error with what to give).
status check(const auto_share_options& o);

// One decision, as the event the store keeps ("auto_probe", "auto_share",
// "auto_outgrown") and a line for people.
struct auto_decision {
  std::string event;
  nlohmann::json body;
  std::string line;
};

class auto_share {
 public:
  // `card_memory`: the memory of the smallest card the trials may land on (bytes).
  auto_share(auto_share_options o, int64_t card_memory);

  // The share trial `id` starts with now (its own after it outgrew one), and the
  // decision to record when it is a probe's first start.
  quantity share_for(const std::string& id, std::optional<auto_decision>* probe_event = nullptr);
  // The share it last started with (a group made again for it: the same), else share().
  quantity current(const std::string& id) const;
  bool sized() const { return sized_; }

  // The audit's figures with a result of trial `id` (peak so far, mean SM util so far;
  // -1: not known). The decision when this one made the share.
  std::optional<auto_decision> on_result(const std::string& id, int64_t peak, int util);
  // Its process ended (ok or not): a probe that ended counts as measured.
  std::optional<auto_decision> on_ended(const std::string& id, int64_t peak, int util);
  // Whether its end means it outgrew its share (see above); then the decision, and
  // share_for(id) is the bigger share from now on. Nothing: an end as any other.
  std::optional<auto_decision> on_outgrown(const std::string& id, bool over_quota, bool ok, int64_t peak,
                                           int64_t quota);

  quantity share() const { return share_; }
  int64_t peak() const { return peak_; }
  // For the dashboard and `tune status`: phase, share, trials per card, peak, margin,
  // utilisation, restarts on a bigger share.
  nlohmann::json summary() const;

 private:
  quantity share_holding(int64_t bytes) const;
  quantity pick(const std::string& id, std::optional<auto_decision>* probe_event);
  std::optional<auto_decision> decide(const std::string& why);

  auto_share_options opt_;
  int64_t card_memory_;
  quantity probe_share_, share_;
  bool sized_ = false;
  std::map<std::string, int> probes_;  // probe -> results measured (-1: ended)
  std::map<std::string, quantity> own_;  // trials restarted on a bigger share
  std::map<std::string, quantity> last_;  // the share each trial last started with
  int64_t peak_ = 0;   // the largest peak measured
  int util_ = -1;      // the latest known utilisation of a probe
  int outgrown_ = 0;
};

// How many trials with these bundles the alive nodes of a head's status JSON hold at
// once (each bundle counted on the node totals; the least over bundles).
int trials_that_fit(const nlohmann::json& status, const std::vector<resource_set>& bundles);
// The memory of the smallest GPU on an alive node of the status (0: no GPU).
int64_t smallest_card_memory(const nlohmann::json& status);

}  // namespace tune
