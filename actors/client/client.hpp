// A client of a libtune cluster: what the rest of the system (the tuner, the CLI,
// tests) uses to talk to the head. Blocking calls with timeouts; one client per
// thread (it owns a scoped actor).
//
//   auto c = cluster_client::connect(sys, "10.0.0.1", 6380, token);
//   auto made = (*c)->create_group({.strat = strategy::strict_spread, .bundles = {gpu1, gpu1}});
//   auto ready = (*c)->wait_ready(made->id, 30s);   // where each bundle sits, GPU UUIDs
//   (*c)->remove_group(made->id);
//
// Groups are owned by the client that created them: when it goes away (its actor
// ends, its process dies, its connection drops) the head removes them, unless they
// were created detached.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tune/core/placement.hpp"
#include "wire.hpp"

namespace tune {

struct group_request {
  std::string id;  // empty: the head names it
  strategy strat = strategy::pack;
  std::vector<resource_set> bundles;
  bool detached = false;
};

struct gpu_site {
  uint32_t card = 0;     // index into the node's GPUs
  int32_t index = 0;     // the card's index on its machine (PCI order)
  std::string uuid, pci_bus_id;
  double share = 0;      // 1 for a whole card
  int64_t memory = 0;    // bytes reserved on the card (the memory quota)
  bool logical = false;  // a declared GPU, not a real card
};

struct bundle_info {
  uint32_t index = 0;
  std::string request;
  std::string state;  // "held", "preparing" or "waiting"
  std::string node, hostname, host;
  std::vector<gpu_site> gpus;
};

struct group_info {
  std::string id, state, strategy, reason;
  bool detached = false;
  std::vector<bundle_info> bundles;
};

// One group as `tune status --json` and get_group() give it (JSON), read back.
expected<group_info> parse_group_info(const std::string& json);

// A program this client serves to nodes (content-addressed).
struct program_ref {
  std::string name, sha256;
  uint64_t size = 0;
};

struct trial_request {
  std::string trial_id, group;
  uint32_t bundle = 0;
  program_ref program;
  std::vector<std::string> args;
  std::string config_json = "{}";
  // A checkpoint the trial starts from: a folder of a trial's checkpoints on the node
  // of this bundle (the `path` of a checkpoint event); empty: start afresh.
  std::string restore_dir = {};
  // Else (not on that node, or none) a copy served by this client's program server:
  // {"iteration", "files": [{"name", "size", "sha256"}]} (files registered with
  // serve_program); the node fetches it into the trial's folder.
  std::string restore_files = {};
  // A program trial instead of `program` and `args` (wire_trial_spec): its command line,
  // its working directory's manifest served by serve_program (empty: none), NAME=VALUE
  // environment additions, patterns that read `metric` and others from its output.
  std::vector<std::string> command = {};
  program_ref workdir = {};
  std::vector<std::string> env = {};
  std::vector<std::string> output_patterns = {};
  std::string metric = {};
};

struct trial_event {
  // kind: started, result, checkpoint, done, ended (trial.hpp). Nodes send results
  // that came together as one message of columns (wire_results); next_trial_event
  // hands them out one "result" at a time.
  std::string trial_id, kind, json;
  caf::actor trial;                  // the trial actor, for stop / kill / pause / resume
};

// Serves registered files to nodes, in chunks, by SHA-256: (program_add_atom, path)
// -> (program_add_atom, sha256, size); (program_add_atom, paths, hashes, sizes) ->
// (program_add_atom); nodes ask (program_get_atom, sha256, offset, length) ->
// (program_get_atom, bytes). Each may be refused (wire.hpp).
caf::actor spawn_program_server(caf::actor_system& sys);

class cluster_client {
 public:
  using ms = std::chrono::milliseconds;

  // Connects to the head at host:port. Fails with the reason (nothing listening, not a
  // libtune head, no answer in time).
  static expected<std::unique_ptr<cluster_client>> connect(caf::actor_system& sys, const std::string& host,
                                                           uint16_t port, std::string token, ms timeout = ms{10000});
  // A head in this process.
  cluster_client(caf::actor_system& sys, caf::actor head, std::string token, ms timeout = ms{10000});
  ~cluster_client();  // ends its program server: nodes can no longer fetch from it
  cluster_client(const cluster_client&) = delete;
  cluster_client& operator=(const cluster_client&) = delete;

  struct created {
    std::string id, state, reason;  // state: "preparing", "pending", "created" or "infeasible"
  };
  // Registers a group. Bad requests fail with the reason; an infeasible group is
  // created in state "infeasible" with the reason (it is never placed).
  expected<created> create_group(const group_request& req);
  // Waits until the group is created (then: where each bundle sits), has failed, or
  // the timeout passes; the last two are errors that say why.
  expected<group_info> wait_ready(const std::string& id, ms timeout);
  // Releases everything the group holds; removing a removed group is fine.
  status remove_group(const std::string& id);
  expected<group_info> get_group(const std::string& id);
  // The same as JSON (`tune group get --json`).
  expected<std::string> get_group_json(const std::string& id);
  // The cluster's status as JSON (`tune status --json`).
  expected<std::string> status_json();
  // Groups with bundles placed again after a node loss, since the last call.
  std::vector<std::pair<std::string, std::vector<uint32_t>>> take_moved();

  // Trials. The program is served to nodes from this process (a program server of
  // this client's); this client owns the trials it starts: it gets their events and
  // only it may stop them.
  expected<program_ref> serve_program(const std::string& path);
  // Files whose SHA-256 and size the caller knows (a scanned working directory), served
  // by hash the same way.
  status serve_files(const std::vector<std::string>& paths, const std::vector<std::string>& sha256,
                     const std::vector<uint64_t>& sizes);
  // Starts a trial in a bundle of a created group; answers once the worker runs
  // (its pid, node, cards) or why it could not start.
  expected<std::string> start_trial(const trial_request& req);
  // The next event of any trial of this client's, waiting up to `timeout`.
  std::optional<trial_event> next_trial_event(ms timeout);
  void stop_trial(const caf::actor& trial, ms grace);
  void kill_trial(const caf::actor& trial);
  void pause_trial(const caf::actor& trial);
  void resume_trial(const caf::actor& trial);

  const caf::actor& head() const { return head_; }
  // Rebalancing (wire.hpp): the head's plan as JSON, its moves asked of the groups' owners.
  expected<std::string> rebalance();
  // Drain a node (on) or let it take work again (off); JSON of what was asked to move.
  expected<std::string> drain(const std::string& node, bool on);
  // The admin's user management (wire.hpp, user_atom): the head's JSON answer.
  expected<std::string> manage_users(const std::string& op, const std::string& json);
  // Where the head was reached (connect); empty and 0 for a head in this process.
  const std::string& head_host() const { return host_; }
  uint16_t head_port() const { return port_; }
  const std::string& token() const { return token_; }
  ms request_timeout() const { return timeout_; }
  caf::actor_system& system() const { return sys_; }
  // This client's program server (none until serve_program was called).
  const caf::actor& program_server() const { return programs_; }

 private:
  caf::actor_system& sys_;
  caf::scoped_actor self_;
  caf::actor head_;
  std::string host_;
  uint16_t port_ = 0;
  std::string token_;
  ms timeout_;
  caf::actor programs_;  // this client's program server, made on first use
  std::deque<trial_event> unpacked_;  // results of a "results" event not yet handed out
  std::map<caf::actor_addr, uint64_t> received_;  // messages from each trial (acknowledged: wire.hpp)
};

// A CAF error in words.
std::string describe(caf::actor_system& sys, const caf::error& err);
// An error in words for a message: a refusal's own words (they say what to do), CAF's
// error after `context` (what was being done: "read: ", "the program server: ").
std::string words(caf::actor_system& sys, const caf::error& err, const std::string& context);
// An error answer as a status: a refusal (wire.hpp) as the head or node sent it; CAF's
// own (no answer, no connection) as not_found, saying what was being done.
status to_status(caf::actor_system& sys, const caf::error& err, const std::string& doing);

}  // namespace tune
