// The controller on CAF's deterministic scheduler: a head played by the test (it
// answers the controller's requests and starts puppet trials the test speaks through),
// the real engine and store, simulated time; no processes, no network.
#include "controller.hpp"

#include <gtest/gtest.h>

#include <caf/scheduler/test_coordinator.hpp>
#include <filesystem>
#include <memory>

#include "wire.hpp"
#include "deterministic.hpp"

namespace tune {
namespace {

using namespace std::chrono_literals;
using speak_atom = caf::atom_constant<caf::atom("tspeak")>;
const std::string token = "0123456789abcdef0123456789abcdef";

// What the head saw and the puppets heard.
struct cluster_log {
  std::vector<wire::wire_group_spec> created;
  std::vector<std::string> removed;
  std::map<std::string, std::vector<caf::actor>> trials;  // trial id -> its puppets, in order
  std::set<std::string> not_ready;                        // groups whose wait says "pending"
  std::map<caf::actor_addr, std::string> heard;           // what each puppet was last told
  int groups = 0;
};
using log_ptr = std::shared_ptr<cluster_log>;

// A trial's actor as the test plays it: says what the test gives it (speak_atom) to
// its owner; ends cleanly when asked to stop; remembers a kill.
caf::behavior puppet(caf::event_based_actor* self, caf::actor owner, std::string id, log_ptr log) {
  return {
      // The test names trials by their ids; on the wire they are <id>@<run key>.
      [=](speak_atom, caf::message& m) {
        if (m.size() > 1 && m.match_element<std::string>(1) && m.get_as<std::string>(1) == id.substr(0, id.rfind('@')))
          m.get_mutable_as<std::string>(1) = id;
        self->send(owner, std::move(m));
      },
      [=](wire::trial_stop_atom, int64_t) {
        log->heard[self->address()] = "stop";
        wire::wire_trial_end end;
        end.ok = true;
        end.stopped = true;
        end.exit = "signal 15";
        self->send(owner, wire::trial_ended_atom::value, id, end);
      },
      [=](wire::trial_kill_atom) { log->heard[self->address()] = "kill"; },
      [=](wire::route_atom, uint64_t) {},
      [=](wire::trial_ack_atom, uint64_t) {},
  };
}

caf::behavior fake_head(caf::event_based_actor* self, log_ptr log) {
  return {
      [=](wire::subscribe_atom, const std::string&) { return caf::make_message(wire::subscribe_atom::value, std::string{}); },
      [=](wire::pg_create_atom, const std::string&, const std::string&, const wire::wire_group_spec& spec) {
        log->created.push_back(spec);
        auto id = spec.id.empty() ? "g" + std::to_string(++log->groups) : spec.id;
        // As a head: a group not placed within the create's ready wait is answered pending.
        bool placed = !log->not_ready.count(id);
        return caf::make_message(wire::pg_create_atom::value, id, std::string{placed ? "created" : "pending"},
                                 std::string{});
      },
      [=](wire::pg_wait_atom, const std::string&, const std::string& group, int64_t) {
        bool ready = !log->not_ready.count(group);
        return caf::make_message(wire::pg_wait_atom::value, ready, std::string{ready ? "created" : "pending"},
                                 std::string{ready ? "" : "no node has room"});
      },
      [=](wire::trial_start_atom, const std::string&, const wire::wire_trial_spec& spec, const caf::actor&) {
        auto owner = caf::actor_cast<caf::actor>(self->current_sender());
        auto p = self->spawn(puppet, owner, spec.trial_id, log);
        log->trials[spec.trial_id.substr(0, spec.trial_id.rfind('@'))].push_back(p);
        wire::wire_trial_started info;
        info.trial_id = spec.trial_id;
        info.node = "n1";
        info.pid = 4711;
        return wire::start_answer(std::move(info), p);
      },
      [=](wire::pg_remove_atom, const std::string&, const std::string& group) { log->removed.push_back(group); },
      [=](wire::board_atom, const std::string&, const std::string&) {},
      [=](wire::route_atom, const std::string&, const std::string&, uint32_t, const std::string&, uint64_t) {},
      [=](wire::rebalance_atom, const std::string&) {},
  };
}

wire::wire_results results(std::initializer_list<std::pair<int64_t, double>> rows) {
  wire::wire_results r;
  r.names = {"acc"};
  for (auto& [it, v] : rows) {
    r.iterations.push_back(it);
    r.add(v);
  }
  return r;
}

struct ControllerTest : ::testing::Test {
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  log_ptr log = std::make_shared<cluster_log>();
  caf::actor head = sys.spawn(fake_head, log);
  std::string dir = (std::filesystem::temp_directory_path() / ("controller_test." + std::to_string(::getpid()))).string();
  std::unique_ptr<search_algorithm> search;
  std::unique_ptr<trial_scheduler> scheduler;
  std::unique_ptr<experiment_engine> engine;
  std::unique_ptr<experiment_store> store;
  std::optional<expected<experiment_summary>> done;
  caf::actor controller;

  void start(int samples, engine_options eo = {}, experiment_run_options ro = {}) {
    std::filesystem::remove_all(dir);
    eo.metric = "acc";
    eo.max_concurrent = std::max(eo.max_concurrent, 2);
    search = std::move(make_random_search({{"x", uniform(0, 1)}}, {.num_samples = samples, .seed = 1})).value();
    scheduler = std::move(make_scheduler(fifo{}, "acc", mode::max)).value();
    engine = std::move(experiment_engine::make(*search, *scheduler, eo)).value();
    store = std::move(experiment_store::open(dir)).value();
    controller_setup s;
    s.head = caf::actor_cast<head_iface>(head);
    s.token = token;
    s.programs = head;  // not asked: no trial restores from a copy here
    s.engine = engine.get();
    s.store = store.get();
    ro.bundles = {resource_set{}.set_cpu(quantity::whole(1))};
    ro.progress_every = 0ms;
    s.options = ro;
    s.own_thread = false;
    s.on_done = [this](expected<experiment_summary> out) { done = std::move(out); };
    controller = spawn_controller(sys, std::move(s));
    sched.run();
  }
  void TearDown() override {
    caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
    if (!done) caf::anon_send_exit(controller, caf::exit_reason::user_shutdown);
    for (auto& [id, puppets] : log->trials)
      for (auto& p : puppets) caf::anon_send_exit(p, caf::exit_reason::user_shutdown);
    sched.run();
    std::filesystem::remove_all(dir);
  }
  caf::actor trial(const std::string& id, size_t n = 0) {
    auto& v = log->trials[id];
    return n < v.size() ? v[n] : caf::actor{};
  }
  template <class... Ts>
  void say(const caf::actor& who, Ts&&... xs) {
    caf::anon_send(who, speak_atom::value, caf::make_message(std::forward<Ts>(xs)...));
    sched.run();
  }
  void end(const caf::actor& who, const std::string& id, bool ok = true, std::string error = "") {
    wire::wire_trial_end e;
    e.ok = ok;
    e.error = std::move(error);
    e.exit = ok ? "exit 0" : "exit 1";
    say(who, wire::trial_ended_atom::value, id, e);
  }
  // Simulated time passes (the controller's flush ticks every 50 ms).
  void pass(std::chrono::milliseconds d) {
    for (auto left = d; left > 0ms; left -= 50ms) {
      sched.advance_time(std::min(left, std::chrono::milliseconds(50)));
      sched.run();
    }
  }
  trial_state state(const std::string& id) { return engine->trials().at(id).state; }
  std::vector<std::string> events(const std::string& id) {
    std::vector<std::string> out;
    // Held here: a range-for over store->events(id).value() would run over a vector inside
    // a temporary destroyed before the loop (C++20 does not extend its lifetime).
    auto rows = store->events(id).value();
    for (auto& e : rows) out.push_back(e.kind);
    return out;
  }
};

TEST_F(ControllerTest, RunsItsTrialsToTheirEndAndStoresWhatTheyReported) {
  start(2);
  ASSERT_EQ(log->created.size(), 2u);
  ASSERT_TRUE(trial("trial-00001") && trial("trial-00002"));
  say(trial("trial-00001"), wire::trial_results_atom::value, std::string{"trial-00001"}, results({{1, 0.5}, {2, 0.6}}));
  say(trial("trial-00001"), wire::trial_result_atom::value, std::string{"trial-00001"},
      wire::wire_result{3, R"({"acc":0.7,"note":"text"})", 0});
  end(trial("trial-00001"), "trial-00001");
  say(trial("trial-00002"), wire::trial_results_atom::value, std::string{"trial-00002"}, results({{1, 0.2}}));
  end(trial("trial-00002"), "trial-00002");
  pass(100ms);
  ASSERT_TRUE(done && *done) << (done ? done->error().message() : "not done");
  EXPECT_EQ((*done)->trials, 2);
  EXPECT_EQ((*done)->terminated, 2);
  EXPECT_EQ((*done)->results, 4);
  EXPECT_EQ(log->removed.size(), 2u) << "every group given back";
  auto rows = store->trials().value();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].state, "terminated");
  EXPECT_EQ(rows[0].info.value("node", ""), "n1");
  EXPECT_EQ(events("trial-00001").back(), "ended");
}

TEST_F(ControllerTest, AGroupThatIsNotPlacedInTimeFailsItsTrialAndTheRestRunOn) {
  log->not_ready.insert("g1");
  start(2);
  EXPECT_EQ(state("trial-00001"), "error");
  EXPECT_EQ(engine->trials().at("trial-00001").error, "placement group g1 is pending: no node has room");
  EXPECT_EQ(log->removed, std::vector<std::string>{"g1"});
  say(trial("trial-00002"), wire::trial_results_atom::value, std::string{"trial-00002"}, results({{1, 0.2}}));
  end(trial("trial-00002"), "trial-00002");
  pass(100ms);
  ASSERT_TRUE(done && *done);
  EXPECT_EQ((*done)->errored, 1);
  EXPECT_EQ((*done)->terminated, 1);
}

TEST_F(ControllerTest, ATrialWhoseNodeDiesIsLostStartedAgainAndItsOldActorIsKilledWhenItSpeaks) {
  engine_options eo;
  eo.max_failures = 1;
  start(1, eo);
  auto first = trial("trial-00001");
  say(first, wire::trial_results_atom::value, std::string{"trial-00001"}, results({{1, 0.5}}));
  caf::anon_send(controller, wire::node_event_atom::value, std::string{"n1"}, std::string{"dead"}, std::string{"silent"});
  sched.run();
  EXPECT_FALSE(trial("trial-00001", 1)) << "not lost before the grace";
  pass(250ms);
  auto second = trial("trial-00001", 1);
  ASSERT_TRUE(second) << "started again (max_failures 1)";
  say(first, wire::trial_results_atom::value, std::string{"trial-00001"}, results({{2, 0.9}}));
  EXPECT_EQ(log->heard[first.address()], "kill");
  EXPECT_EQ(engine->trials().at("trial-00001").iteration, 1) << "the lost actor's result is not heard";
  say(second, wire::trial_results_atom::value, std::string{"trial-00001"}, results({{2, 0.6}}));
  end(second, "trial-00001");
  pass(100ms);
  ASSERT_TRUE(done && *done);
  EXPECT_EQ((*done)->terminated, 1);
  EXPECT_EQ(engine->trials().at("trial-00001").failures, 1);
  auto ev = events("trial-00001");
  EXPECT_NE(std::find(ev.begin(), ev.end(), "restart"), ev.end());
}

TEST_F(ControllerTest, TheTimeBudgetStopsTheTrialsInSimulatedTime) {
  engine_options eo;
  eo.time_budget_s = 60;
  start(2, eo);
  say(trial("trial-00001"), wire::trial_results_atom::value, std::string{"trial-00001"}, results({{1, 0.5}}));
  pass(59s);
  EXPECT_FALSE(done);
  EXPECT_EQ(log->heard.size(), 0u);
  pass(2s);
  ASSERT_TRUE(done && *done) << "stopped at the budget";
  EXPECT_EQ(log->heard[trial("trial-00001").address()], "stop");
  EXPECT_EQ(log->heard[trial("trial-00002").address()], "stop");
  EXPECT_GE((*done)->wall_s, 60.0);
  EXPECT_LT((*done)->wall_s, 61.5) << "the controller's clock is the actor system's";
}

TEST_F(ControllerTest, AMoveStopsTheTrialAndStartsItAgainOffItsNode) {
  experiment_run_options ro;
  ro.min_move_interval = 1s;
  start(1, {}, ro);
  auto first = trial("trial-00001");
  say(first, wire::trial_results_atom::value, std::string{"trial-00001"}, results({{1, 0.5}}));
  caf::send_as(head, controller, wire::pg_move_atom::value, std::string{"g1"}, std::vector<std::string>{"n1"},
               std::string{"rebalance"});
  sched.run();
  EXPECT_EQ(log->heard[first.address()], "stop");
  ASSERT_EQ(log->created.size(), 2u);
  EXPECT_EQ(log->created[1].avoid, std::vector<std::string>{"n1"});
  auto second = trial("trial-00001", 1);
  ASSERT_TRUE(second);
  EXPECT_EQ(state("trial-00001"), "running") << "a move is not an end";
  end(second, "trial-00001");
  pass(100ms);
  ASSERT_TRUE(done && *done);
  auto ev = events("trial-00001");
  EXPECT_NE(std::find(ev.begin(), ev.end(), "moved_out"), ev.end());
}

TEST_F(ControllerTest, MessagesFromAnActorThatIsNotTheTrialsAreNotHeard) {
  start(1);
  auto stranger = sys.spawn(puppet, controller, std::string{"trial-00001"}, log);
  say(stranger, wire::trial_results_atom::value, std::string{"trial-00001"}, results({{1, 0.9}}));
  say(trial("trial-00001"), wire::trial_results_atom::value, std::string{"trial-00001"}, results({{1, 0.1}}));
  say(stranger, wire::trial_results_atom::value, std::string{"trial-00001"}, results({{2, 0.9}}));
  EXPECT_EQ(engine->trials().at("trial-00001").value, 0.1);
  say(stranger, wire::trial_results_atom::value, std::string{"trial-00009"}, results({{1, 0.9}}));  // not ours
  end(trial("trial-00001"), "trial-00001");
  pass(100ms);
  ASSERT_TRUE(done && *done);
  EXPECT_EQ((*done)->results, 1);
  caf::anon_send_exit(stranger, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace tune
