// Every message of the runtime: the atoms here, the structs with their `inspect` in
// wire_types.hpp, the actors' typed interfaces in wire_ifaces.hpp (both included here),
// refusals, and the CAF configuration every process uses. One place, so that head,
// node and client always agree.
//
// The protocol (all requests carry a token; a request not done is answered with a
// refusal, a caf::error whose code is tune's errc and whose words say why: see
// "Refusals" below; the replies shown are the answers when it is done). Who a token
// is (tune/cluster/users.hpp): the head's own token is the admin; the node token lets
// nodes join, beat, report audits and leave, nothing else; a user's token acts as that
// user, on what that user owns (placement groups, their trials, experiments) and the
// cluster's status with other users' holdings summarized; drain, rebalance and user
// management are the admin's. A refusal names the owner or the role that may.
//
//   node -> head   (join_atom, token, wire_ad)              -> (join_atom, the head's version)
//   node -> head   (heartbeat_atom, token, node_id, version, wire_avail, holdings)  no reply;
//                  version: the node's reservation-table version the holdings are from
//                  the head answers (rejoin_atom) when it does not know the node alive
//   node -> head   (gpu_audit_atom, token, node_id, wire_node_report)   no reply; what the
//                  head shows of the node beyond its resources, when it changed
//   node -> head   (leave_atom, token, node_id)             -> (leave_atom, bool)
//   any  -> head   (status_atom, token, version)            -> (status_atom, status JSON)
//   any  -> head   (subscribe_atom, token)                  -> (subscribe_atom, the head's version)
//   head -> subscribers  (node_event_atom, node_id, state, reason)
//
// Placement groups (docs/placement-groups.md). Clients ask the head, which checks the
// token and hands the request to its placement-group actor, which answers:
//   client -> head (pg_create_atom, token, version, wire_group_spec)
//                  -> (pg_create_atom, id, state, reason); refused already_exists when a
//                     live group has that id
//   client -> head (pg_wait_atom, token, id, timeout_ms)
//                  -> (pg_wait_atom, bool ready, state, reason)   when created, failed
//                     or after the timeout, whichever comes first
//   client -> head (pg_remove_atom, token, id)            -> (pg_remove_atom, "removed" | "already removed")
//   client -> head (pg_get_atom, token, id)               -> (pg_get_atom, the group's JSON)
//   groups -> owner (pg_moved_atom, id, bundles)   bundles placed again after a node loss
// Two phases between the placement-group actor and a node actor (keys: docs), plain
// messages both ways (the placement-group actor times attempts out itself):
//   groups -> node (prepare_atom, key, bundle, wire_request, wire_alloc preferred)
//   node -> groups (prepare_atom, node_id, key, bundle, bool, wire_alloc taken, reason, version)
//   groups -> node (commit_atom, key, bundle)
//   node -> groups (commit_atom, node_id, key, bundle, false, reason)   only when it failed
//   groups -> node (abort_atom, key, bundle)
//
// Trials (docs/trials.md): a client starts a trial in a bundle of one of its groups;
// the head checks the token, the placement-group actor finds the bundle's node and asks
// it (trial_start_atom, spec, key, bundle, program_server, owner), relaying the answer:
//   client -> head (trial_start_atom, token, wire_trial_spec, program_server)
//                  -> (trial_start_atom, wire_trial_started, trial actor)   once the worker
//                     runs, or a refusal (start_answer below)
//   client -> trial (route_atom, received)   the first thing the client sends the trial:
//                  its messages are held until then (at most trial_greeting_wait). A node
//                  that lost its connection to the head and made a new one has no route back
//                  to a client it knew before (CAF 0.17 keeps the client's proxy but forgets
//                  the route), and learns it again from a message that comes from the
//                  client's process. After a head restart the client greets its trials again
//                  through the head: client -> head (route_atom, token, group, bundle, trial_id,
//                  received) -> placement-group actor -> node -> trial, delegated (the client
//                  stays the sender); `received` is how many of the trial's messages it got,
//                  and the trial sends again what followed (it keeps what its owner has not
//                  acknowledged, at most the latest 4096; results travel at most 256 a message).
//   node -> program_server (program_get_atom, sha256, offset, length) -> (program_get_atom, bytes)
//   trial -> client (trial_started_atom, trial_id, wire_trial_started)   its worker runs
//   trial -> client (trial_checkpoint_atom, trial_id, wire_checkpoint)   it saved a checkpoint
//   trial -> client (trial_done_atom, trial_id, message)   it said it is done
//   trial -> client (trial_joined_atom, trial_id)   a gang's worker said it joined its
//                  peers (its process group made: docs/workers.md)
//   trial -> client (trial_beside_atom, trial_id, wire_beside)   another program appeared
//                  on one of its cards (left alone)
//   trial -> client (trial_results_atom, trial_id, wire_results)   results whose metrics are all
//                  numbers, as columns (the fast path), in order with the trial's other messages
//   trial -> client (trial_result_atom, trial_id, wire_result)   a result with a metric that
//                  is not a number (its metrics as the worker's JSON)
//   trial -> client (trial_output_atom, trial_id, lines)   lines of its standard output and
//                  error, when its spec asks (forward_output: Ray's log_to_driver)
//   trial -> client (trial_ended_atom, trial_id, wire_trial_end)   its end, its last message
//   client -> trial (trial_stop_atom, grace_ms) | (trial_kill_atom) | (trial_pause_atom) | (trial_resume_atom)
//   client -> trial (trial_ack_atom, received)   how many of its messages came (every
//                  ack_every of them): a trial with more than ack_window messages not yet
//                  acknowledged stops reading its worker's reports until they are (the
//                  worker then blocks on its writes), so a report flood holds bounded
//                  memory on the node, the head and the client
//   trial -> client (trial_node_atom, trial_id, node actor, access)   once it runs: where its
//                  checkpoints are read, and the trial's own secret for reading them (the
//                  node makes one per trial: users' tokens are not the node's)
// Checkpoints are copied from the node in chunks (docs/trials.md), by the trial's owner
// (with the trial's access secret) or a holder of the node's token:
//   client -> node (ckpt_list_atom, token, trial_id, path)  -> (ckpt_list_atom, [wire_file])
//                  the files of the checkpoint folder `path` (a trial's, on the node)
//   client -> node (ckpt_read_atom, token, trial_id, path, name, offset, length) -> (ckpt_read_atom, bytes)
// Rebalancing (docs/cluster.md): the head plans, the groups' owners move their trials.
//   client -> head (rebalance_atom, token) -> (rebalance_atom, json)
//                  json: {"moves": [{"group", "from", "to", "gpu"}], "load": {node: fraction}}
//   client -> head (drain_atom, token, node_id, bool on) -> (drain_atom, json)
//                  json: {"moves": [...], "stays": [{"group", "why"}]}
//   head -> owner (pg_move_atom, group, avoid node ids, why)   please move the trial in this group off
//                  those nodes: the owner pauses it (its process ends, its checkpoint stays),
//                  gives the group back and starts it again in a new group (avoid) from it
// Standby copies (docs/resilience.md): a trial's checkpoint copy, served by its client,
// fetched ahead of time by another node, where a restart after its node's death goes:
//   client -> head (stage_atom, token, group, node, trial_id, manifest JSON, program sha256,
//                  program size, program_server) -> (stage_atom, node id)
//                  node empty: the node where the trial's group would go were its nodes
//                  gone (the group's owner only); a manifest without files drops what
//                  `node` holds for the trial
//   groups -> node (stage_atom, key, manifest JSON, program sha256, program size, program_server)
//                  -> (stage_atom, what it did)   key: "<user>/<trial_id>"; the program
//                  (empty: none) and the files fetched into the node's caches
// Users (docs/users.md), the admin only:
//   client -> head (user_atom, token, op, json) -> (user_atom, json)
//                  op: "add" {name, settings...} -> the user with their token; "set" {name,
//                  settings...}; "token" {name, new} -> the user's token (new: a new one;
//                  the old one ends); "remove"
//                  {name}; "list" {} -> [users without tokens]
// Nodes put what they hold (wire_hold) in their advertisement and every heartbeat.
//
// Every actor here is typed (the interfaces at the end of this file). A client reaches
// the head by dialing it and casting the handle (transport/dial.hpp), with no interface
// check on connecting: a client of another version still reaches the head and is told,
// in words, which versions differ (its version travels in its requests).
#pragma once

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/status.hpp"
#include "wire_types.hpp"

namespace tune::wire {

using join_atom = caf::atom_constant<caf::atom("join")>;
using heartbeat_atom = caf::atom_constant<caf::atom("heartbeat")>;
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using leave_atom = caf::atom_constant<caf::atom("leave")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
using node_event_atom = caf::atom_constant<caf::atom("nodeevent")>;
using sweep_atom = caf::atom_constant<caf::atom("sweep")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using retry_atom = caf::atom_constant<caf::atom("retry")>;
using prepare_atom = caf::atom_constant<caf::atom("prepare")>;
using commit_atom = caf::atom_constant<caf::atom("commit")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using holdings_atom = caf::atom_constant<caf::atom("holdings")>;
using node_up_atom = caf::atom_constant<caf::atom("nodeup")>;
using node_down_atom = caf::atom_constant<caf::atom("nodedown")>;
// head -> groups (others_atom, node_id, std::vector<wire_others>): what other programs
// hold on the node's cards changed (its heartbeat said so).
using others_atom = caf::atom_constant<caf::atom("others")>;
using pg_create_atom = caf::atom_constant<caf::atom("pgcreate")>;
using pg_wait_atom = caf::atom_constant<caf::atom("pgwait")>;
using pg_remove_atom = caf::atom_constant<caf::atom("pgremove")>;
using pg_get_atom = caf::atom_constant<caf::atom("pgget")>;
using pg_list_atom = caf::atom_constant<caf::atom("pglist")>;
using pg_moved_atom = caf::atom_constant<caf::atom("pgmoved")>;
using pg_tick_atom = caf::atom_constant<caf::atom("pgtick")>;
using trial_start_atom = caf::atom_constant<caf::atom("trialstart")>;
using trial_stop_atom = caf::atom_constant<caf::atom("trialstop")>;
using trial_kill_atom = caf::atom_constant<caf::atom("trialkill")>;
using trial_pause_atom = caf::atom_constant<caf::atom("trialpause")>;
using trial_resume_atom = caf::atom_constant<caf::atom("trialresum")>;
// Owner -> trial actor: ask the worker for a checkpoint now (SIGURG to the worker: a
// callback's should_checkpoint; tune/trial/PROTOCOL.md).
using trial_save_atom = caf::atom_constant<caf::atom("trialsave")>;
using trial_started_atom = caf::atom_constant<caf::atom("trialrun")>;
using trial_checkpoint_atom = caf::atom_constant<caf::atom("trialckpt")>;
using trial_done_atom = caf::atom_constant<caf::atom("trialdone")>;
using trial_joined_atom = caf::atom_constant<caf::atom("trialjoin")>;
using trial_beside_atom = caf::atom_constant<caf::atom("trialbside")>;
using trial_output_atom = caf::atom_constant<caf::atom("trialout")>;
using trial_results_atom = caf::atom_constant<caf::atom("trialres")>;
using trial_result_atom = caf::atom_constant<caf::atom("trialres1")>;
using trial_ended_atom = caf::atom_constant<caf::atom("trialend")>;
using trial_node_atom = caf::atom_constant<caf::atom("trialnode")>;
using ckpt_list_atom = caf::atom_constant<caf::atom("ckptlist")>;
using ckpt_read_atom = caf::atom_constant<caf::atom("ckptread")>;
using program_get_atom = caf::atom_constant<caf::atom("progget")>;
using program_add_atom = caf::atom_constant<caf::atom("progadd")>;
using gpu_audit_atom = caf::atom_constant<caf::atom("gpuaudit")>;
using route_atom = caf::atom_constant<caf::atom("route")>;
using trial_ack_atom = caf::atom_constant<caf::atom("trialack")>;
using rebalance_atom = caf::atom_constant<caf::atom("rebalance")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using user_atom = caf::atom_constant<caf::atom("user")>;
using pg_move_atom = caf::atom_constant<caf::atom("pgmove")>;
using stage_atom = caf::atom_constant<caf::atom("stage")>;
// An experiment's controller reports to the head's board (tune/cluster/board.hpp):
// (board_atom, token, report JSON), no answer.
using board_atom = caf::atom_constant<caf::atom("board")>;
// The dashboard asks the head: (dashboard_atom, token, view, arg1, arg2) ->
// (dashboard_atom, http status, body). Views: cluster, nodes, gpus, groups,
// experiments, experiment (arg1 = id), trial (arg1 = experiment, arg2 = trial), metrics.
using dashboard_atom = caf::atom_constant<caf::atom("dashboard")>;

// Refusals. A request that is not done is answered with a caf::error of the "tune"
// category (never a reply that says false): its code is tune's errc
// (tune/core/status.hpp: invalid_argument, not_found, already_exists, ...), its context
// the reason in words, which names what to do. A trial that runs already is refused
// with already_exists and its trial actor beside the reason. A caf::error of another
// category is CAF's own (no answer in time, no connection, the receiver gone).
inline constexpr caf::atom_value refusal_category = caf::atom("tune");
caf::error refusal(errc code, std::string why);
caf::error refusal(errc code, std::string why, caf::actor running);
bool is_refusal(const caf::error& err);
// A refusal's code and words (errc::ok and "" for CAF's own errors).
errc refusal_code(const caf::error& err);
std::string refusal_reason(const caf::error& err);
// The trial actor of an already_exists refusal of a trial start (null otherwise).
caf::actor refusal_running(const caf::error& err);
// An answer passed on: a refusal with `prefix` before its words (its code and trial actor
// kept), CAF's own error as an invalid_argument refusal in CAF's words.
caf::error relayed(const caf::error& err, const std::string& prefix);

// The head's answers to a node's join (its version) and leave (whether it knew the node
// alive), or a refusal.
using join_answer = caf::result<join_atom, std::string>;
using leave_answer = caf::result<leave_atom, bool>;

// Timing of the liveness protocol.
constexpr auto heartbeat_period = std::chrono::milliseconds(500);
constexpr auto heartbeat_timeout = std::chrono::milliseconds(3000);  // silent longer: dead
constexpr auto sweep_period = std::chrono::milliseconds(250);
constexpr auto request_timeout = std::chrono::seconds(5);
constexpr auto trial_greeting_wait = std::chrono::seconds(10);
// The most bytes of a file (program, checkpoint) one message carries: never one giant
// message (CAF.md).
constexpr uint32_t max_chunk = 4u << 20;
// Flow control of a trial's messages to its owner (trial_ack_atom).
constexpr uint64_t ack_every = 64;
constexpr uint64_t ack_window = 512;

// The answer to a trial start: (trial_start_atom, wire_trial_started, trial actor), its
// worker runs; or a refusal: already_exists with the trial actor when the trial runs on
// that node already (started before, e.g. by a request whose answer was lost with a
// head), else invalid_argument saying why it did not start.
inline caf::message start_answer(wire_trial_started started, caf::actor trial) {
  return caf::make_message(trial_start_atom::value, std::move(started), std::move(trial));
}
inline caf::error start_refusal(std::string why, caf::actor running = {}) {
  if (running) return refusal(errc::already_exists, std::move(why), std::move(running));
  return refusal(errc::invalid_argument, std::move(why));
}

// A gang's worker of rank r > 0 (wire_gang) is started as a trial of its own id,
// <trial>~w<r> (its folder, cgroup, secret and audit entry on its node its own, beside
// another rank's on the same node); rank 0 as the trial. The trial of such an id (the
// id itself when it is no worker's), and the worker's id.
inline std::string trial_of_worker(const std::string& id) {
  auto at = id.rfind("~w");
  return at == std::string::npos ? id : id.substr(0, at);
}
inline std::string worker_id(const std::string& trial, uint32_t rank) {
  return rank == 0 ? trial : trial + "~w" + std::to_string(rank);
}

// The CAF configuration of every libtune process: message types registered, the
// application identifier, and connection heartbeats so that a silent peer is dropped.
// `network` false leaves the middleman out (actor tests on the deterministic scheduler).
class config : public caf::actor_system_config {
 public:
  explicit config(bool network = true);
};

}  // namespace tune::wire

// Messages that never leave their process — an actor's own timers, a node to its trial
// actors and its GPU audit, a trial's watcher thread to its actor, the controller to its
// checkpoint copier — here too, so that every message of the runtime is in one place.
namespace tune {

// The node (node/): its timers.
using node_report_atom = caf::atom_constant<caf::atom("nodereport")>;  // send what the head shows of it
using claims_tick_atom = caf::atom_constant<caf::atom("claimtick")>;   // look at the machine's card claims
using claims_write_atom = caf::atom_constant<caf::atom("claimwrite")>; // write released bundles' claims

// The node's GPU audit (node/audit.hpp says what each carries).
using audit_add_atom = caf::atom_constant<caf::atom("auditadd")>;
using audit_tick_atom = caf::atom_constant<caf::atom("audittick")>;
using audit_violation_atom = caf::atom_constant<caf::atom("auditbad")>;
using audit_usage_atom = caf::atom_constant<caf::atom("auditmem")>;
using audit_report_atom = caf::atom_constant<caf::atom("auditrep")>;
using audit_end_atom = caf::atom_constant<caf::atom("auditend")>;
using audit_forget_atom = caf::atom_constant<caf::atom("auditfgt")>;
using audit_foreign_atom = caf::atom_constant<caf::atom("auditfrgn")>;
using audit_recheck_atom = caf::atom_constant<caf::atom("auditrck")>;

// The node to a trial's actor (trial/trial.hpp), and back.
// (trial_release_atom, reason): the trial's bundle was released (its group removed, its
// owner gone, or the head gave the bundle to someone else while this node was cut off);
// the worker is killed at once and the trial ends in error with `reason`: a trial never
// runs without the reservation it was started in.
using trial_release_atom = caf::atom_constant<caf::atom("trialrel")>;
// (trial_hold_atom): the node's connection to the head broke, so the route to the
// trial's owner is gone: what the trial reports is kept (in order) until the owner
// greets it again (route_atom, received) and then sent from the first message the owner
// missed.
using trial_hold_atom = caf::atom_constant<caf::atom("trialhold")>;
// To the node: (trial_host_atom, trial_id, host_usage): the trial's host usage from its
// cgroup, about once a second.
using trial_host_atom = caf::atom_constant<caf::atom("trialhost")>;
// The trial actor's own timer: its owner's greeting did not come in time.
using trial_greet_wait_atom = caf::atom_constant<caf::atom("tgreetw")>;

// A trial's watcher thread to its actor (trial/watcher.hpp), in this order:
// (worker_started_atom, pid, group, error, cgroup): it runs (pid > 0) or could not start;
// (worker_lines_atom, lines): all one read gave; (worker_output_atom, lines): its output's
// lines to forward; (worker_host_atom, host_usage): its cgroup's usage; (worker_ended_atom, exited, code, how, stderr tail, overlong lines, end): the last.
using worker_started_atom = caf::atom_constant<caf::atom("tstarted")>;
using worker_lines_atom = caf::atom_constant<caf::atom("tline")>;
using worker_output_atom = caf::atom_constant<caf::atom("toutput")>;
using worker_host_atom = caf::atom_constant<caf::atom("thost")>;
using worker_ended_atom = caf::atom_constant<caf::atom("tended")>;

// The head to its placement-group actor (groups/groups.hpp): (since_checkpoint_atom,
// std::vector<wire::wire_count> {group, iterations}): what each running trial would redo
// if preempted now (its
// iterations since its latest checkpoint), at most once a second.
using since_checkpoint_atom = caf::atom_constant<caf::atom("sinceckpt")>;

// The experiment controller (controller/): its timers, and its checkpoint copier
// (controller/checkpoint_copy.hpp says what they carry).
using controller_flush_atom = caf::atom_constant<caf::atom("ctlflush")>;
using controller_lost_atom = caf::atom_constant<caf::atom("ctllost")>;
using controller_reconnect_atom = caf::atom_constant<caf::atom("ctlreconn")>;
// A gang's timer (controller_gang.cpp): trial, attempt, which (gang_timer), a worker's handle.
using controller_gang_atom = caf::atom_constant<caf::atom("ctlgang")>;
// The hooks' host (tune/tuner/hooks.hpp) has answers to take (controller_hooks.cpp).
using controller_hooks_atom = caf::atom_constant<caf::atom("ctlhooks")>;
using ckpt_copy_atom = caf::atom_constant<caf::atom("ckcopy")>;
using ckpt_check_atom = caf::atom_constant<caf::atom("ckcheck")>;

}  // namespace tune

#include "wire_ifaces.hpp"  // the actors' typed interfaces, which need all of the above
