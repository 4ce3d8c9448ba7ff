// Experiments end to end on a cluster of processes (a head and a node with logical
// GPUs): the engine's decisions carried out, the store matching what happened.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "controller/controller.hpp"
#include "trial_cluster.hpp"
#include "tune/trial/sha256.hpp"
#include "tune/tuner/export.hpp"

namespace tune::test {
namespace {

using namespace std::chrono_literals;

std::string worker_binary() { return built_or_moved("TRIAL_WORKER", TRIAL_WORKER); }

class ExperimentTest : public trial_cluster_test {
 protected:
  std::unique_ptr<experiment_store> store;
  void SetUp() override {
    start_cluster({"--num-gpus", "2"}, worker_binary());
    auto s = experiment_store::open(files.dir() + "/experiment");
    ASSERT_TRUE(s) << s.error().message();
    store = std::move(s).value();
  }
  experiment_summary run(scheduler_spec spec, int samples, int concurrent, int64_t iterations,
                         resource_set bundle = *resource_set::make({{"gpu", 0.5}}), program_ref* trainable = nullptr) {
    search_space space{{"mode", "curve"}, {"x", uniform(0.1, 1.0)}, {"iterations", iterations}, {"sleep_ms", 20}};
    auto search = make_random_search(space, {.num_samples = samples, .seed = 11});
    EXPECT_TRUE(search);
    auto sched = make_scheduler(spec, "acc", mode::max);
    EXPECT_TRUE(sched) << sched.error().message();
    engine_options eo;
    eo.metric = "acc";
    eo.max_concurrent = concurrent;
    eo.max_failures = max_failures;
    auto engine = experiment_engine::make(**search, **sched, eo);
    EXPECT_TRUE(engine) << engine.error().message();
    experiment_run_options ro;
    ro.name = "test";
    ro.program = trainable ? *trainable : program;
    ro.group_timeout = 5000ms;
    ro.bundles = {bundle};
    ro.stop_grace = 3000ms;
    ro.auto_rebalance = auto_rebalance;
    ro.on_progress = [&](const progress_snapshot& s) {
      snapshots.push_back(s);
      if (std::getenv("EXP_DEBUG")) std::cerr << render_progress(s);  // to watch it run
    };
    auto sum = run_experiment(*client, **engine, *store, ro);
    EXPECT_TRUE(sum) << sum.error().message();
    engine_trials = (*engine)->trials();
    return sum ? *sum : experiment_summary{};
  }
  std::vector<progress_snapshot> snapshots;
  std::map<std::string, engine_trial> engine_trials;
  int max_failures = 0;
  bool auto_rebalance = false;

  // The experiment folder's checkpoint copies: for every trial that reported one, at
  // most the two newest, each complete (MANIFEST.json) and matching its hashes.
  void expect_checkpoint_copies() {
    int copies = 0;
    for (auto& [id, t] : engine_trials) {
      auto dir = store->checkpoint_dir(id);
      if (t.checkpoint < 0) continue;
      ASSERT_TRUE(std::filesystem::is_directory(dir)) << id << " reported checkpoints and has no copy";
      int kept = 0;
      for (auto& c : std::filesystem::directory_iterator(dir)) {
        EXPECT_EQ(c.path().extension(), "") << "a copy left unfinished: " << c.path();
        std::ifstream in(c.path() / "MANIFEST.json");
        auto m = nlohmann::json::parse(in, nullptr, false);
        ASSERT_TRUE(m.is_object()) << c.path();
        for (auto& f : m["files"]) {
          auto sha = sha256_file((c.path() / f["name"].get<std::string>()).string());
          ASSERT_TRUE(sha);
          EXPECT_EQ(*sha, f["sha256"]) << c.path();
        }
        ++kept;
      }
      copies += kept;
      // Every checkpoint it reported has its copy (the default rule keeps every one); the
      // newest copy is the trial's last checkpoint.
      std::string history;  // its checkpoint events, should this fail
      std::set<int64_t> reported;
      if (auto ev = store->events(id))
        for (auto& e : *ev) {
          if (e.kind == "checkpoint") reported.insert(e.body.value("iteration", int64_t{-1}));
          if (e.kind.find("checkpoint") != std::string::npos || e.kind == "ended" || e.kind == "stop" || e.kind == "pause")
            history += "\n  " + e.kind + " " + e.body.dump().substr(0, 160);
        }
      EXPECT_EQ(static_cast<size_t>(kept), reported.size()) << id << history;
      EXPECT_TRUE(std::filesystem::exists(dir + "/" + std::to_string(t.checkpoint) + "/MANIFEST.json")) << id << history;
    }
    EXPECT_GT(copies, 0);
  }

  // Whether the store has an event of this kind for trial `id`.
  bool has_event(const std::string& id, const std::string& kind) {
    auto events = store->events(id);
    EXPECT_TRUE(events);
    if (!events) return false;
    return std::any_of(events->begin(), events->end(), [&](const event_row& e) { return e.kind == kind; });
  }

  // Trial `id` has results for iterations 1..n, each once.
  void expect_every_iteration_once(const std::string& id, size_t n) {
    auto results = store->results(id);
    ASSERT_TRUE(results);
    ASSERT_EQ(results->size(), n) << id << ": every iteration stored once";
    for (size_t i = 0; i < results->size(); ++i) EXPECT_EQ((*results)[i].iteration, static_cast<int64_t>(i) + 1) << id;
  }

  // Every stored trial ended in error, its error saying `because`; the trials.
  std::vector<trial_row> all_failed_with(const std::string& because) {
    auto trials = store->trials();  // kept: a loop over a temporary's value dangles
    EXPECT_TRUE(trials);
    if (!trials) return {};
    for (auto& t : *trials) {
      EXPECT_EQ(t.state, "error") << t.id;
      EXPECT_NE(t.error.find(because), std::string::npos) << t.error;
    }
    return *trials;
  }
};

TEST_F(ExperimentTest, AshaStopsSomeTrialsAndTheStoreHoldsEveryResult) {
  auto sum = run(asha{.max_t = 9, .grace_period = 1, .reduction_factor = 3, .brackets = 1}, 6, 2, 9);
  EXPECT_EQ(sum.trials, 6);
  EXPECT_EQ(sum.terminated, 6);
  EXPECT_EQ(sum.errored, 0);
  auto trials = store->trials();
  ASSERT_TRUE(trials);
  ASSERT_EQ(trials->size(), 6u);
  int64_t iterations = 0;
  for (auto& t : *trials) {
    EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
    auto results = store->results(t.id);
    ASSERT_TRUE(results);
    EXPECT_EQ(static_cast<int64_t>(results->size()), engine_trials.at(t.id).iteration)
        << t.id << ": every result the trial reported is stored, once";
    iterations += static_cast<int64_t>(results->size());
    EXPECT_TRUE(t.info.contains("pid") && t.info.contains("node")) << t.info.dump();
  }
  EXPECT_EQ(sum.results, iterations);
  EXPECT_LT(iterations, 6 * 9) << "ASHA stopped nobody";
  auto best = find_best(*store, "acc", mode::max);
  ASSERT_TRUE(best && *best);
  double top_x = 0;
  for (auto& t : *trials) top_x = std::max(top_x, t.config["x"].get<double>());
  EXPECT_DOUBLE_EQ((*best)->config["x"].get<double>(), top_x) << "the best x runs to the end";
  EXPECT_FALSE(snapshots.empty());
}

TEST_F(ExperimentTest, HyperBandPausesAndResumesTrialsFromTheirCheckpoints) {
  auto sum = run(hyperband{.max_t = 9, .reduction_factor = 3, .brackets = 1}, 9, 3, 9);
  EXPECT_EQ(sum.errored, 0);
  int resumed = 0;
  for (auto& [id, t] : engine_trials) {
    EXPECT_TRUE(t.state == "terminated") << id << " " << t.state;
    if (t.starts > 1) {
      ++resumed;
      // Resumed from its checkpoint: its iterations go on, none repeated.
      auto results = store->results(id);
      ASSERT_TRUE(results);
      for (size_t i = 0; i < results->size(); ++i) EXPECT_EQ((*results)[i].iteration, static_cast<int64_t>(i) + 1) << id;
      auto tr = store->trial(id);
      EXPECT_TRUE(tr->info.contains("restored_from")) << tr->info.dump();
    }
  }
  EXPECT_GT(resumed, 0) << "nobody was paused and resumed";
  expect_checkpoint_copies();
}

// Two nodes of one card each and trials of a whole card: a paused trial resumes on
// whichever node is free, from its own folder there or from the experiment's copy.
TEST_F(ExperimentTest, PausedTrialsResumeOnAnyNodeFromTheExperimentsCopies) {
  auto second = files.tune({"start", "--address", address, "--num-gpus", "2"});
  ASSERT_EQ(second.rc, 0) << second.out << second.err;
  auto sum = run(hyperband{.max_t = 9, .reduction_factor = 3, .brackets = 1}, 9, 4, 9, *resource_set::make({{"gpu", 1}}));
  EXPECT_EQ(sum.errored, 0);
  int resumed = 0, from_copy = 0;
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    auto results = store->results(id);
    ASSERT_TRUE(results);
    for (size_t i = 0; i < results->size(); ++i) EXPECT_EQ((*results)[i].iteration, static_cast<int64_t>(i) + 1) << id;
    if (t.starts < 2) continue;
    ++resumed;
    auto tr = store->trial(id);
    ASSERT_TRUE(tr->info.contains("restored_from")) << tr->info.dump();
    from_copy += tr->info["restored_from"].get<std::string>().find("/restore/") != std::string::npos;
  }
  EXPECT_GT(resumed, 0) << "nobody was paused and resumed";
  std::cerr << resumed << " resumed, the last start of " << from_copy << " from a copy\n";
  expect_checkpoint_copies();
}

TEST_F(ExperimentTest, TrialsWaitingForRoomDoNotHoldUpTheOthers) {
  // Three trials at once, room for two: the third one's group waits until a running
  // trial's end is handled and its card given back. A controller that blocked on the
  // waiting group would never handle that end (every trial would time out but two).
  auto sum = run(fifo{}, 6, 3, 8, *resource_set::make({{"gpu", 1}}));
  EXPECT_EQ(sum.trials, 6);
  EXPECT_EQ(sum.terminated, 6);
  EXPECT_EQ(sum.results, 6 * 8);
  auto trials = store->trials();
  ASSERT_TRUE(trials);
  for (auto& t : *trials) EXPECT_EQ(t.state, "terminated") << t.id << ": " << t.error;
  // The first trials started at once on a node without the program: one fetch for all.
  std::ifstream log(files.dir() + "/" + node_id + ".log");
  std::string all((std::istreambuf_iterator<char>(log)), {});
  size_t fetched = 0;
  for (size_t p = all.find(") fetched"); p != std::string::npos; p = all.find(") fetched", p + 1)) ++fetched;
  EXPECT_EQ(fetched, 1u) << all;
}

TEST_F(ExperimentTest, TrialsOfANodeThatDiesEndInErrorAndTheExperimentEnds) {
  // SIGKILL the node while its trials run: no "ended" will ever come; the controller
  // notices their actors are gone and, once no late event has ended them, records
  // them as lost (moving them to other nodes is issue 7).
  std::thread killer([&] {
    std::this_thread::sleep_for(1500ms);
    ::kill(node_pid, SIGKILL);
  });
  auto sum = run(fifo{}, 2, 2, 400);
  killer.join();
  EXPECT_EQ(sum.trials, 2);
  EXPECT_EQ(sum.errored, 2);
  for (auto& t : all_failed_with("its node was lost")) {
    auto results = store->results(t.id);
    ASSERT_TRUE(results);
    EXPECT_GT(results->size(), 0u) << "what it reported before is kept";
  }
}

// Kill -9 a node mid-experiment: its trials start again on the other node, from the
// experiment's copies of their checkpoints, and every trial completes; every iteration
// is stored once.
TEST_F(ExperimentTest, TrialsOfAKilledNodeResumeElsewhereFromTheirCheckpoints) {
  auto second = files.tune({"start", "--address", address, "--num-gpus", "2"});
  ASSERT_EQ(second.rc, 0) << second.out << second.err;
  max_failures = 2;
  std::thread killer([&] {
    std::this_thread::sleep_for(1500ms);
    ::kill(node_pid, SIGKILL);
  });
  // 4 trials of 150 iterations (20 ms each), a card each: 2 on each node.
  auto sum = run(fifo{}, 4, 4, 150, *resource_set::make({{"gpu", 1}}));
  killer.join();
  EXPECT_EQ(sum.trials, 4);
  EXPECT_EQ(sum.terminated, 4);
  EXPECT_EQ(sum.errored, 0);
  int restarted = 0;
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    expect_every_iteration_once(id, 150);
    if (t.failures == 0) continue;
    ++restarted;
    auto events = store->events(id);
    ASSERT_TRUE(events);
    bool restart_event = false;
    for (auto& e : *events) restart_event = restart_event || e.kind == "restart";
    EXPECT_TRUE(restart_event) << id;
    auto tr = store->trial(id);
    ASSERT_TRUE(tr);
    EXPECT_NE(tr->info.value("restored_from", "").find("/restore/"), std::string::npos)
        << id << " resumed from the experiment's copy: " << tr->info.dump();
  }
  EXPECT_GE(restarted, 1) << "the killed node ran none of the trials";
}

// Freeze a node (SIGSTOP) mid-experiment: it is declared dead and its trials start
// again (here on the same node once it is back: the other one is full); when it is
// thawed and joins again, the head takes back the bundles it held, and its stale trials
// are killed at once, before their restarts run in the same folders. Every iteration
// is stored once.
TEST_F(ExperimentTest, AFrozenNodeThatComesBackDoesNotRunItsOldTrialsTwice) {
  auto second = files.tune({"start", "--address", address, "--num-gpus", "4"});
  ASSERT_EQ(second.rc, 0) << second.out << second.err;
  max_failures = 2;
  std::set<std::string> frozen_nodes_workers, still_running;
  std::thread freezer([&] {
    std::this_thread::sleep_for(1500ms);
    if (node_pid > 0) ::kill(node_pid, SIGSTOP);  // never 0: this test's own process group
    std::this_thread::sleep_for(5000ms);  // declared dead after 3 s of silence
    frozen_nodes_workers = workers_of_node(node_id);
    ::kill(node_pid, SIGCONT);
    std::this_thread::sleep_for(2000ms);
    for (auto& pid : workers_of_node(node_id))
      if (frozen_nodes_workers.count(pid)) still_running.insert(pid);
  });
  // 6 trials of 500 iterations (20 ms each), a card each: 2 on the first node, 4 on
  // the second.
  auto sum = run(fifo{}, 6, 6, 500, *resource_set::make({{"gpu", 1}}));
  freezer.join();
  EXPECT_EQ(sum.trials, 6);
  EXPECT_EQ(sum.terminated, 6);
  EXPECT_GE(frozen_nodes_workers.size(), 2u) << "the frozen node's trials went on running while it was frozen";
  EXPECT_TRUE(still_running.empty()) << "2 s after the thaw, the node still runs " << still_running.size()
                                     << " process(es) of trials that were started again";
  int restarted = 0;
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    expect_every_iteration_once(id, 500);
    restarted += t.failures > 0;
  }
  EXPECT_GE(restarted, 1);
}

// The head's process dies (SIGKILL) mid-experiment and is started again at the same
// address: the node and its trials run on and join it again; the tuning program
// reconnects, takes its groups back (the node still holds them) and greets its trials
// through the new head, which send what they reported meanwhile. Every trial completes
// with every iteration stored once, and none was restarted.
TEST_F(ExperimentTest, AHeadKilledAndStartedAgainLosesNothing) {
  run_result again;
  std::thread killer([&] {
    std::this_thread::sleep_for(1500ms);
    ::kill(head_pid, SIGKILL);
    for (int i = 0; i < 50 && ::kill(head_pid, 0) == 0; ++i) std::this_thread::sleep_for(100ms);
    std::this_thread::sleep_for(1000ms);
    again = files.tune({"start", "--head", "--port", std::to_string(port), "--host", "127.0.0.1"});
  });
  // 4 trials of 250 iterations (20 ms each), half a card each: all at once on the node.
  auto sum = run(fifo{}, 4, 4, 250);
  killer.join();
  ASSERT_EQ(again.rc, 0) << again.out << again.err;
  EXPECT_EQ(sum.trials, 4);
  EXPECT_EQ(sum.terminated, 4);
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    EXPECT_EQ(t.failures, 0) << id << " was restarted: " << t.last_failure;
    EXPECT_EQ(t.starts, 1) << id;
    expect_every_iteration_once(id, 250);
  }
  auto events = store->events();
  ASSERT_TRUE(events);
  std::set<std::string> kinds;
  for (auto& e : *events) kinds.insert(e.kind);
  EXPECT_TRUE(kinds.count("head_lost") && kinds.count("head_back")) << "the head's death went unnoticed";
}

// A busy cluster: trials waiting for room start on a node the moment it joins; then
// `tune rebalance` evens the GPU load: a trial moves from the full node to the new one
// (paused, started again there from the experiment's copy of its checkpoint) and every
// trial still completes with every iteration stored once.
TEST_F(ExperimentTest, ANodeJoinsABusyClusterAndRebalanceEvensTheLoad) {
  std::string second_id;
  run_result joined, plan;
  std::thread later([&] {
    std::this_thread::sleep_for(1000ms);
    joined = files.tune({"start", "--address", address, "--num-gpus", "2"});
    second_id = node_id_in(joined.out);
    std::this_thread::sleep_for(1500ms);
    plan = files.tune({"rebalance", "--address", address, "--json"});
  });
  // 6 trials of 300 iterations (20 ms each), half a card each: 4 fit on the first node.
  auto sum = run(fifo{}, 6, 6, 300);
  later.join();
  ASSERT_EQ(joined.rc, 0) << joined.out << joined.err;
  ASSERT_EQ(plan.rc, 0) << plan.out << plan.err;
  auto moves = nlohmann::json::parse(plan.out, nullptr, false);
  ASSERT_TRUE(moves.is_object()) << plan.out;
  ASSERT_EQ(moves["moves"].size(), 1u) << plan.out << ": 4 x 0.5 GPU against 2 x 0.5 on two 2-GPU nodes";
  EXPECT_EQ(moves["moves"][0]["to"], second_id);
  EXPECT_EQ(sum.trials, 6);
  EXPECT_EQ(sum.terminated, 6);
  int on_second = 0, moved = 0;
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    EXPECT_EQ(t.failures, 0) << id;
    expect_every_iteration_once(id, 300);
    auto tr = store->trial(id);
    ASSERT_TRUE(tr);
    on_second += tr->info.value("node", "") == second_id;
    if (!has_event(id, "moved_out")) continue;
    ++moved;
    EXPECT_EQ(tr->info.value("node", ""), second_id) << id << " moved to the new node";
    EXPECT_NE(tr->info.value("restored_from", "").find("/restore/"), std::string::npos)
        << id << " continued from its checkpoint: " << tr->info.dump();
  }
  EXPECT_EQ(moved, 1);
  EXPECT_EQ(on_second, 3) << "the 2 waiting trials and the moved one ran on the node that joined";
}

// `tune drain NODE`: every trial on the node moves to the other one (from its
// checkpoint), nothing new goes there, status says it is draining; --undo ends that.
// With auto_rebalance the experiment asks for the rebalance itself when a node joins:
// a trial moves from the full node to the new one, from its checkpoint.
TEST_F(ExperimentTest, AutoRebalanceMovesATrialToANodeThatJoins) {
  auto_rebalance = true;
  std::string second_id;
  std::thread later([&] {
    std::this_thread::sleep_for(1000ms);
    auto joined = files.tune({"start", "--address", address, "--num-gpus", "2"});
    second_id = node_id_in(joined.out);
  });
  // 4 trials of 300 iterations (20 ms each), half a card each: all on the first node.
  auto sum = run(fifo{}, 4, 4, 300);
  later.join();
  EXPECT_EQ(sum.terminated, 4);
  int moved = 0;
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    expect_every_iteration_once(id, 300);
    if (!has_event(id, "moved_out")) continue;
    ++moved;
    auto tr = store->trial(id);
    ASSERT_TRUE(tr);
    EXPECT_EQ(tr->info.value("node", ""), second_id) << id;
  }
  EXPECT_EQ(moved, 2) << "4 x 0.5 GPU on one of two 2-GPU nodes: 2 move to even them";
}

TEST_F(ExperimentTest, DrainMovesEveryTrialOffANodeAndStatusShowsIt) {
  auto second = files.tune({"start", "--address", address, "--num-gpus", "2"});
  ASSERT_EQ(second.rc, 0) << second.out << second.err;
  std::string second_id = node_id_in(second.out);
  run_result drained, shown, undone;
  std::thread later([&] {
    std::this_thread::sleep_for(1500ms);
    drained = files.tune({"drain", node_id, "--address", address});
    shown = files.tune({"status", "--address", address, "--json"});
  });
  // 4 trials of 250 iterations, half a card each: all on one node at first (PACK).
  auto sum = run(fifo{}, 4, 4, 250);
  later.join();
  ASSERT_EQ(drained.rc, 0) << drained.out << drained.err;
  EXPECT_NE(drained.out.find("takes no new work"), std::string::npos) << drained.out;
  auto status = nlohmann::json::parse(shown.out, nullptr, false);
  ASSERT_TRUE(status.is_object()) << shown.out << shown.err;
  for (auto& n : status["nodes"])
    if (n["id"] == node_id) {
      EXPECT_EQ(n["state"], "draining") << n.dump();
      EXPECT_EQ(n["draining"], true);
    }
  EXPECT_EQ(sum.terminated, 4);
  for (auto& [id, t] : engine_trials) {
    EXPECT_EQ(t.state, "terminated") << id << ": " << t.error;
    expect_every_iteration_once(id, 250);
    auto tr = store->trial(id);
    ASSERT_TRUE(tr);
    EXPECT_EQ(tr->info.value("node", ""), second_id) << id << " ended on the node that was not drained";
  }
  undone = files.tune({"drain", node_id, "--undo", "--address", address});
  ASSERT_EQ(undone.rc, 0) << undone.out << undone.err;
  auto after = nlohmann::json::parse(files.tune({"status", "--address", address, "--json"}).out, nullptr, false);
  for (auto& n : after["nodes"])
    if (n["id"] == node_id) {
      EXPECT_EQ(n["draining"], false);
    }
  auto unknown = files.tune({"drain", "node-nope", "--address", address});
  EXPECT_NE(unknown.rc, 0);
  EXPECT_NE(unknown.err.find("no node node-nope"), std::string::npos) << unknown.err;
}

TEST_F(ExperimentTest, TrialsThatCannotBePlacedFailWithTheReasonAndHoldNothing) {
  auto sum = run(fifo{}, 2, 2, 3, *resource_set::make({{"gpu", 4}}));
  EXPECT_EQ(sum.trials, 2);
  EXPECT_EQ(sum.errored, 2);
  all_failed_with("infeasible");
  auto text = client->status_json();
  ASSERT_TRUE(text);
  auto status = nlohmann::json::parse(*text);
  for (auto& g : status["placement_groups"]) EXPECT_EQ(g["state"], "removed") << g.dump();
}

TEST_F(ExperimentTest, ATrialThatCannotStartGivesItsCardsBackAtOnce) {
  // Each trial needs the whole node; the program cannot be fetched. The second trial
  // must get the node (and fail for the same reason), not wait for a held group.
  program_ref bogus{"missing", std::string(64, 'a'), 10};
  auto sum = run(fifo{}, 2, 1, 3, *resource_set::make({{"gpu", 2}}), &bogus);
  EXPECT_EQ(sum.errored, 2);
  all_failed_with("cannot fetch program missing");
}

// A search algorithm is the user's own code (search.hpp: derive from search_algorithm):
// one that throws ends the controller, and run_experiment returns that as an error
// instead of waiting for ever.
class throwing_search : public search_algorithm {
 public:
  throwing_search() : search_algorithm(mode::max) {}
  bool finished() const override { return false; }
  std::string name() const override { return "throwing"; }

 protected:
  expected<std::optional<config>> next_config(const std::string&) override {
    if (++calls_ > 1) throw std::runtime_error("a bug in the search");
    return std::optional<config>{config{{"mode", "curve"}, {"x", 0.5}, {"iterations", 2}, {"sleep_ms", 20}}};
  }
  int calls_ = 0;
};

TEST_F(ExperimentTest, AControllerThatDiesOfAnExceptionIsAnErrorNotAHang) {
  throwing_search search;
  auto sched = make_scheduler(fifo{}, "acc", mode::max);
  ASSERT_TRUE(sched);
  engine_options eo;
  eo.metric = "acc";
  eo.max_concurrent = 1;
  auto engine = experiment_engine::make(search, **sched, eo);
  ASSERT_TRUE(engine) << engine.error().message();
  experiment_run_options ro;
  ro.name = "test";
  ro.program = program;
  ro.group_timeout = 5000ms;
  ro.bundles = {*resource_set::make({{"gpu", 0.5}})};
  auto answer = std::make_shared<std::promise<expected<experiment_summary>>>();
  auto done = answer->get_future();
  std::thread([&, answer] { answer->set_value(run_experiment(*client, **engine, *store, ro)); }).detach();
  if (done.wait_for(60s) != std::future_status::ready) {
    ADD_FAILURE() << "run_experiment still waits for a controller that died";
    std::quick_exit(1);  // the thread cannot be joined: leave now rather than hang the suite
  }
  auto sum = done.get();
  ASSERT_FALSE(sum);
  EXPECT_NE(sum.error().message().find("a bug in the search"), std::string::npos) << sum.error().message();
  EXPECT_NE(sum.error().message().find("controller ended"), std::string::npos) << sum.error().message();
}

}  // namespace
}  // namespace tune::test
