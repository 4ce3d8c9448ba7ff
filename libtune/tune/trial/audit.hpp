// The GPU audit's rules, apart from NVML and actors (so they are tested with made-up
// samples): given what runs on each card now and which trial each process belongs
// to, it finds trials on cards they were not given and trials over their memory
// quota, adds up each trial's memory (now and its peak), and lists the processes on
// the node's cards that belong to no trial ("foreign": someone else's job).
//
// A process belongs to a trial when it is in the trial's cgroup (however it was started:
// setsid, a double fork, reparented to init), or, without cgroups, when the trial's
// worker or keeper is among its ancestors (a subreaper keeper gets the orphans) or it is
// in the trial's process group.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tune/core/quantity.hpp"
#include "tune/host/nvml.hpp"

namespace tune {

// What /proc says about a process: its group, its ancestors (parent first), its cgroup.
struct process_lineage {
  int pgid = 0;
  std::vector<int> ancestors{};
  std::string name{};    // its command name (comm)
  std::string cgroup{};  // its cgroup v2 path ("" : none)
  int64_t uid = -1;      // who runs it (-1: not known)
};

// From /proc; nothing when the process is gone (or in another PID namespace).
std::optional<process_lineage> read_lineage(int pid);

struct audited_trial {
  std::string id{};
  int pid = 0;    // the worker
  int group = 0;  // its process group (the keeper's pid)
  std::map<std::string, int64_t> quota{};  // the cards it was given (UUID) and each card's quota in bytes
  std::string cgroup{};  // its cgroup v2 path, as /proc/<pid>/cgroup names it ("" : none)
};

struct audit_violation {
  std::string trial;
  std::string message;  // goes into the trial's record as its error
  bool over_quota = false;  // over its memory quota (else: on a card it was not given)
};

struct foreign_process {
  std::string uuid{};
  int card = 0;  // NVML's index
  int pid = 0;
  int64_t memory = -1;
  std::string name{};  // empty when not visible here
  // What /proc says of it (nothing when not visible here): who runs it, its cgroup, its
  // ancestors (another libtune node's trial is known by them: tune/trial/others.hpp).
  int64_t uid = -1;
  std::string cgroup{};
  std::vector<int> ancestors{};
  bool operator==(const foreign_process&) const = default;
};

struct trial_gpu_use {
  std::map<std::string, int64_t> memory;  // by card UUID, now
  int64_t total = 0, peak = 0;            // now, and the most ever seen at once
  int sm_util = -1;                       // its processes' SM utilisation, percent, summed (-1: not known)
  std::vector<int> pids;                  // its processes on cards
};

struct audit_result {
  std::vector<audit_violation> violations;  // each trial at most once
  std::vector<foreign_process> foreign;
  std::map<std::string, trial_gpu_use> trials;  // every audited trial
};

class gpu_audit {
 public:
  using lineage_fn = std::function<std::optional<process_lineage>(int pid)>;

  // `cards`: the UUIDs of this node's cards (foreign processes are looked for there);
  // `self`: the node's own process: it and what it started that is no trial (its MPS
  // daemon's server) are never foreign.
  explicit gpu_audit(std::set<std::string> cards, std::set<int> self = {}, lineage_fn lineage = read_lineage);

  void add(audited_trial t);
  void remove(const std::string& id);
  size_t size() const { return trials_.size(); }

  // One look at the cards. A trial found breaking a rule is reported once; it stays
  // audited (its memory still counts) until removed.
  audit_result check(const std::vector<gpu_card_sample>& cards);

 private:
  struct entry {
    audited_trial trial;
    int64_t peak = 0;
    bool reported = false;
  };
  const entry* owner(int pid, const process_lineage* lineage) const;

  std::set<std::string> cards_;
  std::set<int> self_;
  lineage_fn lineage_;
  std::map<std::string, entry> trials_;
};

}  // namespace tune
