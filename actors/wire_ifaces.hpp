// The typed interfaces of the runtime's actors: part of the protocol of wire.hpp, which
// includes this file (include wire.hpp).
#pragma once

#include "wire.hpp"


// The typed interfaces of the runtime's actors: every message each takes, with its
// reply. An actor whose handlers live in several files is typed by parts, each checked
// where it is written, and whole as their union (typed.hpp). A handle that came over
// the network is cast to its interface (no check travels: CAF 0.17 checks interfaces
// only in remote_actor<T>, which libtune does not use, dialing itself).
namespace tune {

// What a trial's actor tells its owner (a controller, or a client's own actor):
using trial_events_iface = caf::typed_actor<
    caf::reacts_to<wire::trial_started_atom, std::string, wire::wire_trial_started>,
    caf::reacts_to<wire::trial_done_atom, std::string, std::string>,
    caf::reacts_to<wire::trial_joined_atom, std::string>,
    caf::reacts_to<wire::trial_checkpoint_atom, std::string, wire::wire_checkpoint>,
    caf::reacts_to<wire::trial_beside_atom, std::string, wire::wire_beside>,
    caf::reacts_to<wire::trial_output_atom, std::string, std::vector<std::string>>,
    caf::reacts_to<wire::trial_results_atom, std::string, wire::wire_results>,
    caf::reacts_to<wire::trial_result_atom, std::string, wire::wire_result>,
    caf::reacts_to<wire::trial_ended_atom, std::string, wire::wire_trial_end>,
    caf::reacts_to<wire::trial_node_atom, std::string, caf::actor, std::string>>;

// A trial's actor (trial/trial.hpp). From its owner:
using trial_from_owner_iface = caf::typed_actor<caf::reacts_to<wire::route_atom, uint64_t>,
                                           caf::reacts_to<wire::trial_ack_atom, uint64_t>,
                                           caf::reacts_to<wire::trial_stop_atom, int64_t>,
                                           caf::reacts_to<wire::trial_kill_atom>,
                                           caf::reacts_to<wire::trial_pause_atom>,
                                           caf::reacts_to<wire::trial_resume_atom>,
                                           caf::reacts_to<wire::trial_save_atom>,
                                           caf::reacts_to<trial_greet_wait_atom, uint64_t>>;
// From its watcher thread, its node and the node's GPU audit:
using trial_from_node_iface = caf::typed_actor<
    caf::reacts_to<worker_started_atom, int, int, std::string, std::string>,
    caf::reacts_to<worker_lines_atom, std::vector<std::string>>,
    caf::reacts_to<worker_output_atom, std::vector<std::string>>, caf::reacts_to<worker_host_atom, host_usage>,
    caf::reacts_to<worker_ended_atom, bool, int, std::string, std::string, int64_t, wire::wire_trial_end>,
    caf::reacts_to<trial_hold_atom>, caf::reacts_to<audit_usage_atom, int64_t, int64_t, int32_t>,
    caf::reacts_to<audit_violation_atom, std::string, bool>, caf::reacts_to<audit_foreign_atom, wire::wire_beside>,
    caf::reacts_to<trial_release_atom, std::string>>;
using trial_iface = trial_from_owner_iface::extend_with<trial_from_node_iface>;

}  // namespace tune

namespace tune {

// A node's GPU audit (node/audit.hpp): from the node's trials, and its own timers.
using audit_iface = caf::typed_actor<
    caf::replies_to<audit_end_atom, std::string>::with<wire::wire_gpu_after>,
    caf::reacts_to<audit_add_atom, std::string, int, int, std::string, std::vector<wire::wire_count>, caf::actor>,
    caf::reacts_to<audit_forget_atom, std::string>, caf::reacts_to<audit_recheck_atom, std::string>,
    caf::reacts_to<audit_tick_atom>>;

}  // namespace tune

namespace tune {

// What the owner of a placement group is told (a controller, or a client's own actor):
// its bundles placed again after a node loss; please move its trial off these nodes.
using group_owner_iface =
    caf::typed_actor<caf::reacts_to<wire::pg_moved_atom, std::string, std::vector<uint32_t>>,
                     caf::reacts_to<wire::pg_move_atom, std::string, std::vector<std::string>, std::string>>;

// What a follower of the cluster's events is told (subscribe_atom): a node's new state.
using subscriber_iface = caf::typed_actor<caf::reacts_to<wire::node_event_atom, std::string, std::string, std::string>>;

// The head's placement-group actor (groups/groups.hpp), by part. Its nodes' news, from
// the head, and the nodes' answers to the two phases:
using groups_nodes_iface = caf::typed_actor<
    caf::reacts_to<wire::node_up_atom, wire::wire_ad, caf::actor, bool>, caf::reacts_to<wire::node_down_atom, std::string>,
    caf::reacts_to<wire::holdings_atom, std::string, uint64_t, std::vector<wire::wire_hold>>,
    caf::reacts_to<wire::others_atom, std::string, std::vector<wire::wire_others>>,
    caf::reacts_to<wire::prepare_atom, std::string, std::string, uint32_t, bool, wire::wire_alloc, std::string, uint64_t>,
    caf::reacts_to<wire::commit_atom, std::string, std::string, uint32_t, bool, std::string>>;
// Clients' requests passed on by the head with the requesting user's name:
using groups_create_iface = caf::typed_actor<
    caf::replies_to<wire::pg_create_atom, std::string, wire::wire_group_spec>::with<wire::pg_create_atom, std::string,
                                                                                   std::string, std::string>,
    caf::replies_to<wire::pg_wait_atom, std::string, std::string, int64_t>::with<wire::pg_wait_atom, bool, std::string,
                                                                                 std::string>,
    caf::replies_to<wire::pg_remove_atom, std::string, std::string>::with<wire::pg_remove_atom, std::string>,
    caf::replies_to<wire::pg_get_atom, std::string, std::string>::with<wire::pg_get_atom, std::string>>;
using groups_trials_iface = caf::typed_actor<
    caf::replies_to<wire::trial_start_atom, std::string, wire::wire_trial_spec, caf::actor>::with<
        wire::trial_start_atom, wire::wire_trial_started, caf::actor>,
    caf::replies_to<wire::stage_atom, std::string, std::string, std::string, std::string, std::string, std::string,
                    uint64_t, caf::actor>::with<wire::stage_atom, std::string>,
    caf::reacts_to<wire::route_atom, std::string, std::string, uint32_t, std::string, uint64_t>>;
// The admin's requests:
using groups_moves_iface =
    caf::typed_actor<caf::replies_to<wire::rebalance_atom>::with<wire::rebalance_atom, std::string>,
                     caf::replies_to<wire::drain_atom, std::string, bool>::with<wire::drain_atom, std::string>>;
// The head's own: users, checkpoints' ages, the list for status; the actor's timer.
using groups_status_iface =
    caf::typed_actor<caf::reacts_to<wire::user_atom, std::vector<wire::wire_user>>,
                     caf::reacts_to<since_checkpoint_atom, std::vector<wire::wire_count>>,
                     caf::replies_to<wire::pg_list_atom>::with<wire::pg_list_atom, std::string>,
                     caf::reacts_to<wire::pg_tick_atom>>;
using groups_iface = groups_nodes_iface::extend_with<groups_create_iface, groups_trials_iface, groups_moves_iface,
                                                     groups_status_iface>;

}  // namespace tune

namespace tune {

// A machine's node (node/node.hpp), by part. Its membership: its timers, the head's
// "join again", and its end (leave) from the program that runs it:
using node_membership_iface =
    caf::typed_actor<caf::reacts_to<wire::retry_atom>, caf::reacts_to<wire::beat_atom, uint64_t>,
                     caf::reacts_to<wire::rejoin_atom>, caf::replies_to<wire::leave_atom>::with<wire::leave_atom, bool>,
                     caf::reacts_to<node_report_atom>>;
// Its reservations: the two phases from the placement-group actor, the audit's foreign
// processes, the machine's card claims:
using node_reservations_iface = caf::typed_actor<
    caf::reacts_to<wire::expire_atom>,
    caf::reacts_to<wire::prepare_atom, std::string, uint32_t, wire::wire_request, wire::wire_alloc>,
    caf::reacts_to<wire::commit_atom, std::string, uint32_t>, caf::reacts_to<wire::abort_atom, std::string, uint32_t>,
    caf::reacts_to<audit_foreign_atom, std::vector<foreign_process>>, caf::reacts_to<claims_write_atom>,
    caf::reacts_to<claims_tick_atom>>;
// Its files: standby copies (from the placement-group actor), checkpoints read by clients:
using node_files_iface = caf::typed_actor<
    caf::replies_to<wire::stage_atom, std::string, std::string, std::string, uint64_t, caf::actor>::with<
        wire::stage_atom, std::string>,
    caf::replies_to<wire::ckpt_list_atom, std::string, std::string, std::string>::with<
        wire::ckpt_list_atom, std::vector<wire::wire_file>>,
    caf::replies_to<wire::ckpt_read_atom, std::string, std::string, std::string, std::string, uint64_t,
                    uint32_t>::with<wire::ckpt_read_atom, std::string>>;
// Its trials: starts and greetings (through the head), its trials' and audit's reports:
using node_trials_iface = caf::typed_actor<
    caf::replies_to<wire::trial_start_atom, wire::wire_trial_spec, std::string, uint32_t, caf::actor, caf::actor>::with<
        wire::trial_start_atom, wire::wire_trial_started, caf::actor>,
    caf::reacts_to<wire::route_atom, std::string, uint64_t>,
    caf::reacts_to<audit_report_atom, std::vector<wire::wire_card_report>>,
    caf::reacts_to<trial_host_atom, std::string, host_usage>>;
using node_iface = node_membership_iface::extend_with<node_reservations_iface, node_files_iface, node_trials_iface>;

}  // namespace tune

namespace tune {

// An experiment's controller (controller/controller.hpp), by part. What its trials'
// actors tell their owner:
using controller_trials_iface = trial_events_iface;
// What the head tells it (among them the answers to what it asks without waiting), and
// its own timers (a lost trial's grace: the trial's id, its actor's handle, why):
using controller_head_iface = caf::typed_actor<
    caf::reacts_to<wire::pg_moved_atom, std::string, std::vector<uint32_t>>,
    caf::reacts_to<wire::subscribe_atom, std::string>, caf::reacts_to<wire::rebalance_atom, std::string>,
    caf::reacts_to<wire::pg_move_atom, std::string, std::vector<std::string>, std::string>,
    caf::reacts_to<wire::node_event_atom, std::string, std::string, std::string>,
    caf::reacts_to<controller_lost_atom, std::string, uint64_t, std::string>,
    caf::reacts_to<controller_gang_atom, std::string, uint64_t, int32_t, uint64_t>,
    caf::reacts_to<controller_reconnect_atom>, caf::reacts_to<controller_flush_atom>,
    caf::reacts_to<controller_hooks_atom>>;
using controller_iface = controller_trials_iface::extend_with<controller_head_iface>;

}  // namespace tune

namespace tune {

// The head (head/head.hpp), by part: the protocol at the top of this file. Nodes:
using head_nodes_iface = caf::typed_actor<
    caf::replies_to<wire::join_atom, std::string, wire::wire_ad>::with<wire::join_atom, std::string>,
    caf::reacts_to<wire::heartbeat_atom, std::string, std::string, uint64_t, wire::wire_avail,
                   std::vector<wire::wire_hold>>,
    caf::reacts_to<wire::gpu_audit_atom, std::string, std::string, wire::wire_node_report>,
    caf::replies_to<wire::leave_atom, std::string, std::string>::with<wire::leave_atom, bool>,
    caf::reacts_to<wire::sweep_atom>>;
// Status, the dashboard's views (HTTP status, body), the experiments' board, subscribers:
using head_status_iface = caf::typed_actor<
    caf::replies_to<wire::status_atom, std::string, std::string>::with<wire::status_atom, std::string>,
    caf::reacts_to<wire::board_atom, std::string, std::string>,
    caf::replies_to<wire::dashboard_atom, std::string, std::string, std::string, std::string>::with<
        wire::dashboard_atom, int, std::string>,
    caf::replies_to<wire::subscribe_atom, std::string>::with<wire::subscribe_atom, std::string>>;
// Placement groups, trials, standby copies, moves (passed on to the placement-group actor):
using head_groups_iface = caf::typed_actor<
    caf::replies_to<wire::pg_create_atom, std::string, std::string, wire::wire_group_spec>::with<
        wire::pg_create_atom, std::string, std::string, std::string>,
    caf::replies_to<wire::pg_wait_atom, std::string, std::string, int64_t>::with<wire::pg_wait_atom, bool, std::string,
                                                                                 std::string>,
    caf::replies_to<wire::trial_start_atom, std::string, wire::wire_trial_spec, caf::actor>::with<
        wire::trial_start_atom, wire::wire_trial_started, caf::actor>,
    caf::replies_to<wire::stage_atom, std::string, std::string, std::string, std::string, std::string, std::string,
                    uint64_t, caf::actor>::with<wire::stage_atom, std::string>,
    caf::reacts_to<wire::route_atom, std::string, std::string, uint32_t, std::string, uint64_t>,
    caf::replies_to<wire::rebalance_atom, std::string>::with<wire::rebalance_atom, std::string>,
    caf::replies_to<wire::drain_atom, std::string, std::string, bool>::with<wire::drain_atom, std::string>,
    caf::replies_to<wire::pg_remove_atom, std::string, std::string>::with<wire::pg_remove_atom, std::string>,
    caf::replies_to<wire::pg_get_atom, std::string, std::string>::with<wire::pg_get_atom, std::string>>;
// Users (the admin's):
using head_users_iface =
    caf::typed_actor<caf::replies_to<wire::user_atom, std::string, std::string, std::string>::with<wire::user_atom,
                                                                                                  std::string>>;
using head_iface = head_nodes_iface::extend_with<head_status_iface, head_groups_iface, head_users_iface>;

}  // namespace tune

namespace tune {

// An experiment's checkpoint copier (controller/checkpoint_copy.hpp): a copy (trial,
// iteration, path, node actor, dest, access) -> (the copy's manifest JSON, as its
// MANIFEST.json file, and bytes); a check (dir, manifest JSON, stat JSON) -> done.
// Either may be refused with why.
using copier_iface = caf::typed_actor<
    caf::replies_to<ckpt_copy_atom, std::string, int64_t, std::string, caf::actor, std::string, std::string>::with<
        ckpt_copy_atom, std::string, uint64_t>,
    caf::replies_to<ckpt_check_atom, std::string, std::string, std::string>::with<ckpt_check_atom>>;

}  // namespace tune
