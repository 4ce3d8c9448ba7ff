// bench_trials: many trials sharing GPUs through libtune, against PyTorch processes
// sharing one card, in the same run (GPU machine).
//
//   bench_trials [--models mlp,cnn] [--epochs E] [--trials 8] [--share 0.125] [--cards N] [--repeats R]
//                [--no-torch] [--mps]
//
// For each model: (a) `trials` libtune trials of `share` GPU each, all on one card,
// through a real head and node process (tune-train-worker, shipped by the client);
// (b) with --cards N > 1, trials x N trials on N cards; with --mps the node runs its
// trials under CUDA MPS (`tune start --mps`; PyTorch's processes stay without it); (c) `trials` PyTorch eager
// processes (bench/torch_baseline.py) on one card at once. The aggregate is measured
// while all of them run: from the moment the last one finished its first (warm-up)
// epoch to the moment the first one finished its last, the samples of every epoch
// that ended in that window over its length (epoch ends: when the report reached the
// client for libtune, the wall-clock time printed by PyTorch). Enough epochs must be
// asked for that the window spans several epochs of each; too short a window is an
// error. A wall-clock aggregate (all samples over the time from the first start to
// the last end, start-up included) is printed beside it.
//
// An audit of its own runs through every libtune phase: NVML sampled every 100 ms,
// each process on a card matched to its trial by pid; a trial on a card it was not
// given counts as a violation (the node's audit would also have killed it).
//
// Last line: one JSON object (medians over --repeats) with `<model>_ours_per_s`, `<model>_torch_per_s`,
// `<model>_speedup`, `<model>_cards<N>_per_s`, `<model>_cards<N>_speedup`,
// `audit_samples`, `audit_violations`, `trials_failed`.
#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/client.hpp"
#include "procs.hpp"
#include "tune/cluster/token.hpp"
#include "tune/host/nvml.hpp"
#include "tune/trial/process.hpp"
#include "wire.hpp"

using namespace tune;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

using bench::die;
using bench::median;

std::string sh(const std::string& cmd) { return bench::run(cmd); }

std::string env_or(const char* name, const std::string& fallback) {
  const char* e = std::getenv(name);
  return e && *e ? e : fallback;
}


double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The aggregate rate while every process runs (see the top of the file); each entry
// is one process's epoch end times. 0 when the window holds fewer than two epochs of
// some process.
double overlap_rate(const std::vector<std::vector<double>>& ends, double samples_per_epoch, double& window_s) {
  double from = 0, to = 1e300;
  for (auto& e : ends) {
    if (e.size() < 3) return 0;
    from = std::max(from, e.front());
    to = std::min(to, e.back());
  }
  window_s = to - from;
  if (window_s <= 0) return 0;
  double samples = 0;
  for (auto& e : ends) {
    int inside = 0;
    for (double t : e) inside += t > from && t <= to;
    if (inside < 2) return 0;
    samples += inside * samples_per_epoch;
  }
  return samples / window_s;
}

struct phase_result {
  double per_s = 0;       // while all run
  double window_s = 0;
  double wall_per_s = 0;  // all samples / wall time
  double wall_s = 0;
  int failed = 0;
  std::vector<double> test_acc;
};

// The independent audit: which card each trial's process is on.
struct audit_watch {
  std::shared_ptr<nvml> lib;
  std::mutex mu;
  std::map<int, std::set<std::string>> allowed;  // worker pid -> its cards' UUIDs
  std::atomic<bool> on{false};
  std::atomic<long> samples{0}, violations{0}, seen{0};
  std::thread thread;

  void start() {
    if (!lib) return;
    on = true;
    thread = std::thread([this] {
      while (on) {
        if (auto cards = lib->sample()) {
          ++samples;
          std::lock_guard lock(mu);
          for (auto& c : *cards)
            for (auto& p : c.processes) {
              auto a = allowed.find(p.pid);
              if (a == allowed.end()) continue;
              ++seen;
              if (!a->second.count(c.uuid)) {
                ++violations;
                std::cerr << "bench_trials: AUDIT: pid " << p.pid << " on " << c.uuid << ", not its card\n";
              }
            }
        }
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  void stop() {
    on = false;
    if (thread.joinable()) thread.join();
  }
};

phase_result run_ours(cluster_client& client, const program_ref& program, const std::string& model, int epochs,
                      int trials, double share, audit_watch& audit, const std::string& tag) {
  phase_result r;
  std::vector<std::string> groups;
  auto t0 = clock_type::now();
  std::map<std::string, std::vector<double>> ends;
  std::set<std::string> running;
  // Every group first, then every trial: the trials start as close together as they can.
  for (int i = 0; i < trials; ++i) {
    auto made = client.create_group({"", strategy::pack, {*resource_set::make({{"gpu", share}})}, false});
    if (!made) die("create group: " + made.error().message());
    groups.push_back(made->id);
  }
  for (auto& g : groups)
    if (auto ready = client.wait_ready(g, 30s); !ready) die("group not ready: " + ready.error().message());
  t0 = clock_type::now();
  for (int i = 0; i < trials; ++i) {
    std::string id = tag + "-" + model + "-" + std::to_string(i);
    nlohmann::json config{{"model", model}, {"epochs", epochs}, {"seed", i + 1}};
    auto started = client.start_trial({id, groups[static_cast<size_t>(i)], 0, program, {}, config.dump()});
    if (!started) die("start " + id + ": " + started.error().message());
    auto info = nlohmann::json::parse(*started);
    std::set<std::string> cards;
    for (auto& g : info["gpus"]) cards.insert(g["uuid"].get<std::string>());
    {
      std::lock_guard lock(audit.mu);
      audit.allowed[info["pid"].get<int>()] = cards;
    }
    running.insert(id);
  }
  while (!running.empty()) {
    auto e = client.next_trial_event(1s);
    if (clock_type::now() - t0 > 20min) die("trials did not end within 20 minutes");
    if (!e) continue;
    auto body = nlohmann::json::parse(e->json);
    if (e->kind == "result") {
      ends[e->trial_id].push_back(wall_now());
    } else if (e->kind == "done") {
      auto m = nlohmann::json::parse(body.value("message", ""), nullptr, false);
      if (m.is_object() && m.contains("test_acc")) r.test_acc.push_back(m["test_acc"].get<double>());
    } else if (e->kind == "ended") {
      running.erase(e->trial_id);
      if (!body.value("ok", false)) {
        ++r.failed;
        std::cerr << "bench_trials: trial " << e->trial_id << " failed: " << body.value("error", "") << "\n"
                  << body.value("stderr_tail", "") << "\n";
      }
    }
  }
  r.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::vector<std::vector<double>> all;
  for (auto& [id, v] : ends) all.push_back(v);
  r.per_s = overlap_rate(all, 55000.0, r.window_s);
  r.wall_per_s = 55000.0 * epochs * trials / r.wall_s;
  for (auto& g : groups) (void)client.remove_group(g);
  return r;
}

phase_result run_torch(const std::string& model, int epochs, int procs, const std::string& uuid) {
  phase_result r;
  std::string script = env_or("TORCH_BASELINE", TORCH_BASELINE);
  std::string data = env_or("TUNE_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist");
  std::map<std::string, std::string> env{{"PATH", env_or("PATH", "/usr/bin:/bin")},
                                         {"HOME", env_or("HOME", "/tmp")},
                                         {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                         {"CUDA_VISIBLE_DEVICES", uuid}};
  if (const char* l = std::getenv("LD_LIBRARY_PATH")) env["LD_LIBRARY_PATH"] = l;
  auto t0 = clock_type::now();
  std::vector<std::unique_ptr<worker_process>> ps;
  for (int i = 0; i < procs; ++i) {
    auto p = worker_process::start({{"/usr/bin/env", "python3", script, "--model", model, "--epochs",
                                     std::to_string(epochs), "--seed", std::to_string(i + 1), "--data", data},
                                    env,
                                    ""});
    if (!p) die("cannot start python3: " + p.error().message());
    ps.push_back(std::move(p).value());
  }
  std::regex end_re(R"(epoch \d+ .* samples/s\s+at ([0-9.]+))");
  std::vector<std::vector<double>> all;
  for (auto& p : ps) {
    std::vector<std::string> ignored;
    auto e = p->wait(20min, ignored);
    if (!e || !e->ok()) {
      ++r.failed;
      std::cerr << "bench_trials: a PyTorch process failed: " << (e ? e->describe() : "timeout") << "\n"
                << p->stderr_tail() << "\n";
      continue;
    }
    std::vector<double> ends;
    std::istringstream out(p->stdout_tail());
    for (std::string line; std::getline(out, line);) {
      std::smatch m;
      if (std::regex_search(line, m, end_re)) ends.push_back(std::stod(m[1]));
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("test_acc")) r.test_acc.push_back(j["test_acc"].get<double>());
    }
    all.push_back(ends);
  }
  r.per_s = overlap_rate(all, 55000.0, r.window_s);
  r.wall_s = std::chrono::duration<double>(clock_type::now() - t0).count();
  r.wall_per_s = 55000.0 * epochs * procs / r.wall_s;
  return r;
}

std::string fmt(double v) {
  std::ostringstream o;
  o.precision(0);
  o << std::fixed << v;
  return o.str();
}

}  // namespace

int main(int argc, char** argv) {
  bench::scratch::name = "bench_trials";  // for errors before the scratch folder exists
  std::vector<std::string> models{"mlp", "cnn"};
  int epochs = 0, trials = 8, cards = 1, repeats = 1;  // epochs 0: per model, below
  int epochs_mlp = 20, epochs_cnn = 8;
  double share = 0.125;
  bool torch = true, mps = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--models") {
      models.clear();
      std::stringstream s(next());
      for (std::string m; std::getline(s, m, ',');) {
        if (m != "mlp" && m != "cnn") die("unknown model " + m + " (mlp, cnn)");
        models.push_back(m);
      }
    } else if (a == "--epochs") {
      epochs = std::stoi(next());
    } else if (a == "--epochs-mlp") epochs_mlp = std::stoi(next());
    else if (a == "--epochs-cnn") epochs_cnn = std::stoi(next());
    else if (a == "--trials") trials = std::stoi(next());
    else if (a == "--share") share = std::stod(next());
    else if (a == "--cards") cards = std::stoi(next());
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--no-torch") torch = false;
    else if (a == "--mps") mps = true;
    else if (a == "-h" || a == "--help") {
      std::cout << "usage: bench_trials [--models mlp,cnn] [--epochs E] [--trials 8] [--share 0.125] [--cards N] [--repeats R] [--no-torch] [--mps]\n"
                   "       [--epochs-mlp 20] [--epochs-cnn 8]  (--epochs E sets both)\n";
      return 0;
    } else die("unknown argument " + a + " (see --help)");
  }
  if (epochs < 0 || trials < 1 || cards < 1 || repeats < 1 || share <= 0 || share > 1)
    die("bad --epochs, --trials, --cards, --repeats or --share");

  auto lib = nvml::load();
  if (!lib) die("this benchmark needs GPUs and NVML: " + lib.error().message());
  auto sample = (*lib)->sample();
  if (!sample || sample->empty()) die("NVML sees no card");
  if (static_cast<int>(sample->size()) < cards)
    die("--cards " + std::to_string(cards) + " but this machine has " + std::to_string(sample->size()));

  bench::make_scratch("bench_trials");
  int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::string address = "127.0.0.1:" + std::to_string(port);
  auto started = sh(bench::tune_binary() + " start --head --host 127.0.0.1 --port " + std::to_string(port));
  if (started.find("head started at") == std::string::npos) die("cannot start a head: " + started);
  std::string gpus;
  for (int i = 0; i < cards; ++i) gpus += (i ? "," : "") + std::to_string(i);
  auto node = sh("env -u CUDA_VISIBLE_DEVICES " + bench::tune_binary() + " start --address " + address + " --gpus " + gpus +
                 (mps ? " --mps" : ""));
  if (node.find("node started") == std::string::npos && node.find("joined") == std::string::npos)
    die("cannot start a node: " + node);

  wire::config cfg;
  caf::actor_system sys{cfg};
  auto token = read_token(bench::scratch::token_path);
  if (!token) die(token.error().message());
  auto client = cluster_client::connect(sys, "127.0.0.1", static_cast<uint16_t>(port), token->token);
  if (!client) die(client.error().message());
  auto program = (*client)->serve_program(env_or("TRAIN_WORKER", TRAIN_WORKER));
  if (!program) die(program.error().message());

  audit_watch audit;
  audit.lib = *lib;
  std::map<std::string, std::vector<double>> runs;  // every key's value in every repeat
  int failed = 0;
  std::cout << "bench_trials: " << trials << " trials x " << share << " GPU, " << epochs << " epochs; "
            << (*sample)[0].uuid << std::endl;
  for (int rep = 0; rep < repeats; ++rep)
  for (auto& m : models) {
    nlohmann::json out;
    int e = epochs ? epochs : m == "mlp" ? epochs_mlp : epochs_cnn;
    audit.start();
    auto ours = run_ours(**client, *program, m, e, trials, share, audit, "one");
    audit.stop();
    failed += ours.failed;
    std::cout << m << ": libtune, " << trials << " trials on one card: " << fmt(ours.per_s) << " samples/s over " << ours.window_s << " s ("
              << fmt(ours.wall_per_s) << " over " << ours.wall_s << " s wall)" << std::endl;
    out[m + "_ours_per_s"] = ours.per_s;
    out[m + "_ours_wall_per_s"] = ours.wall_per_s;
    if (!ours.test_acc.empty()) out[m + "_ours_test_acc_median"] = median(ours.test_acc);
    if (torch) {
      auto t = run_torch(m, e, trials, (*sample)[0].uuid);
      failed += t.failed;
      std::cout << m << ": PyTorch, " << trials << " processes on one card: " << fmt(t.per_s) << " samples/s over " << t.window_s << " s ("
                << fmt(t.wall_per_s) << " over " << t.wall_s << " s wall)" << std::endl;
      out[m + "_torch_per_s"] = t.per_s;
      out[m + "_torch_wall_per_s"] = t.wall_per_s;
      if (!t.test_acc.empty()) out[m + "_torch_test_acc_median"] = median(t.test_acc);
      if (t.per_s > 0) out[m + "_speedup"] = ours.per_s / t.per_s;
      if (t.wall_per_s > 0) out[m + "_wall_speedup"] = ours.wall_per_s / t.wall_per_s;
    }
    if (cards > 1) {
      audit.start();
      auto many = run_ours(**client, *program, m, e, trials * cards, share, audit, "many");
      audit.stop();
      failed += many.failed;
      std::string key = m + "_cards" + std::to_string(cards);
      std::cout << m << ": libtune, " << trials * cards << " trials on " << cards << " cards: " << fmt(many.per_s)
                << " samples/s over " << many.window_s << " s (" << fmt(many.wall_per_s) << " over " << many.wall_s << " s wall)" << std::endl;
      out[key + "_per_s"] = many.per_s;
      out[key + "_wall_per_s"] = many.wall_per_s;
      if (out.contains(m + "_torch_per_s")) out[key + "_speedup"] = many.per_s / out[m + "_torch_per_s"].get<double>();
    }
    for (auto& [k, v] : out.items()) runs[k].push_back(v.get<double>());
    out["model"] = m;
    out["epochs"] = e;
    std::cout << "run " << rep + 1 << ": " << out.dump() << std::endl;
  }
  // A rate of 0 (and a speedup from it) was not measured: no moment when all ran (too
  // few epochs for how long starting them took). Left out of the medians; a key with
  // no measured run is null.
  nlohmann::json out;
  for (auto& [k, v] : runs) {
    std::vector<double> measured;
    for (double x : v)
      if (x > 0 || k.find("test_acc") != std::string::npos) measured.push_back(x);
    out[k] = measured.empty() ? nlohmann::json(nullptr) : nlohmann::json(median(measured));
    if (measured.size() < v.size())
      std::cerr << "bench_trials: " << k << ": " << v.size() - measured.size()
                << " run(s) had no window in which all ran; ask for more epochs\n";
  }
  out["audit_samples"] = audit.samples.load();
  out["audit_process_sightings"] = audit.seen.load();
  out["audit_violations"] = audit.violations.load();
  out["trials_failed"] = failed;
  out["trials"] = trials;
  out["share"] = share;
  out["epochs_mlp"] = epochs ? epochs : epochs_mlp;
  out["epochs_cnn"] = epochs ? epochs : epochs_cnn;
  out["cards"] = cards;
  out["repeats"] = repeats;
  out["mps"] = mps;
  std::cout << out.dump() << std::endl;
  return failed ? 1 : 0;
}
