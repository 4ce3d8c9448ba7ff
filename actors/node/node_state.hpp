// The node actor's state and the parts its files share (node.cpp: joining the head and
// what it is told; reservations.cpp: bundles and the machine's card claims; files.cpp:
// programs, working directories, standby copies and checkpoints read by clients;
// trials.cpp: starting trials as start_plan decides). Internal to the node.
#pragma once

#include <caf/all.hpp>

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "node.hpp"
#include "standby.hpp"
#include "start_plan.hpp"
#include "tune/cluster/reservations.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/trial/program_spawners.hpp"
#include "tune/trial/python_module.hpp"
#include "tune/trial/python_spawners.hpp"
#include "tune/trial/reuse.hpp"
#include "tune/trial/workdir.hpp"

namespace tune {
namespace node_impl {

// What a start needs on this node, once fetched: a trainable's program, or a program
// trial's working directory (none: it runs in its trial folder).
struct prepared {
  std::string program;
  std::shared_ptr<const workdir_manifest> workdir;
};

// A start on its way (start_plan has its step): whom it answers and what it fetched.
struct pending_start {
  caf::response_promise rp;
  caf::actor server, owner;
  prepared what;
};

// The most bytes of standby copies a node keeps (the oldest go first).
constexpr uint64_t staged_max_bytes = uint64_t{8} << 30;

struct node_state {
  node_options opt;
  reservation_table table{node_resources{}};
  head_iface head;
  bool joined = false, ever_joined = false, connecting = false, reported = false;
  uint64_t generation = 0;  // a new generation stops the old heartbeat chain
  std::chrono::milliseconds backoff{250};
  caf::actor_clock::time_point started;
  // The trials' starts and the trials running here (start_plan.hpp), their actors by
  // the plan's handles, and the starts on their way.
  std::unique_ptr<start_plan> plan;
  std::map<trial_handle, trial_iface> trial_actors;
  trial_handle next_trial = 0;
  std::map<start_id, pending_start> pending;
  bool carrying = false;  // carrying the plan's commands out (new ones join the loop)
  audit_iface audit;                         // the GPU audit, when there is one
  std::optional<std::vector<wire::wire_card_report>> audit_report;  // its latest report, for the head
  // Each running trial's host usage from its cgroup, for the head's status.
  std::map<std::string, host_usage> host_use;
  bool report_due = false;  // a report to the head is scheduled
  std::optional<wire::wire_node_report> last_report;  // the last one sent
  uint64_t fetches = 0;                       // names files being fetched
  // Files being fetched (programs, working-directory files), by their path in the cache
  // and the server they come from: the starts waiting for each (trials started at once
  // share one fetch, not one each; another client's trials of the same file fetch from
  // their own, should this one's die mid-fetch).
  std::map<std::pair<std::string, caf::actor_addr>, std::vector<std::function<void(const status&)>>> file_fetches;
  // Working-directory manifests read, by SHA-256 (a few: each start of a trial needs one).
  std::map<std::string, std::shared_ptr<const workdir_manifest>> manifests;
  std::set<std::string> complete_workdirs;  // manifests whose every file is in the cache
  // Standby checkpoint copies (standby.hpp), files in <work dir>/staged/ by SHA-256.
  // Cleared when the node starts.
  standby_copies staged{staged_max_bytes};
  std::string python_path;  // the trials' Python module (empty: not installed)
  std::shared_ptr<python_spawners> pythons;  // warm interpreters for Python trials (none: off)
  std::shared_ptr<program_spawners> programs;  // warm libtune programs for C++ trials (none: off)
  std::shared_ptr<reuse::idle_pool> idle;  // C++ trials' workers kept for the next trial (tune/trial/reuse.hpp)
  // Other programs on the cards (docs/gpu-sharing.md): the machine's card claims (none:
  // this node has no card another program could use), and the GPU audit's latest list
  // of processes on the cards that are none of its trials.
  std::unique_ptr<card_claims> claims;
  bool release_due = false;  // released bundles not written to the claims yet
  std::vector<foreign_process> foreign;
  static inline const char* name = "tune.node";
};

using node_actor = node_iface::stateful_pointer<node_state>;

// node.cpp
bool from_head(node_actor self);  // placement-group and start messages come from the head's process only
void send_heartbeat(node_actor self);
void send_report(node_actor self, bool now = false);  // now: at once, else within a second
node_membership_iface::behavior_type membership(node_actor self);

// reservations.cpp
void open_claims(node_actor self);
void look_at_claims(node_actor self, const std::vector<std::string>* fresh = nullptr);
node_reservations_iface::behavior_type reservations(node_actor self);

// files.cpp
void fetch_file(node_actor self, caf::actor server, std::string sha, uint64_t size, std::string dest,
                std::function<void(const status&)> done, int opened = -1, std::optional<unix_account> as = {});
void ensure_file(node_actor self, const std::string& dir, const std::string& sha, uint64_t size, const caf::actor& server,
                 bool executable, const std::string& what, std::function<void(const status&)> done, bool logged = false,
                 const std::function<void()>& fetching = {});
void prepare_workdir(node_actor self, const wire::wire_trial_spec& spec, const caf::actor& server,
                     std::function<void(expected<std::shared_ptr<const workdir_manifest>>)> done);
bool from_standby(node_actor self, const std::string& sha, uint64_t size, int fd);
node_files_iface::behavior_type file_handlers(node_actor self);

// trials.cpp
void carry_out(node_actor self);  // the start plan's commands, in order
void trial_ended(node_actor self, const caf::actor_addr& source, bool& was_trial);
void hold_trials(node_actor self);  // the head is gone: what they report waits
std::string trial_owner(node_actor self, const std::string& trial);
node_trials_iface::behavior_type trial_handlers(node_actor self);

}  // namespace node_impl
}  // namespace tune
