// Containment: a trial is its cgroup, not its process group (docs/containment.md).
//
// A node opens its containment once, at start. Where it can make cgroups (as root, or in
// a subtree delegated to it, e.g. a systemd unit with Delegate=yes) it gets a cgroup v2
// subtree of its own, and every trial a cgroup in it: the trial's keeper moves itself in
// before it starts the worker (tune/trial/process.hpp), so everything the trial ever
// starts is in it whatever it does (setsid, double fork, reparenting to init). Ending
// the trial kills the whole cgroup (cgroup.kill), waits until it is empty and removes it.
// The trial's host resources are limits there: its memory request is memory.max (the
// kernel's OOM killer ends that trial alone, and the trial's error says so), its CPUs a
// cpu.max quota, and pids.max bounds its processes (no fork bomb takes the node).
//
// Where the kernel keeps a controller on a cgroup v1 hierarchy (systemd's hybrid layout:
// v2 for membership, v1 for memory, cpu, pids), the limit is set on a v1 cgroup of the
// trial's own beside the v2 one, which the keeper joins as well.
//
// Without cgroups (no root and no delegation, no cgroup2, a kernel without cgroup.kill,
// inside some containers) the keeper is a child subreaper instead: orphans come back to
// it, and at the end it kills every descendant it has (tune/trial/keeper.cpp). Host
// limits cannot be enforced then; the node says so (caps().describe()) and refuses a
// trial that asks for one, instead of pretending.
//
// Thread-safe: trials start and end on their own threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

// What a node's containment can do.
struct containment_caps {
  bool cgroup = false;  // trials in cgroups (else: the keeper is a subreaper)
  std::string how;      // "delegated", "root", "own cgroup", or why there are no cgroups
  std::string root;     // the node's cgroup v2 subtree (a folder), when cgroup
  std::string trials_path;  // where its trials' cgroups are, as /proc/<pid>/cgroup names them
  bool memory = false, cpu = false, pids = false;  // host limits it enforces
  std::string memory_via, cpu_via, pids_via;       // "cgroup v2" or "cgroup v1", when enforced
  // One line for the node's log and `tune status`: "cgroup v2 (delegated
  // /sys/fs/cgroup/x): memory, cpu, pids enforced", "subreaper (no cgroups: ...)".
  std::string describe() const;
  std::string kind() const { return cgroup ? "cgroup" : "subreaper"; }
};

// A trial's host limits; 0: none.
struct host_limits {
  int64_t memory = 0;  // bytes
  double cpus = 0;     // CPUs (a quota of cpus x the period)
  int64_t pids = 0;    // processes and threads
};

// What a trial's cgroup has used (-1: not known here).
struct host_usage {
  int64_t memory = -1, memory_peak = -1;  // bytes (memory.current, memory.peak)
  double cpu_seconds = -1;                // CPU time of all its processes
  int64_t pids = -1;                      // processes and threads now
  int64_t oom_kills = 0;                  // processes the OOM killer ended for memory.max
  int64_t pids_refused = 0;               // forks refused at pids.max
};

// What the keeper does to contain a trial (it travels to the spawner with the process
// spec): the cgroup v2 folder it is born in (clone3 with CLONE_INTO_CGROUP: moving a
// process between cgroups waits for an RCU grace period, 10-25 ms on the machines
// measured, a birth inside costs nothing; where clone3 cannot, it moves itself), the
// cgroup.procs files of cgroup v1 it writes its pid into before it starts the worker, the
// cgroup.kill file it writes when the node dies, or subreaper.
struct containment_spec {
  std::string into;
  std::vector<std::string> join;
  std::string kill;
  bool subreaper = false;
};

// One trial's cgroup (or, without cgroups, only the subreaper's promise).
class trial_cgroup {
 public:
  ~trial_cgroup();  // end() if not done yet
  trial_cgroup(const trial_cgroup&) = delete;
  trial_cgroup& operator=(const trial_cgroup&) = delete;

  const containment_spec& spec() const { return spec_; }
  // Its cgroup as /proc/<pid>/cgroup names it ("/libtune/node.12/t3"); empty without one.
  const std::string& path() const { return path_; }
  const host_limits& limits() const { return limits_; }
  host_usage usage() const;
  // The processes in it now.
  std::vector<int> pids() const;
  // Freezes (true) or thaws everything in it (cgroup.freeze): a paused trial's
  // processes all stop, those that left its process group too. False without a cgroup.
  bool freeze(bool frozen);
  // Kills everything in it (cgroup.kill) and waits until it is empty (at most
  // `timeout`), then removes it. The processes that were still in it and had left the
  // keeper's process group `group` (escaped: setsid, a daemon), by "pid (name)", before
  // they were killed. An error when it could not be emptied or removed.
  expected<std::vector<std::string>> end(int group, std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  friend class containment;
  trial_cgroup() = default;
  containment_spec spec_;
  std::string path_;
  std::string v2_;                // its v2 folder ("" : none)
  std::vector<std::string> v1_;   // its v1 folders
  std::string memory_dir_, cpu_dir_, pids_dir_;  // where each controller's files are
  bool memory_v1_ = false, pids_v1_ = false;
  host_limits limits_;
  bool ended_ = false;
};

class containment {
 public:
  // Looks at the host and makes the node's subtree. `mode`: "auto" (cgroups where it
  // can, else the subreaper), "cgroup" (cgroups or an error saying why not), "subreaper"
  // (no cgroups). `name`: the node's, for its subtree's folder. `cgroup_root`: the
  // cgroup2 mount (tests), "" : found in /proc/self/mountinfo. `require`: limits that
  // must be enforced ("memory", "cpu", "pids"): an error naming what is missing and what
  // to do otherwise.
  static expected<std::shared_ptr<containment>> open(const std::string& mode, const std::string& name,
                                                     const std::vector<std::string>& require = {},
                                                     const std::string& cgroup_root = "");
  ~containment();  // kills what is left in its subtree and removes it

  const containment_caps& caps() const { return caps_; }

  // A trial's cgroup with its limits (none of them: a subreaper's handle). A limit it
  // cannot enforce is an error naming it and what to do.
  expected<std::unique_ptr<trial_cgroup>> make(const std::string& trial_id, const host_limits& limits);

  // Removes what nodes that died (SIGKILL) left under the shared subtree: their
  // trials' cgroups are killed. How many subtrees it removed.
  int sweep_dead_nodes();

 private:
  containment() = default;
  containment_caps caps_;
  std::string mount_;       // the cgroup2 mount
  std::string mount_root_;  // the mount's root as /proc/<pid>/cgroup names it ("/" mostly)
  std::string shared_;      // the parent of node subtrees made as root ("": delegated/own)
  std::string trials_;      // where trial cgroups go (v2)
  std::string memory_v1_, cpu_v1_, pids_v1_;  // the node's v1 folders, when used
  std::string moved_from_;  // delegated: the cgroup it moved out of (and back at the end)
  std::mutex mu_;
};

// The cgroup v2 path of a process, as /proc/<pid>/cgroup names it ("" : none or gone).
std::string cgroup_of(int pid);

// /proc/<pid>/stat's parent, process group and command name (false: gone). The name may
// hold spaces and ')'.
bool read_proc_stat(int pid, int& ppid, int& pgid, std::string* name);

}  // namespace tune
