// The trial actor on CAF's deterministic scheduler, with a real worker process (a shell
// command as a program trial): its start answered, its reports relayed to its owner in
// order, a stop's grace and the SIGKILL after it, a kill, a hold and the greeting that
// sends what the owner missed. Only the actors run when the test says; the watcher's
// thread and the worker run for real, so each step waits (boundedly) for what they do.
#include "trial.hpp"

#include <gtest/gtest.h>
#include <poll.h>

#include <caf/scheduler/test_coordinator.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "tune/core/json_text.hpp"
#include "watcher.hpp"
#include "deterministic.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
using start_atom = caf::atom_constant<caf::atom("tteststart")>;

// What the owner heard, in order ("event started", "results 2", "ended signal 15", ...).
struct owner_log {
  std::vector<std::string> heard;
  bool ended = false;
  wire::wire_trial_end end;
};

caf::behavior owner(caf::event_based_actor*, std::shared_ptr<owner_log> log) {
  return {
      [=](wire::trial_started_atom, const std::string&, const wire::wire_trial_started&) {
        log->heard.push_back("event started");
      },
      [=](wire::trial_checkpoint_atom, const std::string&, const wire::wire_checkpoint&) {
        log->heard.push_back("event checkpoint");
      },
      [=](wire::trial_done_atom, const std::string&, const std::string&) { log->heard.push_back("event done"); },
      [=](wire::trial_joined_atom, const std::string&) { log->heard.push_back("event joined"); },
      [=](wire::trial_results_atom, const std::string&, const wire::wire_results& r) {
        log->heard.push_back("results " + std::to_string(r.rows()));
      },
      [=](wire::trial_result_atom, const std::string&, const wire::wire_result&) { log->heard.push_back("result"); },
      [=](wire::trial_node_atom, const std::string&, const caf::actor&, const std::string&) { log->heard.push_back("node"); },
      [=](wire::trial_ended_atom, const std::string&, const wire::wire_trial_end& end) {
        log->ended = true;
        log->end = end;
        log->heard.push_back("ended " + end.exit);
      },
  };
}

// Plays the node: starts the trial with its response promise (as node/trials.cpp does).
caf::behavior starter(caf::event_based_actor* self, trial_options opt) {
  return {[=](start_atom) mutable {
    auto rp = self->make_response_promise();
    opt.started = rp;
    opt.node = caf::actor_cast<node_iface>(self);
    spawn_trial(self, opt);
    return rp;
  }};
}

struct TrialActorTest : ::testing::Test {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("trial_actor_test_" + std::to_string(::getpid()));
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  std::shared_ptr<owner_log> log = std::make_shared<owner_log>();
  caf::actor own = sys.spawn(owner, log);
  caf::actor node;
  caf::actor trial;

  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override {
    for (auto& a : {node, own})
      if (a) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched.run();
    std::filesystem::remove_all(dir);
  }

  // Runs the actors until `done` (what the watcher and the worker do comes in its own
  // time): false after 10 s.
  bool run_until(const std::function<bool()>& done) {
    for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
      sched.run();
      if (done()) return true;
      std::this_thread::sleep_for(2ms);
    }
    return false;
  }

  // The results the owner heard.
  int rows() const {
    int n = 0;
    for (auto& h : log->heard)
      if (h.rfind("results ", 0) == 0) n += std::stoi(h.substr(8));
    return n;
  }

  // Runs the actors for a while (the worker and the watcher go on meanwhile).
  void settle(std::chrono::milliseconds d) {
    for (auto until = std::chrono::steady_clock::now() + d; std::chrono::steady_clock::now() < until;) {
      sched.run();
      std::this_thread::sleep_for(2ms);
    }
  }

  // Starts `script` (sh -c) as a program trial with an owner: the start's (ok, text).
  std::pair<bool, std::string> start(const std::string& script, bool with_owner = true) {
    trial_options o;
    o.spec.trial_id = "t1";
    o.spec.command = {"/bin/sh", "-c", script};
    o.node_id = "n1";
    o.trial_dir = dir.string();
    o.base_env = {{"PATH", "/usr/bin:/bin"}};
    if (with_owner) o.owner = caf::actor_cast<trial_events_iface>(own);
    node = sys.spawn(starter, o);
    // The start's answer comes once the worker runs: asked by an actor of its own, so
    // that the test never blocks on it.
    auto answer = std::make_shared<std::optional<std::pair<bool, std::string>>>();
    auto who = std::make_shared<caf::actor>();
    sys.spawn([node = node, answer, who](caf::event_based_actor* self) {
      self->request(node, caf::infinite, start_atom::value)
          .then([=](wire::trial_start_atom, wire::wire_trial_started& started, caf::actor& a) {
                  *answer = std::make_pair(true, json_text(wire::to_json(started)));
                  *who = a;
                },
                [=](caf::error& err) {
                  *answer = std::make_pair(false, wire::is_refusal(err) ? wire::refusal_reason(err) : to_string(err));
                });
    });
    std::pair<bool, std::string> out{false, "no answer"};
    if (run_until([&] { return answer->has_value(); })) out = **answer;
    trial = *who;
    return out;
  }
};

const std::string two_reports =
    R"(echo '{"type":"result","iteration":1,"metrics":{"loss":0.5}}' >&3; )"
    R"(echo '{"type":"result","iteration":2,"metrics":{"loss":0.25}}' >&3)";

TEST_F(TrialActorTest, ItsReportsReachItsOwnerInOrderAfterTheGreeting) {
  auto [ok, text] = start(two_reports);
  ASSERT_TRUE(ok) << text;
  EXPECT_NE(text.find("\"pid\""), std::string::npos) << text;
  // Nothing goes out before the owner's first greeting: the trial ends, and waits.
  settle(500ms);
  EXPECT_TRUE(log->heard.empty()) << "not greeted yet";
  caf::anon_send(trial, wire::route_atom::value, uint64_t{0});
  sched.run();  // the greeting is not from its owner: nothing
  EXPECT_TRUE(log->heard.empty());
  caf::send_as(own, trial, wire::route_atom::value, uint64_t{0});
  ASSERT_TRUE(run_until([&] { return log->ended; }));
  ASSERT_GE(log->heard.size(), 4u);
  EXPECT_EQ(log->heard[0], "node") << "where its checkpoints are read, first";
  EXPECT_EQ(log->heard[1], "event started");
  EXPECT_EQ(rows(), 2);
  EXPECT_EQ(log->heard.back(), "ended exit code 0");
  EXPECT_TRUE(log->end.ok);
}

TEST_F(TrialActorTest, AStopIsATermThenAKillOnceItsGraceIsOver) {
  auto [ok, text] = start("trap '' TERM; " R"(echo '{"type":"result","metrics":{"loss":1}}' >&3; )"
                          "while :; do sleep 0.05; done");
  ASSERT_TRUE(ok) << text;
  caf::send_as(own, trial, wire::route_atom::value, uint64_t{0});
  ASSERT_TRUE(run_until([&] { return rows() == 1; })) << "its TERM trap is set once it reports";
  auto asked = std::chrono::steady_clock::now();
  caf::send_as(own, trial, wire::trial_stop_atom::value, int64_t{300});
  ASSERT_TRUE(run_until([&] { return log->ended; }));
  auto took = std::chrono::steady_clock::now() - asked;
  EXPECT_EQ(log->end.exit, "killed by signal 9 (Killed)") << "it ignored the TERM: killed when the grace was over";
  EXPECT_TRUE(log->end.stopped);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 3s) << "the watcher blocks until the grace's deadline, not longer";
}

TEST_F(TrialActorTest, AKillEndsItAtOnce) {
  auto [ok, text] = start("while :; do sleep 0.05; done");
  ASSERT_TRUE(ok) << text;
  caf::send_as(own, trial, wire::route_atom::value, uint64_t{0});
  sched.run();
  auto asked = std::chrono::steady_clock::now();
  caf::send_as(own, trial, wire::trial_kill_atom::value);
  ASSERT_TRUE(run_until([&] { return log->ended; }));
  EXPECT_EQ(log->end.exit, "killed by signal 9 (Killed)");
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 2s);
}

TEST_F(TrialActorTest, HeldItKeepsWhatItSaysAndSendsWhatTheOwnerMissedWhenGreeted) {
  auto [ok, text] = start(two_reports + "; sleep 0.3; " + two_reports);
  ASSERT_TRUE(ok) << text;
  caf::send_as(own, trial, wire::route_atom::value, uint64_t{0});
  ASSERT_TRUE(run_until([&] { return rows() == 2; }));  // the first two reports, before its pause
  auto before = log->heard.size();
  caf::send_as(node, trial, trial_hold_atom::value);  // the node lost the head
  sched.run();
  settle(600ms);  // the rest is written, and the trial ends
  EXPECT_EQ(log->heard.size(), before) << "held: nothing goes out";
  caf::send_as(own, trial, wire::route_atom::value, uint64_t{before});
  ASSERT_TRUE(run_until([&] { return log->ended; }));
  EXPECT_EQ(rows(), 4) << "every report once, none twice";
}

TEST_F(TrialActorTest, AProgramThatFailsEndsTheTrialInError) {
  auto [ok, text] = start("exec /nonexistent/program");
  // sh itself starts; the program it execs fails: the trial ends in error, not the start.
  ASSERT_TRUE(ok) << text;
  caf::send_as(own, trial, wire::route_atom::value, uint64_t{0});
  ASSERT_TRUE(run_until([&] { return log->ended; }));
  EXPECT_FALSE(log->end.ok);
}

TEST(ControlChannel, CommandsArriveInOrderAndWakeTheWatcher) {
  auto c = control_channel::make();
  ASSERT_TRUE(c) << c.error().message();
  auto& ch = **c;
  pollfd p{ch.fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "nothing posted: quiet";
  std::thread other([&] {
    ch.post(control_channel::kind::stop, 250);
    ch.post(control_channel::kind::hold, 1);
  });
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "a post wakes a thread blocked on it";
  other.join();
  auto got = ch.take();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].what, control_channel::kind::stop);
  EXPECT_EQ(got[0].value, 250);
  EXPECT_EQ(got[1].what, control_channel::kind::hold);
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "taken: quiet again";
  EXPECT_TRUE(ch.take().empty());
  ch.post(control_channel::kind::hold, 1, false);
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "a hold waits for the thread's next turn";
  EXPECT_EQ(ch.take().size(), 1u);
}

TEST(ControlChannel, HandledLinesWakeTheThreadOnlyWhenItMayReadAgain) {
  auto c = control_channel::make();
  ASSERT_TRUE(c) << c.error().message();
  auto& ch = **c;
  pollfd p{ch.fd(), POLLIN, 0};
  ch.lines_sent(100);
  ch.lines_handled(60);
  EXPECT_FALSE(ch.too_many_lines());
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "it was not held up: no wake";
  ch.lines_sent(control_channel::max_lines_in_flight);
  EXPECT_TRUE(ch.too_many_lines());
  ch.lines_handled(20);
  EXPECT_TRUE(ch.too_many_lines());
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "still too many: no wake";
  ch.lines_handled(100);
  EXPECT_FALSE(ch.too_many_lines());
  EXPECT_EQ(::poll(&p, 1, 0), 1) << "it may read again: woken";
  EXPECT_TRUE(ch.take().empty()) << "a wake, no command";
}

}  // namespace
}  // namespace tune
