// The node's GPU audit actor: every `interval` it asks NVML what runs on the cards,
// and with the rules of tune/trial/audit.hpp
//   - kills a trial found on a card it was not given or over its memory quota (the
//     trial actor is told why, and that becomes the trial's error);
//   - tells each trial actor its GPU memory now and at its peak, and its processes'
//     mean SM utilisation so far (percent, -1: not known), when they change:
//     (audit_usage_atom, now, peak, util); a broken rule as (audit_violation_atom,
//     why, over_quota);
//   - sends the node a report (cards, trials' memory, foreign processes) about once a
//     second when something changed: (audit_report_atom, std::vector<wire_card_report>);
//     the node passes it to the head for `tune status`;
//   - sends the node the processes on its cards that are none of its trials (foreign:
//     another cluster's trial, a notebook, someone's job) as soon as they change:
//     (audit_foreign_atom, std::vector<foreign_process>): placement keeps clear of them;
//   - tells a trial actor of a foreign process that appears on one of its cards after it
//     started: (audit_foreign_atom, wire_beside). Such a process is never killed: it is
//     not ours.
// It runs on a thread of its own (NVML calls block) and ends with the node.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "tune/host/gpu_sampler.hpp"
#include "tune/trial/audit.hpp"
#include "wire.hpp"

namespace tune {


struct audit_options {
  std::shared_ptr<gpu_sampler> lib;
  std::set<std::string> cards;  // UUIDs of this node's cards
  std::chrono::milliseconds interval{200};
  node_iface node;  // gets its reports
};

// Messages it takes:
//   (audit_add_atom, trial_id, worker_pid, group, cgroup, quotas [wire_count {uuid, bytes}], trial_actor)
// A trial is audited until its actor ends (monitored).
//   (audit_end_atom, trial_id) -> wire_gpu_after: after the trial's processes ended, whether its
//   GPU memory is back: any of its processes still on a card (the ones last seen, and
//   any that is in its cgroup or below its keeper) is killed, and the cards are looked
//   at again until none is left (at most 3 s); killed and still as "pid P (name) on
//   GPU I, N MiB".
//   (audit_forget_atom, trial_id): its worker was kept for the next trial (reused
//   workers): it is no longer audited, and nothing of it is killed.
audit_iface spawn_gpu_audit(caf::local_actor* parent, audit_options opt);

}  // namespace tune
