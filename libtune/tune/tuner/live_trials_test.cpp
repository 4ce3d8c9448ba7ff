// The live trials' table, edge by edge: each case is what happened, in order, and the
// commands each step gives back (written as text: "create_group trial-1 #1 group=").
#include "tune/tuner/live_trials.hpp"
#include "tune/core/overloaded.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <sstream>

namespace tune {
namespace {

using namespace std::chrono_literals;

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string text(const live_command& c) {
  return std::visit(
      overloaded{
          [](const live::create_group& x) {
            return "create_group " + x.trial + " #" + std::to_string(x.attempt) + " group=" + x.group +
                   (x.claim ? " claim" : "") + (x.avoid.empty() ? "" : " avoid=" + join(x.avoid));
          },
          [](const live::wait_group& x) { return "wait_group " + x.trial + " #" + std::to_string(x.attempt) + " " + x.group; },
          [](const live::start_trial& x) {
            return "start_trial " + x.trial + " #" + std::to_string(x.attempt) + " " + x.group +
                   (x.action.restore_from.empty() ? "" : " from " + x.action.restore_from + "@" +
                                                             std::to_string(x.action.restore_iteration));
          },
          [](const live::stop_actor& x) { return "stop_actor " + std::to_string(x.actor); },
          [](const live::kill_actor& x) { return "kill_actor " + std::to_string(x.actor); },
          [](const live::ack& x) { return "ack " + std::to_string(x.actor) + " " + std::to_string(x.received); },
          [](const live::route& x) { return "route " + std::to_string(x.actor) + " " + std::to_string(x.received); },
          [](const live::greet& x) { return "greet " + x.trial + " " + x.group + " " + std::to_string(x.received); },
          [](const live::retake_group& x) { return "retake_group " + x.trial + " " + x.group; },
          [](const live::remove_group& x) { return "remove_group " + x.group; },
          [](const live::watch& x) { return "watch " + std::to_string(x.actor); },
          [](const live::unwatch& x) { return "unwatch " + std::to_string(x.actor); },
          [](const live::start_failed& x) { return "start_failed " + x.trial + ": " + x.why; },
          [](const live::ended& x) { return "ended " + x.trial; },
          [](const live::moved_out& x) { return "moved_out " + x.trial; },
          [](const live::note& x) { return "note " + x.trial + " " + x.event; },
          [](const live::fail& x) { return "fail " + x.why; },
      },
      c);
}

engine_action start(const std::string& id, std::string from = "", int64_t at = -1) {
  engine_action a;
  a.trial = id;
  a.restore_from = std::move(from);
  a.restore_iteration = at;
  return a;
}
engine_action stop(const std::string& id, engine_action::kind k = engine_action::kind::stop) {
  engine_action a;
  a.what = k;
  a.trial = id;
  return a;
}

const live_clock::time_point t0{};

// One step: what happens, and the commands it gives, in order.
struct step {
  std::function<void(live_trials&)> in;
  std::vector<std::string> out;
  std::optional<live_state> state = {};  // trial-1's state after it
};

struct edge_case {
  std::string name;
  std::vector<step> steps;
  friend void PrintTo(const edge_case& c, std::ostream* os) { *os << c.name; }
};

// trial-1 placed in g1 and running as actor 7 (its first message heard).
std::vector<step> running_trial() {
  return {
      {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}, live_state::placing},
      {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "pending", ""}); }, {"wait_group trial-1 #1 g1"}, live_state::waiting},
      {[](auto& l) { l.on_group_wait("trial-1", 1, true, "created", ""); }, {"start_trial trial-1 #1 g1"}, live_state::starting},
      {[](auto& l) { l.on_start_answer("trial-1", 1, true, "", "n1", 7); }, {"watch 7", "route 7 0"}, live_state::running},
      {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {}, live_state::running},
  };
}

std::vector<step> then(std::vector<step> a, std::vector<step> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<edge_case> cases = {
    {"a start that runs and ends", then(running_trial(), {
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, true)); l.on_ended("trial-1"); },
          {"unwatch 7", "remove_group g1", "ended trial-1"}, live_state::ended},
     })},
    {"its events overtake the start's answer", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "pending", ""}); }, {"wait_group trial-1 #1 g1"}},
         {[](auto& l) { l.on_group_wait("trial-1", 1, true, "created", ""); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {"watch 7"}, live_state::starting},
         {[](auto& l) { l.on_start_answer("trial-1", 1, true, "", "n1", 7); }, {"route 7 1"}, live_state::running},
     }},
    {"a bad group request ends the experiment", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {false, "", "invalid", "no such resource"}); }, {"fail no such resource"}},
     }},
    {"a group not placed in time: the start failed", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "pending", ""}); }, {"wait_group trial-1 #1 g1"}},
         {[](auto& l) { l.on_group_wait("trial-1", 1, false, "pending", "no node has 2 GPUs free"); },
          {"remove_group g1", "start_failed trial-1: placement group g1 is pending: no node has 2 GPUs free"}, live_state::ended},
         // the engine starts it again (max_failures): a new group, a new attempt
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #2 group="}, live_state::placing},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g-old", "pending", ""}); }, {}},  // the old attempt's
     }},
    {"a start refused by its node", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "created", ""}); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { l.on_start_answer("trial-1", 1, false, "no such program", "", 0); },
          {"remove_group g1", "start_failed trial-1: no such program"}, live_state::ended},
     }},
    {"a start that cannot be sent (its command would not render)", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "created", ""}); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { l.on_start_impossible("trial-1", 1, "${lr} is not in the configuration"); },
          {"remove_group g1", "start_failed trial-1: ${lr} is not in the configuration"}},
     }},
    {"a request timed out while the head is up: the start failed", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_request_failed("trial-1", 1, "create placement group: timeout"); },
          {"start_failed trial-1: create placement group: timeout"}},
     }},
    {"the head lost during a start: made again when it is back, the old answers ignored", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "pending", ""}); }, {"wait_group trial-1 #1 g1"}},
         {[](auto& l) { l.on_group_wait("trial-1", 1, true, "created", ""); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { l.on_head_lost(t0); }, {}},
         {[](auto& l) { l.on_request_failed("trial-1", 1, "start trial: connection lost"); }, {}},
         {[](auto& l) { l.on_head_back(t0 + 5s); }, {"create_group trial-1 #2 group=g1 claim"}, live_state::placing},
         {[](auto& l) { l.on_start_answer("trial-1", 1, true, "", "n1", 7); }, {}},  // attempt 1: too late
         // the new head still has the group: it is waited for as it is
         {[](auto& l) { l.on_group_created("trial-1", 2, {false, "", "exists", "g1 exists already"}); }, {"wait_group trial-1 #2 g1"}},
         {[](auto& l) { l.on_group_wait("trial-1", 2, true, "created", ""); }, {"start_trial trial-1 #2 g1"}},
         // its node runs it already (started before the head died): it is ours
         {[](auto& l) { l.on_start_answer("trial-1", 2, false, "runs already", "", 7); }, {"watch 7", "greet trial-1 g1 0"}, live_state::running},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {}, live_state::running},
     }},
    {"starts asked while the head is away wait for it", {
         {[](auto& l) { l.on_head_lost(t0); }, {}},
         {[](auto& l) { l.act({start("trial-1")}); }, {}, live_state::placing},
         {[](auto& l) { l.on_head_back(t0 + 1s); }, {"create_group trial-1 #2 group="}},
     }},
    {"the head lost and back: a running trial's group is taken back, and it is not lost meanwhile", then(running_trial(), {
         {[](auto& l) { l.on_head_lost(t0); }, {}},
         {[](auto& l) { EXPECT_FALSE(l.on_lost("trial-1", 7, t0 + 1s)); }, {}},
         {[](auto& l) { l.on_head_back(t0 + 20s); }, {"retake_group trial-1 g1"}},
         {[](auto& l) { EXPECT_FALSE(l.on_lost("trial-1", 7, t0 + 25s)); }, {}, live_state::running},
         {[](auto& l) { EXPECT_TRUE(l.on_lost("trial-1", 7, t0 + 31s)); }, {"unwatch 7", "remove_group g1", "ended trial-1"}, live_state::ended},
     })},
    {"its node dies: lost, and the lost actor is never heard again", then(running_trial(), {
         {[](auto& l) {
            auto lost = l.on_node_dead("n1");
            ASSERT_EQ(lost.size(), 1u);
            EXPECT_EQ(lost[0], (std::pair<std::string, actor_handle>{"trial-1", 7}));
            EXPECT_TRUE(l.on_node_dead("n2").empty());
          }, {}},
         {[](auto& l) { EXPECT_TRUE(l.on_lost("trial-1", 7, t0 + 1s)); }, {"unwatch 7", "remove_group g1", "ended trial-1"}},
         {[](auto& l) { l.act({start("trial-1", "trial-1", 4)}); }, {"create_group trial-1 #2 group="}},
         {[](auto& l) { EXPECT_FALSE(l.accept("trial-1", 7, false)); }, {"kill_actor 7"}},
     })},
    {"its actor goes down: lost after the grace unless its end came meanwhile", then(running_trial(), {
         {[](auto& l) { EXPECT_EQ(l.on_down(7), std::optional<std::string>{"trial-1"}); EXPECT_EQ(l.on_down(8), std::nullopt); }, {}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, true)); l.on_ended("trial-1"); }, {"unwatch 7", "remove_group g1", "ended trial-1"}},
         {[](auto& l) { EXPECT_FALSE(l.on_lost("trial-1", 7, t0 + 2s)); }, {}},  // it ended after all
     })},
    {"a late message from a stale actor is not heard", then(running_trial(), {
         {[](auto& l) { EXPECT_FALSE(l.accept("trial-1", 9, false)); }, {}},  // another actor's
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, true)); l.on_ended("trial-1"); }, {"unwatch 7", "remove_group g1", "ended trial-1"}},
         {[](auto& l) { EXPECT_FALSE(l.accept("trial-1", 7, false)); }, {}},  // nothing on its way
         {[](auto& l) { EXPECT_FALSE(l.accept("trial-9", 7, false)); }, {}},  // not a trial of ours
     })},
    {"pause, then resume from its checkpoint", then(running_trial(), {
         {[](auto& l) { l.act({stop("trial-1", engine_action::kind::pause)}); }, {"stop_actor 7"}, live_state::stopping},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, true)); l.on_ended("trial-1"); },
          {"unwatch 7", "remove_group g1", "ended trial-1"}, live_state::paused},
         {[](auto& l) { l.act({start("trial-1", "trial-1", 8)}); }, {"create_group trial-1 #2 group="}, live_state::placing},
         {[](auto& l) { l.on_group_created("trial-1", 2, {true, "g2", "created", ""}); }, {"start_trial trial-1 #2 g2 from trial-1@8"}},
     })},
    {"a stop asked on the way is sent when its actor is known", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.act({stop("trial-1")}); }, {}, live_state::placing},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "created", ""}); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { l.on_start_answer("trial-1", 1, true, "", "n1", 7); }, {"watch 7", "route 7 0", "stop_actor 7"}, live_state::stopping},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {}},
     }},
    {"a stop asked before its actor is known at all is sent with its first message", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "created", ""}); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { l.act({stop("trial-1")}); }, {}, live_state::starting},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {"watch 7", "stop_actor 7"}},
     }},
    {"a stranger heard before the start's answer gives way to the answer's actor", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "created", ""}); }, {"start_trial trial-1 #1 g1"}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 9, false)); }, {"watch 9"}},
         {[](auto& l) { l.on_start_answer("trial-1", 1, true, "", "n1", 7); }, {"unwatch 9", "watch 7", "route 7 0"}, live_state::running},
         {[](auto& l) { EXPECT_FALSE(l.accept("trial-1", 9, false)); }, {}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {}},
     }},
    {"a move: off its node, started again elsewhere", then(running_trial(), {
         {[](auto& l) { l.on_move("g1", {"n1"}, t0 + 100s); }, {"note trial-1 move", "stop_actor 7"}, live_state::moving},
         {[](auto& l) { l.on_move("g1", {"n1"}, t0 + 101s); }, {}},  // moving already
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, true)); l.on_ended("trial-1"); },
          {"unwatch 7", "remove_group g1", "moved_out trial-1"}, live_state::placing},
         {[](auto& l) { l.act({start("trial-1", "trial-1", 3)}); }, {"create_group trial-1 #2 group= avoid=n1"}},
         {[](auto& l) { l.on_group_created("trial-1", 2, {true, "g2", "created", ""}); }, {"start_trial trial-1 #2 g2 from trial-1@3"}},
         {[](auto& l) { l.on_start_answer("trial-1", 2, true, "", "n2", 8); }, {"watch 8", "route 8 0"}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 8, false)); }, {}},
         {[](auto& l) { l.on_move("g2", {"n2"}, t0 + 130s); }, {"note trial-1 move_refused"}, live_state::running},  // too soon
     })},
    {"a move that finds no room off its node is placed anywhere", then(running_trial(), {
         {[](auto& l) { l.on_move("g1", {"n1"}, t0 + 100s); }, {"note trial-1 move", "stop_actor 7"}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, true)); l.on_ended("trial-1"); }, {"unwatch 7", "remove_group g1", "moved_out trial-1"}},
         {[](auto& l) { l.act({start("trial-1", "trial-1", 3)}); }, {"create_group trial-1 #2 group= avoid=n1"}},
         {[](auto& l) { l.on_group_created("trial-1", 2, {true, "g2", "infeasible", ""}); },
          {"note trial-1 move_fallback", "remove_group g2", "create_group trial-1 #3 group="}},
     })},
    {"a move asked while its start is on its way (a preemption right after its group was made) is made once it runs", {
         {[](auto& l) { l.act({start("trial-1")}); }, {"create_group trial-1 #1 group="}},
         {[](auto& l) { l.on_group_created("trial-1", 1, {true, "g1", "pending", ""}); }, {"wait_group trial-1 #1 g1"}},
         {[](auto& l) { l.on_group_wait("trial-1", 1, true, "created", ""); }, {"start_trial trial-1 #1 g1"}, live_state::starting},
         {[](auto& l) { l.on_move("g1", {}, t0 + 100s, "preempted"); }, {}, live_state::starting},
         {[](auto& l) { l.on_start_answer("trial-1", 1, true, "", "n1", 7); },
          {"watch 7", "route 7 0", "note trial-1 move", "stop_actor 7"}, live_state::moving},
     }},
    {"a move is not made while the head is away", then(running_trial(), {
         {[](auto& l) { l.on_head_lost(t0); }, {}},
         {[](auto& l) { l.on_move("g1", {"n1"}, t0 + 100s); }, {}, live_state::running},
     })},
    {"acknowledged every ack_every messages", then(running_trial(), {
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {}},
         {[](auto& l) { EXPECT_TRUE(l.accept("trial-1", 7, false)); }, {"ack 7 4"}},
     })},
    {"the experiment over: every group back, every actor stopped", then(running_trial(), {
         {[](auto& l) { l.act({start("trial-2")}); }, {"create_group trial-2 #1 group="}},
         {[](auto& l) { l.release_all(true); }, {"stop_actor 7", "remove_group g1"}},
     })},
};

class LiveTrialsTest : public ::testing::TestWithParam<edge_case> {};

TEST_P(LiveTrialsTest, Edge) {
  live_options o;
  o.ack_every = 4;
  o.min_move_interval = 60s;
  live_trials table(o);
  int n = 0;
  for (auto& s : GetParam().steps) {
    ++n;
    s.in(table);
    std::vector<std::string> got;
    for (auto& c : table.take()) got.push_back(text(c));
    EXPECT_EQ(got, s.out) << "step " << n;
    if (s.state) {
      auto* t = table.find("trial-1");
      ASSERT_NE(t, nullptr) << "step " << n;
      EXPECT_STREQ(to_string(t->state), to_string(*s.state)) << "step " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Edges, LiveTrialsTest, ::testing::ValuesIn(cases), [](const auto& info) {
  std::string name;
  for (char c : info.param.name) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
});

}  // namespace
}  // namespace tune
