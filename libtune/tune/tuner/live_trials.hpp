// The live trials of one experiment: where each trial is on its way from the engine's
// start to its process's end, apart from actors, messages and clocks (so every edge is
// tested step by step: live_trials_test.cpp). The controller (actors/controller/controller.cpp)
// feeds it what happened — the engine's actions, the answers to its requests, the
// trials' messages, the head going away and coming back, time — and carries out the
// commands it gives back, in order. It decides; it never waits.
//
//   engine start       group created         group placed            start answered
//   ───────────► placing ──────────► waiting ────────────► starting ─────────────► running
//                  ▲   │ a move found no room off its nodes:          (or its first   │
//                  │   └─ placed again anywhere (move_fallback)        message)       │
//                  │                                                                  │
//                  │ its end: started again off the nodes it left   head's move       │
//                  └──────────────────────────────────────────── moving ◄─────────────┤
//                                                                                     │
//   engine start (resume)                         its end         engine stop/pause   │
//   paused ──► placing          paused | ended ◄──────── stopping ◄────────────────────┘
//
//   Failure edges, each → ended, the engine told: a start that fails (the group refused,
//   not placed in time, the start refused or impossible, a request that timed out while
//   the head is up; the engine may start it again: placing); a trial that ends by
//   itself (running → ended); a trial whose actor went down or whose node died, lost
//   after a grace (running | stopping → ended, not ok).
//
// A stop asked while the trial is still on its way (placing, waiting, starting) is kept
// and sent the moment its actor is known. While the head is away nothing is placed;
// when it is back, starts on their way are made again (a new attempt: answers to the
// old one are ignored; the group it had may be held by its node still, so it is claimed
// with a wait) and running trials' groups are taken back and their actors greeted, so
// that the events they held come here.
//
// Actors are opaque handles (actor_handle, never 0) that the controller assigns; a
// handle declared lost is never heard again (it is told to die when it speaks).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/tuner/engine.hpp"

namespace tune {

enum class live_state { placing, waiting, starting, running, stopping, moving, paused, ended };
const char* to_string(live_state s);

using actor_handle = uint64_t;  // 0: none
using live_clock = std::chrono::steady_clock;

// What the controller does, in the order given.
namespace live {
// Ask the head for the trial's placement group (group empty: the head names it; claim:
// its node may hold it still, wait for it to join; avoid: nodes it must not use).
struct create_group { std::string trial; uint64_t attempt; std::string group; bool claim; std::vector<std::string> avoid; };
// Wait for the group to be placed.
struct wait_group { std::string trial; uint64_t attempt; std::string group; };
// Start the trial in its group (from the checkpoint the action names, if any).
struct start_trial { std::string trial; uint64_t attempt; std::string group; engine_action action; };
struct stop_actor { actor_handle actor; };      // end the trial's process (its grace)
struct kill_actor { actor_handle actor; };      // a lost actor that spoke again
struct ack { actor_handle actor; uint64_t received; };    // flow control (wire.hpp)
struct route { actor_handle actor; uint64_t received; };  // started: its events come after this
// Through the head, to the trial's actor: send what follows `received` here.
struct greet { std::string trial; std::string group; uint64_t received; };
// After a head restart: make the running trial's group again (claimed), then greet it.
struct retake_group { std::string trial; std::string group; };
struct remove_group { std::string group; };
struct watch { actor_handle actor; };    // monitor it (its down message: on_down)
struct unwatch { actor_handle actor; };
// To the engine: the start failed (its error), or the trial's process ended.
struct start_failed { std::string trial; std::string why; };
struct ended { std::string trial; };     // its end (the controller has the record)
struct moved_out { std::string trial; }; // paused to move: started again (engine.on_interrupted)
// A store event of the trial's ("move", "move_refused", "move_fallback").
struct note { std::string trial; std::string event; nlohmann::json body; };
struct fail { std::string why; };        // the experiment cannot go on
}  // namespace live

using live_command = std::variant<live::create_group, live::wait_group, live::start_trial, live::stop_actor,
                                  live::kill_actor, live::ack, live::route, live::greet, live::retake_group,
                                  live::remove_group, live::watch, live::unwatch, live::start_failed,
                                  live::ended, live::moved_out, live::note, live::fail>;

struct live_options {
  uint64_t ack_every = 64;                                // wire::ack_every
  std::chrono::milliseconds min_move_interval{60000};     // a trial moves at most this often
  std::chrono::milliseconds lost_after_head_back{10000};  // no trial is lost this soon after the head is back
};

// The answer to a group's creation (pg_create): ok with the group's id and state, or
// not with a code ("exists": a group made again after a head restart that the head
// still has; anything else: a bad request) and the head's reason.
struct group_answer {
  bool ok = false;
  std::string group, state, reason;
};

class live_trials {
 public:
  struct trial {
    live_state state = live_state::placing;
    std::string group;
    std::string node;           // where it runs (from the start's answer)
    actor_handle actor = 0;
    bool stop_asked = false;    // a stop for when its actor is known
    bool pause_asked = false;   // the engine's stop was a pause (its end: paused)
    std::optional<engine_action> start;  // the start on its way
    uint64_t attempt = 0;       // numbers the start: answers to an earlier one are ignored
    bool reissued = false;      // made again after a head restart: it may run already
    bool group_ready = false;   // its group was placed (its node may hold it through a head restart)
    uint64_t received = 0;      // messages from its current actor
    std::vector<std::string> move_avoid;
    std::optional<live_clock::time_point> last_move;
    // A move the head asked for while its start was on its way (preemption right after
    // a group was made): done once the start's answer comes.
    std::optional<std::pair<std::string, live_clock::time_point>> move_when_started;  // why, when asked
  };

  explicit live_trials(live_options o = {}) : opt_(o) {}

  // The engine's actions, in order (while the head is away, starts wait for it).
  void act(const std::vector<engine_action>& actions);
  // Answers for the start `attempt` of trial `id`.
  void on_group_created(const std::string& id, uint64_t attempt, const group_answer& a);
  void on_group_wait(const std::string& id, uint64_t attempt, bool ready, const std::string& state,
                     const std::string& why);
  // The start's answer: ok with the node it runs on and the trial's actor (its from
  // then on: another actor's messages are not heard); not ok with the reason, and the
  // actor of a trial its node runs already (after a head restart: ours).
  void on_start_answer(const std::string& id, uint64_t attempt, bool ok, const std::string& reason,
                       const std::string& node, actor_handle actor);
  // A request of the start failed (no answer in time): the start failed, unless the
  // head is away (then it is made again when the head is back).
  void on_request_failed(const std::string& id, uint64_t attempt, const std::string& why);
  // The start could not be carried out here (its command would not render, no copy to
  // restore from could be sent): it failed.
  void on_start_impossible(const std::string& id, uint64_t attempt, const std::string& why);
  // Whether answers for this attempt are still wanted.
  bool current(const std::string& id, uint64_t attempt) const;

  // A message from `sender` about trial `id` (its last one: `last`, the end). Whether it
  // is heard (false: unknown trial, a stale or lost actor). A start on its way whose
  // answer has not come takes the first actor that speaks as its own (watched).
  bool accept(const std::string& id, actor_handle sender, bool last);
  // Its end was heard (accept(id, sender, true) first): moved_out or ended.
  void on_ended(const std::string& id);
  // The actor went down without an end: the trial it ran, to be declared lost after a
  // grace (its last messages may still be on their way).
  std::optional<std::string> on_down(actor_handle actor) const;
  // A node the head declared dead: its trials with an actor, to be declared lost
  // after a short grace.
  std::vector<std::pair<std::string, actor_handle>> on_node_dead(const std::string& node) const;
  // The grace is over: lost (then the controller ends it as not ok) unless it ended
  // meanwhile, the head is away or was back only just.
  bool on_lost(const std::string& id, actor_handle actor, live_clock::time_point now);

  // The head asks to move the trial in `group` off `avoid` (rebalance, drain).
  void on_move(const std::string& group, const std::vector<std::string>& avoid, live_clock::time_point now,
               const std::string& why = {});

  void on_head_lost(live_clock::time_point now);
  void on_head_back(live_clock::time_point now);
  bool head_up() const { return head_up_; }

  // Gives every held group back (the experiment is over); with `stop`, every actor is
  // told to stop too.
  void release_all(bool stop);

  // The commands given since the last call, in order.
  std::vector<live_command> take() { return std::exchange(out_, {}); }
  const std::map<std::string, trial>& trials() const { return trials_; }
  const trial* find(const std::string& id) const;
  // The trial an actor runs (empty: none).
  std::string trial_of(actor_handle actor) const;

 private:
  void place(const std::string& id, trial& t);
  void move_anywhere(const std::string& id, trial& t);
  void fail_start(const std::string& id, trial& t, const std::string& why);
  void give_back(trial& t);
  void forget_actor(trial& t);
  void adopt(const std::string& id, trial& t, actor_handle actor);
  trial* current_attempt(const std::string& id, uint64_t attempt);

  live_options opt_;
  std::map<std::string, trial> trials_;
  std::map<actor_handle, std::string> by_actor_;
  std::set<actor_handle> lost_;
  std::vector<live_command> out_;
  bool head_up_ = true;
  live_clock::time_point head_back_at_{};
  bool head_was_lost_ = false;
};

}  // namespace tune
