// The structs that travel between libtune's actors, each with its `inspect` (CAF's
// serialization), and their conversions: part of the protocol of wire.hpp, which
// includes this file (include wire.hpp).
#pragma once

#include <caf/all.hpp>

#include <bit>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/cluster/reservations.hpp"
#include "tune/cluster/users.hpp"
#include "tune/core/node_resources.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/core/status.hpp"
#include "tune/trial/audit.hpp"
#include "tune/trial/cgroup.hpp"

namespace tune::wire {

struct wire_gpu {
  int32_t index = 0;
  std::string uuid, pci_bus_id, name;
  int64_t memory_total = 0;
  bool logical = false, simulated = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_gpu& x) {
  return f(caf::meta::type_name("wire_gpu"), x.index, x.uuid, x.pci_bus_id, x.name, x.memory_total,
           x.logical, x.simulated);
}

// Amounts of host resources: cpu (quantity units), memory (bytes), custom (units).
struct wire_host {
  int64_t cpu_units = 0, memory = 0;
  std::vector<std::string> custom_names;
  std::vector<int64_t> custom_units;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_host& x) {
  return f(caf::meta::type_name("wire_host"), x.cpu_units, x.memory, x.custom_names, x.custom_units);
}

// What other programs hold on one of a node's cards (card_others).
struct wire_others {
  int64_t units = 0, memory = 0;
  bool holds_card = false;
  std::string who;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_others& x) {
  return f(caf::meta::type_name("wire_others"), x.units, x.memory, x.holds_card, x.who);
}

// What a node has free: its heartbeat. `others`: what other programs hold on each card
// (empty: nothing on any).
struct wire_avail {
  wire_host host;
  std::vector<int64_t> card_free, card_memory_free;
  std::vector<wire_others> others;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_avail& x) {
  return f(caf::meta::type_name("wire_avail"), x.host, x.card_free, x.card_memory_free, x.others);
}

// A request for resources (a bundle): host amounts, GPU share and GPU memory.
struct wire_request {
  wire_host host;
  int64_t gpu_units = 0, gpu_memory = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_request& x) {
  return f(caf::meta::type_name("wire_request"), x.host, x.gpu_units, x.gpu_memory);
}

// One card's part of an allocation; the card is an index into the node's GPUs.
struct wire_grant {
  uint32_t card = 0;
  int64_t share_units = 0, memory = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_grant& x) {
  return f(caf::meta::type_name("wire_grant"), x.card, x.share_units, x.memory);
}

struct wire_alloc {
  wire_host host;
  std::vector<wire_grant> gpus;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_alloc& x) {
  return f(caf::meta::type_name("wire_alloc"), x.host, x.gpus);
}

// A bundle a node holds for a placement group.
struct wire_hold {
  std::string key;  // the node key's group part: "<group>/<attempt>"
  uint32_t bundle = 0;
  bool committed = false;
  wire_request request;
  wire_alloc alloc;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_hold& x) {
  return f(caf::meta::type_name("wire_hold"), x.key, x.bundle, x.committed, x.request, x.alloc);
}

// What a client asks for. An empty id: the head names the group. A detached group
// outlives the client that created it; any other is removed when its owner's actor
// or connection goes away.
struct wire_group_spec {
  std::string id{}, strategy{};
  std::vector<wire_request> bundles{};
  bool detached = false;
  // A group made again after a head restart (same id): its bundles may still be held by
  // nodes that have not joined the new head yet; it waits up to this long for them (to
  // adopt them as they are) before it is placed anew. 0: placed at once.
  int64_t claim_wait_ms = 0;
  // More than 0: the create is answered when the group is created (its bundles held),
  // when it cannot be (infeasible), or after this long (still pending), whichever comes
  // first; the answer's state says which. A tuning controller then needs no separate
  // wait for most groups (one round trip to the head fewer per trial). 0: at once.
  int64_t ready_wait_ms = 0;
  std::vector<std::string> avoid{};  // node ids it must not be placed on (a trial moved off them)
  std::vector<std::string> prefer{};  // node ids it goes to when it fits there (its checkpoint is staged there)
  // The experiment it is for (a tuning run's key): its user's share of the cluster is
  // split fairly between their experiments. Empty: none in particular.
  std::string experiment{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_group_spec& x) {
  return f(caf::meta::type_name("wire_group_spec"), x.id, x.strategy, x.bundles, x.detached, x.claim_wait_ms,
           x.ready_wait_ms, x.avoid, x.prefer, x.experiment);
}

// A trial to start: in bundle `bundle` of placement group `group`, running the program
// with this content hash (fetched from the client's program server when the node does
// not have it yet) with `args`, the configuration `config_json`.
// One worker of a trial of several processes (a gang: docs/workers.md), and where they
// meet (PyTorch's rendezvous). world_size 0: a trial of one process. The client names
// rank and world_size; the head fills in the rest of the ranks from where the group's
// bundles are (local_rank and local_world_size among the workers on the same node,
// node_rank the node's place in bundle order, nodes how many); rank 0's node gives its
// own cluster address and a free port of its own (master_port 0 asked), which the other
// ranks are then started with.
struct wire_gang {
  uint32_t world_size = 0, rank = 0, local_rank = 0, local_world_size = 0, node_rank = 0, nodes = 0;
  std::string master_addr{};
  uint32_t master_port = 0;
  bool operator==(const wire_gang&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_gang& x) {
  return f(caf::meta::type_name("wire_gang"), x.world_size, x.rank, x.local_rank, x.local_world_size, x.node_rank,
           x.nodes, x.master_addr, x.master_port);
}

struct wire_trial_spec {
  std::string trial_id{}, group{};
  uint32_t bundle = 0;
  std::string program_name{}, program_sha256{};
  uint64_t program_size = 0;
  std::vector<std::string> args{};
  std::string config_json{};
  std::string restore_dir{};  // a checkpoint folder on the node to start from; empty: none
  // Else (restore_dir not on this node, or empty) a copy the client serves, fetched by
  // SHA-256 from its program server: {"iteration", "files": [{"name", "size", "sha256"}]}.
  std::string restore_files{};
  // A program trial (docs/programs.md), instead of program_* and args: the command line
  // (argv, configuration already in it; its program found on the node), run in a copy
  // of the working directory whose manifest (tune/trial/workdir.hpp) the client serves by
  // SHA-256 (none: in the trial's folder); `env`: NAME=VALUE added to the node's
  // environment; `output_patterns`: metrics read from its standard output (one-group
  // patterns read `metric`).
  std::vector<std::string> command{};
  std::string workdir_sha256{};
  uint64_t workdir_size = 0;
  std::string workdir_path{};  // else: run in this folder itself (the node must be on the client's machine)
  std::vector<std::string> env{};
  std::vector<std::string> output_patterns{};
  std::string metric{};
  // The Unix account it runs as, from its user's settings (docs/users.md): set by the
  // head, whatever the client sent; empty: the node's --trial-user.
  std::string account{};
  // A C++ trainable's worker may run the experiment's next trial on the same cards when
  // this one ends well (tune/trial/reuse.hpp), and this trial may run in such a worker.
  bool reuse_worker = false;
  // Its standard output and error go to the owner line by line (trial_output_atom).
  bool forward_output = false;
  wire_gang gang{};  // a worker of a gang: its rank and rendezvous
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_trial_spec& x) {
  return f(caf::meta::type_name("wire_trial_spec"), x.trial_id, x.group, x.bundle, x.program_name, x.program_sha256,
           x.program_size, x.args, x.config_json, x.restore_dir, x.restore_files, x.command, x.workdir_sha256,
           x.workdir_size, x.workdir_path, x.env, x.output_patterns, x.metric, x.account, x.reuse_worker, x.forward_output, x.gang);
}

// Results of one trial that name the same metrics, as columns: row r's metric k is
// value(r * names.size() + k). Values travel as their bits (CAF's own encoding of a
// double drops the sign of -0.0); gpu_memory: the trial's GPU memory (bytes) then,
// gpu_memory_peak the most the audit saw so far, gpu_util its processes' mean SM
// utilisation so far (percent; -1: not known).
struct wire_results {
  std::vector<std::string> names;
  std::vector<int64_t> iterations;
  std::vector<uint64_t> bits;
  int64_t gpu_memory = 0, gpu_memory_peak = 0;
  int32_t gpu_util = -1;
  size_t rows() const { return iterations.size(); }
  double value(size_t i) const { return std::bit_cast<double>(bits[i]); }
  void add(double v) { bits.push_back(std::bit_cast<uint64_t>(v)); }
  bool well_formed() const { return !names.empty() && bits.size() == rows() * names.size(); }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_results& x) {
  return f(caf::meta::type_name("wire_results"), x.names, x.iterations, x.bits, x.gpu_memory, x.gpu_memory_peak,
           x.gpu_util);
}

// One result with a metric that is not a number: its metrics as the JSON object the
// worker reported (text, stored as it is).
struct wire_result {
  int64_t iteration = 0;
  std::string metrics_json;
  int64_t gpu_memory = 0, gpu_memory_peak = 0;  // as in wire_results
  int32_t gpu_util = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_result& x) {
  return f(caf::meta::type_name("wire_result"), x.iteration, x.metrics_json, x.gpu_memory, x.gpu_memory_peak,
           x.gpu_util);
}

// The GPU audit's final look after a trial's processes ended: whether its GPU memory
// is back (`freed`), what of it was killed then, what was still on a card when it
// stopped looking (at most 3 s), and why it could not look (`error`).
struct wire_gpu_after {
  bool looked = false;  // false: no final look (no audit, or its worker was kept)
  bool freed = false;
  std::vector<std::string> killed, still;
  int64_t waited_ms = 0;
  std::string error;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_gpu_after& x) {
  return f(caf::meta::type_name("wire_gpu_after"), x.looked, x.freed, x.killed, x.still, x.waited_ms, x.error);
}

// A trial's end (actors/trial/trial.hpp): how its process ended, what it did, and what its
// cgroup and the GPU audit measured. -1: not measured.
struct wire_trial_end {
  bool ok = false;        // exit 0, or ended cleanly on a stop
  bool stopped = false;   // asked to stop (or pause)
  bool killed = false;    // killed on request
  bool gpu_audited = false;
  std::string exit;       // "exit 0", "signal 9 (Killed)", ...
  std::string error;      // why it failed (empty when ok)
  std::string stderr_tail;
  int64_t results = 0;
  // Its latest checkpoint (iteration -1: none): where in its trial folder, how big.
  int64_t checkpoint = -1, checkpoint_bytes = 0, checkpoint_files = 0;
  std::string checkpoint_path;
  int64_t gpu_memory_peak = 0;
  int64_t gpu_memory_quota = 0;  // its largest quota on one card (0: no GPU or no quota)
  int32_t gpu_util = -1;         // its processes' mean SM utilisation, percent (-1: not known)
  bool over_quota = false;       // the GPU audit killed it over its memory quota
  int64_t ignored_lines = 0;    // on its report channel, not reports (or too long)
  std::string ignored_example;  // the first of them, shortened
  // Its cgroup (tune/trial/cgroup.hpp): "cgroup" or "subreaper" (empty: none).
  std::string containment, containment_error;
  int64_t host_memory = -1, host_memory_peak = -1, pids = -1, oom_kills = 0, pids_refused = 0;
  double cpu_seconds = -1;
  // Processes it started that had left its process group and still ran at its end
  // (killed then): how many, and which ("pid (name)") where known.
  int64_t left_behind_count = 0;
  std::vector<std::string> left_behind;
  wire_gpu_after gpu_after_end;  // the audit's final look
  // Reused workers (tune/trial/reuse.hpp): it ran in the worker of an earlier trial (the
  // cgroup's memory peak is then the worker's since it started); its worker was kept
  // for the next trial (its process did not end; no final GPU look).
  bool worker_reused = false, worker_kept = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_trial_end& x) {
  return f(caf::meta::type_name("wire_trial_end"), x.ok, x.stopped, x.killed, x.gpu_audited, x.exit, x.error,
           x.stderr_tail, x.results, x.checkpoint, x.checkpoint_bytes, x.checkpoint_files, x.checkpoint_path, x.gpu_memory_peak, x.gpu_memory_quota, x.gpu_util, x.over_quota, x.ignored_lines, x.ignored_example,
           x.containment, x.containment_error, x.host_memory, x.host_memory_peak, x.pids, x.oom_kills,
           x.pids_refused, x.cpu_seconds, x.left_behind_count, x.left_behind, x.gpu_after_end, x.worker_reused,
           x.worker_kept);
}

// A name and a count: a card's memory quota (uuid, bytes), a group's iterations since
// its trial's latest checkpoint (group, iterations).
struct wire_count {
  std::string name;
  int64_t n = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_count& x) {
  return f(caf::meta::type_name("wire_count"), x.name, x.n);
}

// One card of a running trial: `local` is its place in the trial's own list (what the
// trial's CUDA calls it), `index` the node's; its share and memory quota.
struct wire_trial_card {
  int32_t local = 0, index = 0;
  std::string uuid, pci_bus_id;
  double share = 0;
  int64_t memory_quota = 0;
  bool logical = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_trial_card& x) {
  return f(caf::meta::type_name("wire_trial_card"), x.local, x.index, x.uuid, x.pci_bus_id, x.share,
           x.memory_quota, x.logical);
}

// A trial's worker runs: the start's answer and the trial's "started" message.
// restore_dir: the checkpoint folder it started from (empty: none).
struct wire_trial_started {
  std::string trial_id, node, trial_dir, restore_dir;
  int64_t pid = 0;
  std::vector<wire_trial_card> gpus;
  wire_gang gang{};  // a gang's worker: as it was started (rank 0's: with its rendezvous)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_trial_started& x) {
  return f(caf::meta::type_name("wire_trial_started"), x.trial_id, x.node, x.trial_dir, x.restore_dir, x.pid,
           x.gpus, x.gang);
}

// A file of a checkpoint folder on a node (ckpt_list_atom): its path in the folder, size.
struct wire_file {
  std::string name;
  uint64_t size = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_file& x) {
  return f(caf::meta::type_name("wire_file"), x.name, x.size);
}

// A checkpoint a trial reported: a folder of its trial folder, its size.
struct wire_checkpoint {
  int64_t iteration = -1, bytes = 0, files = 0;
  std::string path;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_checkpoint& x) {
  return f(caf::meta::type_name("wire_checkpoint"), x.iteration, x.bytes, x.files, x.path);
}

// Another program's process that appeared on one of a trial's cards after it started
// (not ours: left alone); `what` describes it, `user` runs it.
struct wire_beside {
  int64_t pid = 0, memory = 0;
  int32_t gpu = 0;
  std::string uuid, name, what, user;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_beside& x) {
  return f(caf::meta::type_name("wire_beside"), x.pid, x.memory, x.gpu, x.uuid, x.name, x.what, x.user);
}

// As the "started", "checkpoint" and "foreign" events the store keeps.
nlohmann::json to_json(const wire_trial_card& c);
nlohmann::json to_json(const wire_trial_started& s);
nlohmann::json to_json(const wire_gang& g);  // a worker's rank and rendezvous
nlohmann::json to_json(const wire_checkpoint& c);
nlohmann::json to_json(const wire_beside& b);

// As the "ended" event the store keeps (and cluster_client's events show): the keys
// actors/trial/trial.hpp names, the ones not measured left out.
nlohmann::json to_json(const wire_trial_end& e);
nlohmann::json to_json(const wire_result& r);

// A node's advertisement on join: who it is, what it has, what is free, what it holds.
struct wire_ad {
  std::string node_id, hostname, address, version;
  wire_host total;
  std::vector<wire_gpu> gpus;
  wire_avail free;
  std::vector<wire_hold> holdings;
  uint64_t holdings_version = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_ad& x) {
  return f(caf::meta::type_name("wire_ad"), x.node_id, x.hostname, x.address, x.version, x.total, x.gpus,
           x.free, x.holdings, x.holdings_version);
}

// What a node's GPU audit saw on one of its cards: the trials on it (with their owner,
// whom the head shows a user only their own) and other programs' processes (with the
// trials beside them).
struct wire_card_trial {
  std::string trial, owner;
  int64_t memory = 0;
  bool operator==(const wire_card_trial&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_card_trial& x) {
  return f(caf::meta::type_name("wire_card_trial"), x.trial, x.owner, x.memory);
}

struct wire_card_foreign {
  int64_t pid = 0, memory = 0;
  std::string name, user;
  std::vector<std::string> beside;
  bool operator==(const wire_card_foreign&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_card_foreign& x) {
  return f(caf::meta::type_name("wire_card_foreign"), x.pid, x.memory, x.name, x.user, x.beside);
}

struct wire_card_report {
  int32_t index = 0;
  std::string uuid;
  int64_t memory_used = 0, memory_total = 0;
  int32_t util = -1;  // percent (-1: not known)
  std::vector<wire_card_trial> trials;
  std::vector<wire_card_foreign> foreign;
  bool operator==(const wire_card_report&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_card_report& x) {
  return f(caf::meta::type_name("wire_card_report"), x.index, x.uuid, x.memory_used, x.memory_total, x.util,
           x.trials, x.foreign);
}

// A running trial's host usage from its cgroup (-1: not measured).
struct wire_trial_host {
  std::string trial, owner;
  int64_t memory = -1, memory_peak = -1, pids = -1;
  double cpu_seconds = -1;
  bool operator==(const wire_trial_host&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_trial_host& x) {
  return f(caf::meta::type_name("wire_trial_host"), x.trial, x.owner, x.memory, x.memory_peak, x.pids,
           x.cpu_seconds);
}

// What the head shows of a node beyond its resources (node -> head: gpu_audit_atom):
// its GPU audit's cards (`audited` false: no audit, or no look yet), how it contains its
// trials (`contained` false: it was not asked to) and what each trial uses of the host.
struct wire_node_report {
  bool audited = false;
  std::vector<wire_card_report> cards;
  bool contained = false;
  std::string containment_kind, containment_description;
  bool limits_memory = false, limits_cpu = false, limits_pids = false;
  std::vector<wire_trial_host> trials;
  bool operator==(const wire_node_report&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_node_report& x) {
  return f(caf::meta::type_name("wire_node_report"), x.audited, x.cards, x.contained, x.containment_kind,
           x.containment_description, x.limits_memory, x.limits_cpu, x.limits_pids, x.trials);
}

// As `tune status` shows them: the node's "gpu_audit", "containment" and "trial_host".
nlohmann::json cards_json(const std::vector<wire_card_report>& cards);
nlohmann::json containment_json(const wire_node_report& r);
nlohmann::json trial_host_json(const std::vector<wire_trial_host>& trials);

// A user's quotas (-1: none), priority, weight and Unix account: what the head's
// placement-group actor schedules by (user_atom, from the head).
struct wire_user {
  std::string name;
  int64_t gpu_units = -1, cpu_units = -1, max_trials = -1;
  int64_t priority = 0;
  double weight = 1;
  std::string account;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_user& x) {
  return f(caf::meta::type_name("wire_user"), x.name, x.gpu_units, x.cpu_units, x.max_trials, x.priority, x.weight,
           x.account);
}

wire_user to_wire(const std::string& name, const user_limits& l);
user_limits limits_from_wire(const wire_user& w);

// Conversions; from_wire checks what it reads and says what is wrong.
wire_host to_wire(const resource_set& host);
expected<resource_set> host_from_wire(const wire_host& w);
wire_avail to_wire(const node_availability& a);
expected<node_availability> from_wire(const wire_avail& w);
// The advertisement of a node with these resources.
wire_ad make_ad(const std::string& node_id, const std::string& hostname, const std::string& address,
                const node_resources& n);
expected<node_resources> resources_from_ad(const wire_ad& ad);
wire_request to_wire_request(const resource_set& r);
expected<resource_set> request_from_wire(const wire_request& w);
wire_alloc to_wire(const allocation& a);
// Checked against the node the allocation is on: its cards exist, amounts are sane.
expected<allocation> alloc_from_wire(const wire_alloc& w, const node_resources& on);
// What a node's reservation table holds, as its heartbeat lists it.
std::vector<wire_hold> holdings_of(const reservation_table& table);

}  // namespace tune::wire

namespace tune {

// Types of tune/ that travel between the actors as they are.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_usage& x) {
  return f(caf::meta::type_name("host_usage"), x.memory, x.memory_peak, x.cpu_seconds, x.pids, x.oom_kills,
           x.pids_refused);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, foreign_process& x) {
  return f(caf::meta::type_name("foreign_process"), x.uuid, x.card, x.pid, x.memory, x.name, x.uid, x.cgroup,
           x.ancestors);
}

}  // namespace tune
