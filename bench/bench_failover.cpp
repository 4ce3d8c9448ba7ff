// bench_failover: how fast trials come back, with real checkpoints, on a cluster of
// node processes on loopback (a head and 2 nodes of 2 logical GPUs; a third joins when
// one is killed).
//
//  recover: 2 trials (a GPU each, PACK: on one node) write a --checkpoint-mb checkpoint
//           (100 MB) at iteration 1 and report every 50 ms; once the experiment holds
//           its copies (and, unless --no-standby, their standby copies are on another
//           node: docs/resilience.md), their node is SIGKILLed. recover_s = from the kill until both
//           run again on another node (their start answered: the checkpoint fetched,
//           checked and the worker started), with max_failures = 1.
//  migrate: 1 such trial; once its copy is held (and staged), `tune drain` its node. migrate_s =
//           from the drain until it runs on the other node from its checkpoint.
//
// Medians of --repeats runs (3). Last line: {"recover_s_p50", "migrate_s_p50", ...}.
// --timeline: after each recovery, the steps from the kill on, in milliseconds: the
// head's and the nodes' log lines and the experiment's events (the profile of the path).
#include <signal.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "procs.hpp"
#include "tune/tune.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

// Writes a checkpoint of `mb` MB at iteration 1 (or starts from one and checks its
// size), then reports every 50 ms up to `iterations`.
void holder(tune::trial_context& ctx) {
  int64_t iterations = ctx.integer("iterations").value(), mb = ctx.integer("mb").value();
  int64_t i = 0;
  uint64_t want = static_cast<uint64_t>(mb) << 20;
  if (!ctx.restore_dir().empty()) {
    std::ifstream in(ctx.restore_dir() + "/weights.bin", std::ios::binary | std::ios::ate);
    if (!in || static_cast<uint64_t>(in.tellg()) != want) throw std::runtime_error("the checkpoint is not whole");
    i = 1;
  }
  while (i < iterations) {
    ++i;
    if (i == 1) {
      auto dir = ctx.checkpoint_dir(1);
      if (!dir) throw std::runtime_error(dir.error().message());
      std::ofstream out(*dir + "/weights.bin", std::ios::binary);
      std::string block(1 << 20, '\0');
      for (size_t k = 0; k < block.size(); ++k) block[k] = static_cast<char>(k * 131 + 7);
      for (int64_t m = 0; m < mb; ++m) out.write(block.data(), static_cast<std::streamsize>(block.size()));
      out.close();
      (void)ctx.report_checkpoint(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!ctx.report({{"score", static_cast<double>(i)}}, i) || tune::trial_context::should_stop()) return;
  }
}
TUNE_TRAINABLE(holder);

struct trial_view {
  std::string node;
  bool copied = false;   // its checkpoint 1 is in the experiment folder
  bool standby = false;  // and staged on another node
};

// What the experiment's store says of each trial now.
std::map<std::string, trial_view> look(const std::string& exp) {
  std::map<std::string, trial_view> out;
  if (!std::ifstream(exp + "/experiment.db")) return out;
  auto s = tune::experiment_store::open(exp);
  if (!s) return out;
  auto trials = (*s)->trials();
  if (!trials) return out;
  for (auto& t : *trials) {
    auto& v = out[t.id];
    v.node = t.info.value("node", "");
    if (auto ev = (*s)->events(t.id); ev)
      for (auto& e : *ev) {
        v.copied = v.copied || (e.kind == "checkpoint_stored" && e.body.value("iteration", 0) == 1);
        v.standby = v.standby || (e.kind == "standby" && e.body.value("iteration", 0) == 1);
      }
  }
  return out;
}

// Waits (polling every 5 ms, up to `limit`) until `done` holds of the store; when it did.
std::optional<clock_type::time_point> wait_for(const std::string& exp, int trials,
                                               const std::function<bool(const std::map<std::string, trial_view>&)>& done,
                                               std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto end = clock_type::now() + limit;
  while (clock_type::now() < end) {
    auto v = look(exp);
    if (static_cast<int>(v.size()) == trials && done(v)) return clock_type::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

std::string node_pid(const std::string& node) {
  std::ifstream in(tune::bench::scratch::dir + "/" + node + ".pid");
  std::string pid;
  in >> pid;
  return pid;
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A log line's time ("2026-12-03T08:01:02.345Z ..."), or -1.
double log_time(const std::string& line) {
  std::tm tm{};
  int ms = 0;
  if (line.size() < 24 || !strptime(line.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) || line[19] != '.') return -1;
  ms = std::atoi(line.substr(20, 3).c_str());
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

// What happened from `from` (wall seconds) to `to`: the cluster's log lines (the head's
// and the nodes', in the scratch folder) and the experiment's events, in time order.
void print_timeline(const std::string& exp, double from, double to) {
  std::vector<std::pair<double, std::string>> steps;
  std::error_code ec;
  for (auto& f : std::filesystem::directory_iterator(tune::bench::scratch::dir, ec)) {
    if (f.path().extension() != ".log") continue;
    std::ifstream in(f.path());
    for (std::string line; std::getline(in, line);) {
      double t = log_time(line);
      if (t >= from - 0.0005 && t <= to + 0.001) steps.emplace_back(t, f.path().stem().string() + ": " + line.substr(25));
    }
  }
  if (auto s = tune::experiment_store::open(exp); s)
    if (auto ev = (*s)->events(); ev)
      for (auto& e : *ev)
        if (e.time >= from && e.time <= to + 0.001)
          steps.emplace_back(e.time, "experiment: " + e.trial + " " + e.kind + " " + e.body.dump().substr(0, 100));
  std::stable_sort(steps.begin(), steps.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::fprintf(stderr, "  %7.1f ms  bench: SIGKILL\n", 0.0);
  for (auto& [t, what] : steps) std::fprintf(stderr, "  %7.1f ms  %s\n", (t - from) * 1000, what.c_str());
  std::fprintf(stderr, "  %7.1f ms  bench: both trials run elsewhere (the store says)\n", (to - from) * 1000);
}

}  // namespace

int main(int argc, char** argv) {
  tune::run_if_trial_worker(argc, argv);  // first: trials run this program
  int repeats = 3, mb = 100;
  bool timeline = false, standby = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) tune::bench::die(a + " needs a value");
      return std::stoi(argv[++i]);
    };
    if (a == "--repeats") repeats = next();
    else if (a == "--checkpoint-mb") mb = next();
    else if (a == "--timeline") timeline = true;
    else if (a == "--no-standby") standby = false;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_failover [--repeats 3] [--checkpoint-mb 100] [--timeline] [--no-standby]\n";
      return 0;
    } else {
      tune::bench::die("unknown option " + a + " (see --help)");
    }
  }
  if (repeats < 1 || mb < 1) tune::bench::die("--repeats and --checkpoint-mb must be at least 1");
  tune::bench::make_scratch("bench_failover");
  auto& dir = tune::bench::scratch::dir;
  std::string node_args = "--num-gpus 2 --num-cpus 2";
  auto address = tune::bench::start_loopback_cluster(2, node_args);
  tune::cluster_options o;
  o.address = address;
  o.token_file = tune::bench::scratch::token_path;
  auto c = tune::cluster::start(o);
  if (!c) tune::bench::die(c.error().message());
  auto experiment = [&](const std::string& name, int trials, int iterations, int max_failures) {
    tune::tune_config cfg;
    cfg.name = name;
    cfg.metric = "score";
    cfg.num_samples = trials;
    cfg.max_failures = max_failures;
    cfg.resources_per_trial = tune::resources{{"gpu", 1}};
    cfg.progress = tune::progress_style::none;
    cfg.experiment_dir = dir + "/" + name;
    cfg.min_move_interval_s = 0;
    cfg.standby_copies = standby;
    auto t = std::make_shared<tune::tuner>(*c, "holder", tune::search_space{{"iterations", iterations}, {"mb", mb}}, cfg);
    return std::make_pair(cfg.experiment_dir, std::thread([t, name] {
                            auto r = t->fit();
                            if (!r) tune::bench::die(name + ": " + r.error().message());
                            if (r->errors() > 0) tune::bench::die(name + ": " + std::to_string(r->errors()) + " trial(s) failed");
                          }));
  };
  std::vector<double> recover, migrate;
  for (int k = 0; k < repeats; ++k) {
    // Recover: kill the node of 2 trials.
    auto [exp, runner] = experiment("recover-" + std::to_string(k), 2, 160, 1);
    std::string victim;
    auto ready = wait_for(exp, 2, [&](auto& v) {
      std::set<std::string> nodes;
      for (auto& [id, t] : v) {
        if (!t.copied || t.node.empty() || (standby && !t.standby)) return false;
        nodes.insert(t.node);
      }
      if (nodes.size() != 1) return false;
      victim = *nodes.begin();
      return true;
    });
    if (!ready) tune::bench::die("recover: the checkpoints were not copied in time (see " + exp + ")");
    auto pid = node_pid(victim);
    if (pid.empty()) tune::bench::die("no pid file for node " + victim);
    auto killed = clock_type::now();
    double killed_wall = wall_now();
    ::kill(std::stoi(pid), SIGKILL);
    auto back = wait_for(exp, 2, [&](auto& v) {
      for (auto& [id, t] : v)
        if (t.node == victim) return false;
      return true;
    });
    if (!back) tune::bench::die("recover: the trials did not come back in time (see " + exp + ")");
    double s = std::chrono::duration<double>(*back - killed).count();
    recover.push_back(s);
    std::cerr << "recover " << k + 1 << ": " << s << " s\n";
    if (timeline) print_timeline(exp, killed_wall, killed_wall + s);
    runner.join();
    // A node in place of the one killed.
    auto out = tune::bench::run(tune::bench::tune_binary() + " start --address " + address + " " + node_args);
    if (out.find("joined") == std::string::npos) tune::bench::die("a new node did not start: " + out);
    // Migrate: drain the node of 1 trial.
    auto [exp2, runner2] = experiment("migrate-" + std::to_string(k), 1, 120, 0);
    std::string from;
    if (!wait_for(exp2, 1, [&](auto& v) {
          auto& t = v.begin()->second;
          from = t.node;
          return t.copied && !t.node.empty() && (!standby || t.standby);
        }))
      tune::bench::die("migrate: the checkpoint was not copied in time (see " + exp2 + ")");
    auto asked = clock_type::now();
    out = tune::bench::run(tune::bench::tune_binary() + " drain " + from + " --address " + address);
    if (out.find("takes no new work") == std::string::npos) tune::bench::die("drain: " + out);
    auto moved = wait_for(exp2, 1, [&](auto& v) { return !v.begin()->second.node.empty() && v.begin()->second.node != from; });
    if (!moved) tune::bench::die("migrate: the trial did not move in time (see " + exp2 + ")");
    s = std::chrono::duration<double>(*moved - asked).count();
    migrate.push_back(s);
    std::cerr << "migrate " << k + 1 << ": " << s << " s\n";
    runner2.join();
    tune::bench::run(tune::bench::tune_binary() + " drain " + from + " --undo --address " + address);
  }
  nlohmann::json j{{"recover_s_p50", tune::bench::median(recover)},
                   {"migrate_s_p50", tune::bench::median(migrate)},
                   {"recover_s", recover},
                   {"migrate_s", migrate},
                   {"checkpoint_mb", mb},
                   {"standby_copies", standby},
                   {"repeats", repeats}};
  std::cout << j.dump() << std::endl;
  // The cluster stopped and its folders removed before this process ends; then no
  // destructors: the client's actor system waits on connections to the killed nodes.
  tune::bench::cleanup_scratch();
  std::_Exit(0);
}
