// The node actor: one per machine. Joins the head with its advertisement, heartbeats
// what it has free and what it holds, and when the head goes away (restart, network)
// reconnects and joins again on its own, with the same node id.
//
// It keeps the node's reservations for placement groups (reservation_table): prepare,
// commit and abort from the head's placement-group actor (and from nobody else: a
// message from any other process is refused); a prepare not committed within
// `prepare_ttl` is released, so a head that dies mid-protocol leaks nothing.
//
// It starts trials in bundles it holds (trial.hpp), fetching the trial's program from
// the client's program server the first time (content-addressed, checked by SHA-256,
// cached in work_dir/programs).
//
//          retry                 join accepted
//   start -------> connecting ------------------> joined --+ beat every 500 ms
//                    ^  |  connect/join failed        |    |
//                    |  +-- retry after a backoff     |    |
//                    +--------------------------------+    |
//                       head down / rejoin asked           |
//   join refused (wrong token, other version) -> fatal     |
//   never joined within first_join_deadline -> fatal <-----+ (only before the first join)
#pragma once

#include <caf/all.hpp>

#include "tune/host/gpu_sampler.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "tune/core/node_resources.hpp"
#include "tune/trial/account.hpp"
#include "tune/trial/cgroup.hpp"
#include "tune/trial/others.hpp"
#include "tune/trial/process.hpp"
#include "wire.hpp"

namespace tune {

struct node_options {
  std::string head_host;
  uint16_t head_port = 0;
  std::string token;
  std::string node_id, hostname, address;
  node_resources resources;
  std::chrono::milliseconds first_join_deadline{10000};
  std::chrono::milliseconds prepare_ttl{10000};
  // Where programs shipped to this node are cached (programs/<sha256>) and trials keep
  // their folders (trials/<id>). Empty: no trials on this node.
  std::string work_dir;
  // The environment every trial's worker starts from (PATH, HOME, LD_LIBRARY_PATH).
  std::map<std::string, std::string> trial_env;
  // Starts the trials' workers (tune/trial/process.hpp: a small fork of this process,
  // made early); none: each is forked from this process.
  std::shared_ptr<tune::spawner> workers;
  // What the GPU audit reads the cards with (actors/node/audit.hpp): NVML for real cards, the
  // simulated view for simulated ones; none: no audit.
  std::shared_ptr<tune::gpu_sampler> gpu_library;
  std::chrono::milliseconds audit_interval{200};
  // Other programs on the cards (docs/gpu-sharing.md): when a card is not given whole,
  // and the margin kept beside what they hold; where the machine's card claims are
  // ("" : shared_dir()/gpus).
  others_policy others;
  std::string claims_dir;
  // How trials are contained (tune/trial/cgroup.hpp): each in a cgroup of its own, or
  // with a subreaper keeper; none: not contained (tests of the actors alone).
  std::shared_ptr<tune::containment> contain;
  int64_t trial_max_pids = 0;  // each trial's pids.max (0: none)
  // Who its trials run as (tune/trial/account.hpp), unless the head names the submitting
  // user's own account in the start; the default: the node's own account.
  unix_account trial_account = own_account();
  // A head in this process (an embedded cluster, benchmarks): joined without a
  // connection. head_host and head_port are then only for messages.
  caf::actor head_actor;
  // Called once: when the node first joins (ok), or when it gives up (the reason).
  std::function<void(const status&)> on_first_join;
  // Called when the head refuses the node after it had joined (e.g. a new token).
  std::function<void(const status&)> on_fatal;
};

caf::actor spawn_node(caf::actor_system& sys, node_options opt);

// What trials start from, taken from this process's environment: enough to find
// programs, libraries and the data (PATH, HOME, LD_LIBRARY_PATH, TMPDIR, LANG,
// TUNE_FASHION_MNIST_DIR), the built-in training's kernel switches
// (TUNE_TRAIN_POOLED_GRADS, TUNE_TRAIN_DIRECT_CONV: a node started with one runs its
// trials' CNNs that way) and a simulated view of the cards (TUNE_SIMULATED_GPUS: its trials
// play GPU programs on it); nothing else (CUDA_VISIBLE_DEVICES above all) reaches them.
// When this process runs on libtune.so from a folder the loader does not search by
// itself (an install in a prefix such as /opt/libtune), that folder is added at the end
// of LD_LIBRARY_PATH: a trial's program runs from the node's copy (programs/<sha256>),
// where a run path relative to the program ($ORIGIN/../lib) no longer leads to it.
std::map<std::string, std::string> inherited_trial_env();

// LD_LIBRARY_PATH `current` (null: unset) with the folder of `library` (the file this
// process loaded libtune from) at its end; unchanged when `library` is not a libtune.so
// (libtune linked into the program), its folder is already there, or the loader
// searches it anyway (/lib, /usr/lib, /usr/local/lib and their 64 and multiarch folders).
std::optional<std::string> trial_library_path(const char* current, const std::string& library);

// Where a gang's workers meet (MASTER_ADDR, MASTER_PORT), for its rank 0 on this node:
// the node's cluster address (the one it reached its head from: the others' nodes reach
// it too; 127.0.0.1 when it has none) and a TCP port free there now, the kernel's
// choice (a port in use is never given). Not a port: the error says why.
expected<std::pair<std::string, uint32_t>> rendezvous_point(const std::string& address);

}  // namespace tune
