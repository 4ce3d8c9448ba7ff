// One place that assembles a node from its host, and a head with its dashboard, for
// `tune start` (nodes/) and for the embedded cluster of the C++ API (libtune/api/): the
// same checks, the same order, the same defaults (issue 19: the two had drifted).
//
// A node's resources are checked first (node_resources_for). Its host parts come
// next, before the actor system's threads exist: the trials' spawner is a fork of this
// process (tune/trial/process.hpp says why it must be made while the process is small),
// and the containment (tune/trial/cgroup.hpp) moves this process and that spawner when
// it takes a delegated cgroup. Then the node's options are filled from them, and NVML is
// loaded for the GPU audit of real cards. Last, start_node_service starts MPS when asked,
// spawns the node and waits for its first join (node_join_timeout).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dashboard/dashboard.hpp"
#include "head/head.hpp"
#include "node/node.hpp"
#include "tune/core/status.hpp"
#include "tune/host/detect.hpp"
#include "tune/trial/cgroup.hpp"
#include "tune/trial/mps.hpp"
#include "tune/trial/process.hpp"

namespace tune {

struct node_host_options {
  std::string node_id;
  std::string containment = "auto";  // auto, cgroup, subreaper
  std::vector<std::string> require_limits;  // memory, cpu, pids
  std::string trial_user = {};  // who its trials run as (tune/trial/account.hpp; empty: nobody, as root)
  // An embedded cluster's node: its trials run as this process's own account unless
  // trial_user names another (own_trial_account).
  bool embedded = false;
};

struct node_host {
  std::shared_ptr<spawner> workers;  // none: trials fork from this process (logged)
  std::shared_ptr<containment> contain;
  unix_account trial_account;  // who its trials run as, unless a user's settings map another
};

// Whether the node's trials can reach its folder (their own folders are in it), or an
// error that names the folder they cannot enter and what to do.
status check_trial_folder(const node_options& opt);

// The spawner, then the containment. An error (a bad mode, a limit that cannot be
// enforced, cgroups asked for and not there) names the problem and what to do.
expected<node_host> open_node_host(const node_host_options& opt);

// The bounds of a GPU audit interval, in ms: 0 (off) or min_audit_ms to max_audit_ms.
constexpr int min_audit_ms = 10, max_audit_ms = 600'000;
status check_gpu_audit_ms(int ms, const std::string& option);
// The bounds of a trial's process limit: 0 (none) or at least min_trial_pids.
constexpr int64_t min_trial_pids = 8;
status check_trial_max_pids(int64_t n, const std::string& option);

// What a node counts as another program holding a card (docs/gpu-sharing.md): the
// threshold above which a card is not given whole, and the margin kept beside what other
// programs hold, as sizes ("256MiB", "1GiB"; "": the default). Errors name the option.
expected<others_policy> parse_others_policy(const std::string& threshold, const std::string& margin,
                                            const std::string& threshold_option, const std::string& margin_option);

// What a node offers, as its starter asks for it; each field unset: the host's own.
struct node_resource_request {
  std::optional<double> num_cpus = {};        // more than 0; default: the CPUs this process may use
  std::optional<int> num_gpus = {};           // the first N cards; without cards, N logical GPUs
  std::optional<std::string> gpus = {};       // these cards only, by index: "0,2" (not with num_gpus)
  std::optional<std::string> resources = {};  // custom resources as JSON: '{"tpu": 2}'
};
// How the starter's options are spelled in its errors: the CLI's flags (the default),
// or the C++ API's cluster_options fields (api_option_names).
struct node_option_names {
  std::string num_cpus = "--num-cpus", num_gpus = "--num-gpus", gpus = "--gpus", resources = "--resources",
              mps = "--mps";
};
node_option_names api_option_names();

// The one check of a node's resources, for `tune start --address` and the embedded
// cluster alike: CPUs more than 0, custom resources that are only custom, GPUs by count
// or by index (not both), each index a card of `host`. Errors name the option.
expected<node_resources> node_resources_for(const node_resource_request& req, const host_info& host,
                                            const std::string& node_id, const node_option_names& names = {});

// What every node takes from its host: the trials' environment (inherited_trial_env),
// the spawner, the containment and its process limit, and NVML with the audit interval
// when the node has real cards and the audit is on (a library that does not load is
// logged: the node runs without the audit).
void fill_node_options(node_options& opt, const node_host& host, int gpu_audit_ms, int64_t trial_max_pids);

// How long a starting node waits for its head to accept it: `tune start --address` and
// the embedded cluster alike. Longer than the node's own verdict on a head it cannot
// reach (node_options::first_join_deadline, 10 s, plus a connect and a join request in
// flight, up to 10 s and 5 s), so that its reason, not this wait, is what the user reads.
constexpr std::chrono::seconds node_join_timeout{25};

struct node_start_options {
  // CUDA MPS for the node's real cards (tune/trial/mps.hpp): its daemon starts before
  // the node, and its clients' environment goes into every trial's.
  bool mps = false;
  std::chrono::milliseconds join_timeout = node_join_timeout;
  node_option_names names = {};  // "--mps" or "mps" in errors
};

// A node's start: the node, joined, or the step where it stopped and why. A node that
// did not join has been told to exit.
struct node_start {
  enum class step {
    joined,
    mps_cards,   // MPS asked for a node without real cards (a bad option)
    mps_daemon,  // the MPS daemon did not start
    refused,     // the node gave up: the head refused it, or it could not reach the head
    no_answer,   // nothing within join_timeout
  };
  step at = step::joined;
  status why;                       // every step but joined
  std::unique_ptr<mps_daemon> mps;  // joined, with MPS on: keep it while the node runs
  caf::actor node;                  // joined
  explicit operator bool() const { return at == step::joined; }
};

// MPS when asked, then the node, spawned with `opt` (its on_first_join is this
// function's), and the wait for its first join.
node_start start_node_service(caf::actor_system& sys, node_options opt, const node_start_options& how = {});

// A head and, when `dashboard` is given, its dashboard: the dashboard's port is bound
// first (its address goes into the head's status, `shown_host` for a wildcard address),
// then the head is spawned and the dashboard serves it. Listening for nodes (the gate,
// CAF's port) is the caller's: an embedded head has no port.
struct head_service {
  caf::actor head;
  std::unique_ptr<dashboard_server> dashboard;  // none without one
  std::string dashboard_url;                    // "http://HOST:PORT/" ("" without one)
};
expected<head_service> start_head_service(caf::actor_system& sys, head_options opt,
                                          const std::optional<dashboard_options>& dashboard, const std::string& shown_host);

}  // namespace tune
