// The trial actor: lives on the node, owns one trial's worker process.
//
// It starts the worker (tune/trial/process.hpp) with exactly the bundle's cards visible
// (CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES = their UUIDs) on a thread of its
// own (watcher.hpp: it blocks on the worker's pipes, its keeper's news and the actor's
// control channel, and never polls with sleeps), relays what the worker reports to the trial's owner as events, and stops
// (SIGTERM, then SIGKILL after the grace period), kills, pauses and resumes it when
// the owner asks. The worker's exit ends the actor; killing the actor kills the worker.
//
// Once the worker runs, the owner also gets (trial_node_atom, trial_id, node actor):
// where to read the trial's checkpoints (wire.hpp).
// Messages to the owner, in order (wire.hpp):
//   (trial_started_atom, trial_id, wire_trial_started): its worker runs (pid, node, its
//     cards as the trial numbers them, its folder, what it was restored from)
//   (trial_checkpoint_atom, trial_id, wire_checkpoint): a folder of its trial folder
//   (trial_done_atom, trial_id, message): it said it is done
//   (trial_joined_atom, trial_id): a gang's worker said it joined its peers
//   (trial_beside_atom, trial_id, wire_beside): another program appeared on its cards
//   (trial_results_atom, trial_id, wire_results): results whose metrics are all numbers,
//     those that came together naming the same metrics, as columns
//   (trial_result_atom, trial_id, wire_result): a result with a metric that is not a number
//   (trial_output_atom, trial_id, lines): lines of its output (its spec's forward_output)
//   (trial_ended_atom, trial_id, wire_trial_end): its end, the last message (wire.hpp: how
//     it ended, its error, its results and latest checkpoint, what its cgroup measured —
//     containment, host memory and its peak, CPU seconds, OOM kills, refused forks — what
//     it left behind, killed then, and the GPU audit's final look); wire::to_json gives
//     the "ended" event the store keeps.
// While it runs, the node gets its cgroup's usage about once a second:
//   (trial_host_atom, trial_id, host_usage).
// A program trial's standard output lines that match its output patterns are results too
// (tune/trial/output_metrics.hpp). The error of a process that failed ends with the last
// line of its standard error (a Python traceback's exception, say).
//
// Flow control: the owner acknowledges what it received (trial_ack_atom, wire.hpp); with
// more than ack_window messages unacknowledged, or too many lines not yet handled here,
// the watching thread stops reading the worker's pipes, and a worker that floods its
// reports blocks on its writes: memory stays bounded on the node and downstream.
// GPU memory (bytes, all its processes on its cards) is what the node's GPU audit
// measured; a trial the audit finds on a card it was not given or over its quota is
// killed and its error says so.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tune/core/node_resources.hpp"
#include "tune/trial/cgroup.hpp"
#include "tune/trial/account.hpp"
#include "tune/trial/process.hpp"
#include "tune/trial/program_spawners.hpp"
#include "tune/trial/python_spawners.hpp"
#include "tune/trial/reuse.hpp"
#include "tune/trial/workdir.hpp"
#include "wire.hpp"

namespace tune {

struct trial_options {
  wire::wire_trial_spec spec;
  std::string program;    // the program's path on this node
  std::string node_id;
  std::string trial_dir;  // the trial's own folder (created)
  std::string access;     // the secret its owner reads its checkpoints with (kept in <work>/access/<id>)
  // Who it runs as (tune/trial/account.hpp); its working copy is written as it, too.
  unix_account account = own_account();
  std::vector<gpu_instance> cards;  // the bundle's cards, in order
  std::vector<gpu_grant> grants;    // their shares and memory
  std::map<std::string, std::string> base_env;  // PATH, HOME, LD_LIBRARY_PATH, ...
  int cpu_threads = 0;  // the bundle's CPUs, rounded up: the worker's thread pools (0: not set)
  std::chrono::milliseconds default_grace{10000};
  trial_events_iface owner;
  node_iface node;  // the node actor (it serves the trial's checkpoints)
  audit_iface audit;  // the node's GPU audit (none without NVML or real cards)
  std::shared_ptr<tune::spawner> workers;  // starts the worker (none: a fork of this process)
  // A program trial (spec.command): before it starts, its own copy of the working
  // directory is made from this manifest (files from workdir_blobs/<sha256>) in
  // <trial_dir>/work, anew on every start, and is its working directory; its program is
  // found there or on its PATH. Without a manifest it runs in its trial folder.
  std::shared_ptr<const workdir_manifest> workdir;
  std::string workdir_blobs;
  std::string python_path;  // the node's Python module folder: first on PYTHONPATH ("" : none)
  // Warm interpreters for Python commands (tune/trial/python_spawners.hpp; none: every
  // worker is exec'd).
  std::shared_ptr<python_spawners> pythons;
  std::shared_ptr<program_spawners> programs;  // warm starts of C++ trials (tune/trial/program_spawners.hpp)
  // Reused workers (tune/trial/reuse.hpp): the node's idle ones, and the folder their
  // hand-over folders go in (none: every trial starts its own worker).
  std::shared_ptr<reuse::idle_pool> idle;
  std::string reuse_root;
  // The node's containment: the trial runs in a cgroup of its own made from it, with
  // these host limits (none: not contained, e.g. in tests of the actor alone).
  std::shared_ptr<containment> contain;
  host_limits limits;
  caf::response_promise started;  // answered when the worker runs (or could not start)
};

trial_iface spawn_trial(caf::local_actor* parent, trial_options opt);

// The environment a trial's worker gets, from the options (exposed for tests).
std::map<std::string, std::string> trial_environment(const trial_options& opt);

}  // namespace tune
