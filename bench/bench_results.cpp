// bench_results: how many results per second the controller ingests — each one parsed,
// given to the scheduler and the search, and stored in the experiment's SQLite
// database — from real trials (processes that report as fast as they can):
//   inproc         the node in the controller's process (an embedded cluster)
//   cross_process  the node a daemon of its own (`tune start`), the results crossing
//                  a TCP connection on loopback
// The rate is the results stored over the time between the first and the last one
// the controller received (the store's ingestion times), median of --repeats runs.
// With --users N (issue 21): N experiments of one trial at once on the loopback cluster,
// side by side in each repeat: all with the admin's token, then each with a user's own
// (N users added with `tune user add`): results stored per second over all of them.
// With --trial-files (issue 43): in process, each repeat runs with each trial's files
// (TensorBoard's events, progress.csv, result.json) and without, side by side (which goes
// first alternates): results per second of both, their ratio pair by pair, and the bytes
// of the store and of the trials' files.
// Last line: {"inproc_per_s": ..., "cross_process_per_s": ..., ...}.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "procs.hpp"
#include "tune/tune.hpp"

namespace {

// Reports `results` results as fast as the pipe to the node takes them.
void flood(tune::trial_context& ctx) {
  int64_t n = ctx.integer("results").value();
  double x = ctx.number("x").value();
  for (int64_t i = 1; i <= n; ++i)
    if (!ctx.report({{"score", x + static_cast<double>(i) * 1e-9}, {"loss", 1.0 / static_cast<double>(i)}})) return;
}
TUNE_TRAINABLE(flood);

struct run_result {
  double per_s = 0;
  double controller_per_cpu_s = 0;  // results per second of the controller's own CPU time
  int64_t results = 0;
  double wall_s = 0;
};

run_result measure(tune::cluster& c, int trials, int64_t per_trial, const std::string& dir, bool files = true) {
  tune::tune_config cfg;
  cfg.name = "bench_results";
  cfg.metric = "score";
  cfg.num_samples = trials;
  cfg.max_concurrent_trials = trials;
  cfg.resources_per_trial = tune::resources{{"cpu", 1}};
  cfg.progress = tune::progress_style::none;
  cfg.experiment_dir = dir;
  cfg.trial_files = files;
  tune::tuner t{c, "flood", tune::search_space{{"x", tune::uniform(0, 1)}, {"results", per_trial}}, cfg};
  auto r = t.fit();
  if (!r) tune::bench::die(r.error().message());
  auto rows = r->store().results();
  if (!rows || rows->empty()) tune::bench::die("no results stored");
  double first = rows->front().time, last = first;
  for (auto& row : *rows) {
    first = std::min(first, row.time);
    last = std::max(last, row.time);
  }
  if (r->results != trials * per_trial || r->errors() > 0)
    tune::bench::die("stored " + std::to_string(r->results) + " results of " + std::to_string(trials * per_trial) +
                     " (" + std::to_string(r->errors()) + " trials failed; see " + dir + ")");
  return {static_cast<double>(r->results) / std::max(last - first, 1e-9),
          static_cast<double>(r->ingested) / std::max(r->controller_cpu_s, 1e-9), r->results, r->wall_s};
}

// `clusters.size()` experiments of one trial at once, one per connection: the results
// stored over the time from the first to the last, over all of them.
double measure_many(std::vector<tune::cluster>& clusters, int64_t per_trial, const std::string& dir) {
  std::vector<std::thread> threads;
  std::vector<std::pair<double, double>> spans(clusters.size());
  std::vector<int64_t> stored(clusters.size());
  for (size_t k = 0; k < clusters.size(); ++k)
    threads.emplace_back([&, k] {
      tune::tune_config cfg;
      cfg.name = "bench_results_" + std::to_string(k);
      cfg.metric = "score";
      cfg.num_samples = 1;
      cfg.resources_per_trial = tune::resources{{"cpu", 1}};
      cfg.progress = tune::progress_style::none;
      cfg.experiment_dir = dir + "/" + std::to_string(k);
      tune::tuner t{clusters[k], "flood", tune::search_space{{"x", tune::uniform(0, 1)}, {"results", per_trial}}, cfg};
      auto r = t.fit();
      if (!r) tune::bench::die(r.error().message());
      auto rows = r->store().results();
      if (!rows || rows->empty() || r->errors() > 0) tune::bench::die("experiment " + std::to_string(k) + " stored nothing or failed");
      double first = rows->front().time, last = first;
      for (auto& row : *rows) first = std::min(first, row.time), last = std::max(last, row.time);
      spans[k] = {first, last};
      stored[k] = r->results;
    });
  for (auto& t : threads) t.join();
  double first = spans[0].first, last = spans[0].second;
  int64_t total = 0;
  for (size_t k = 0; k < spans.size(); ++k) {
    first = std::min(first, spans[k].first), last = std::max(last, spans[k].second);
    if (stored[k] != per_trial) tune::bench::die("experiment " + std::to_string(k) + " stored " + std::to_string(stored[k]));
    total += stored[k];
  }
  return static_cast<double>(total) / std::max(last - first, 1e-9);
}

uint64_t bytes_under(const std::filesystem::path& p) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(p, ec)) return std::filesystem::file_size(p, ec);
  uint64_t n = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(p, ec))
    if (e.is_regular_file(ec)) n += e.file_size(ec);
  return n;
}

// In process, with and without each trial's files, side by side.
int compare_trial_files(int trials, int64_t per_trial, int repeats, const std::string& dir) {
  tune::cluster_options o;
  o.num_cpus = trials;
  o.work_dir = dir + "/embedded";
  auto c = tune::cluster::start(o);
  if (!c) tune::bench::die(c.error().message());
  std::vector<double> with, without, ratios;
  nlohmann::json runs = nlohmann::json::array(), sizes;
  for (int k = 0; k < repeats; ++k) {
    double on = 0, off = 0;
    for (int side = 0; side < 2; ++side) {
      bool files = (side + k) % 2 == 0;
      auto where = dir + "/files-" + std::string(files ? "on-" : "off-") + std::to_string(k);
      auto r = measure(*c, trials, per_trial, where, files);
      (files ? on : off) = r.per_s;
      std::cerr << "trial files " << (files ? "on " : "off") << " run " << k + 1 << ": " << static_cast<int64_t>(r.per_s)
                << " per s\n";
      runs.push_back({{"trial_files", files}, {"per_s", r.per_s}, {"results", r.results}, {"wall_s", r.wall_s}});
      if (files && k == 0)
        sizes = {{"results", r.results}, {"store_bytes", bytes_under(where + "/experiment.db") +
                                                              bytes_under(where + "/experiment.db-wal")},
                 {"trial_files_bytes", bytes_under(where + "/trials")}};
      std::filesystem::remove_all(where);
    }
    with.push_back(on);
    without.push_back(off);
    ratios.push_back(on / off);
  }
  std::cout << nlohmann::json{{"files_on_per_s", tune::bench::median(with)},
                              {"files_off_per_s", tune::bench::median(without)},
                              {"on_over_off_median_of_pairs", tune::bench::median(ratios)},
                              {"sizes", sizes}, {"trials", trials}, {"results_per_trial", per_trial},
                              {"repeats", repeats}, {"runs", runs}}.dump()
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tune::run_if_trial_worker(argc, argv);  // first: trials run this program
  int trials = 4, repeats = 3, users = 0;
  bool with_tls = false, trial_files = false;
  std::string only;  // inproc or cross_process: that one alone
  int64_t per_trial = 50000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) tune::bench::die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--trials") trials = std::stoi(next());
    else if (a == "--results-per-trial") per_trial = std::stoll(next());
    else if (a == "--repeats") repeats = std::stoi(next());
    else if (a == "--only") only = next();
    else if (a == "--users") users = std::stoi(next());
    else if (a == "--tls") with_tls = true;
    else if (a == "--trial-files") trial_files = true;
    else if (a == "--help" || a == "-h") {
      std::cout << "usage: bench_results [--trials N (4)] [--results-per-trial N (50000)] [--repeats N (3)]\n"
                   "                     [--only inproc|cross_process] [--users N] [--tls] [--trial-files]\n";
      return 0;
    } else {
      tune::bench::die("unknown option " + a + " (see --help)");
    }
  }
  if (trials < 1 || per_trial < 1 || repeats < 1) tune::bench::die("every count must be at least 1");
  if (with_tls && users > 0) tune::bench::die("--tls and --users are measured in separate invocations");
  tune::bench::make_scratch("bench_results");
  auto& dir = tune::bench::scratch::dir;
  std::vector<double> inproc, cross, inproc_cpu, cross_cpu;
  nlohmann::json runs = nlohmann::json::array();
  if (!only.empty() && only != "inproc" && only != "cross_process")
    tune::bench::die("--only takes inproc or cross_process");
  if (trial_files) return compare_trial_files(trials, per_trial, repeats, dir);
  // --repeats runs of one mode on cluster `o`.
  auto runs_of = [&](const std::string& mode, const tune::cluster_options& o, std::vector<double>& rates,
                     std::vector<double>& capacity) {
    auto c = tune::cluster::start(o);
    if (!c) tune::bench::die(c.error().message());
    for (int k = 0; k < repeats; ++k) {
      auto r = measure(*c, trials, per_trial, dir + "/" + mode + "-" + std::to_string(k));
      std::cerr << mode << " run " << k + 1 << ": " << r.results << " results, " << static_cast<int64_t>(r.per_s)
                << " per s\n";
      rates.push_back(r.per_s);
      capacity.push_back(r.controller_per_cpu_s);
      runs.push_back({{"mode", mode}, {"per_s", r.per_s}, {"controller_per_cpu_s", r.controller_per_cpu_s},
                      {"results", r.results}, {"wall_s", r.wall_s}});
    }
  };
  if (only != "cross_process") {
    tune::cluster_options o;
    o.num_cpus = trials;
    o.work_dir = dir + "/embedded";
    runs_of("inproc", o, inproc, inproc_cpu);
  }
  if (only == "inproc") {
    std::cout << nlohmann::json{{"inproc_per_s", tune::bench::median(inproc)},
                                {"inproc_controller_per_cpu_s", tune::bench::median(inproc_cpu)},
                                {"runs", runs}}.dump()
              << std::endl;
    return 0;
  }
  tune::cluster_options o;
  o.address = tune::bench::start_loopback_cluster(1, "--num-cpus " + std::to_string(std::max(trials, users)));
  o.token_file = tune::bench::scratch::token_path;
  runs_of("cross_process", o, cross, cross_cpu);
  // --tls: a second loopback cluster that uses TLS, measured side by side with the plain
  // one in every repeat (which goes first alternates).
  std::vector<double> plain_side, tls_side;
  if (with_tls) {
    const std::string tdir = dir + "/tls";
    tune::bench::run(tune::bench::tune_binary() + " tls init " + tdir);
    const std::string flags = "--tls-cert " + tdir + "/cluster.crt --tls-key " + tdir + "/cluster.key --tls-ca " + tdir + "/ca.crt";
    tune::cluster_options t = o;
    t.address = tune::bench::start_loopback_cluster(1, "--num-cpus " + std::to_string(trials) + " " + flags, flags, 1);
    t.tls_cert = tdir + "/cluster.crt";
    t.tls_key = tdir + "/cluster.key";
    t.tls_ca = tdir + "/ca.crt";
    auto plain = tune::cluster::start(o);  // first: from the next connection on, this process dials with TLS
    if (!plain) tune::bench::die(plain.error().message());
    auto secure = tune::cluster::start(t);
    if (!secure) tune::bench::die(secure.error().message());
    for (int k = 0; k < repeats; ++k) {
      auto one = [&](tune::cluster& c, const char* mode, std::vector<double>& into) {
        auto r = measure(c, trials, per_trial, dir + "/" + mode + "-" + std::to_string(k));
        into.push_back(r.per_s);
        runs.push_back({{"mode", mode}, {"per_s", r.per_s}, {"results", r.results}, {"wall_s", r.wall_s}});
        std::cerr << mode << " run " << k + 1 << ": " << static_cast<int64_t>(r.per_s) << " per s\n";
      };
      if (k % 2) one(*secure, "cross_process_tls", tls_side);
      one(*plain, "cross_process_plain", plain_side);
      if (k % 2 == 0) one(*secure, "cross_process_tls", tls_side);
    }
  }
  std::vector<double> as_admin, as_users;
  if (users > 0) {
    std::vector<tune::cluster> admins, own;
    for (int u = 0; u < users; ++u) {
      auto name = "user" + std::to_string(u);
      auto file = dir + "/" + name + ".token";
      auto added = tune::bench::run(tune::bench::tune_binary() + " user add " + name + " --address " + o.address +
                                    " --token-file " + o.token_file + " --out " + file);
      auto a = tune::cluster::start(o);
      tune::cluster_options mine = o;
      mine.token_file = file;
      auto m = tune::cluster::start(mine);
      if (!a || !m) tune::bench::die("cannot connect as the admin and as " + name + ": " + added);
      admins.push_back(std::move(*a));
      own.push_back(std::move(*m));
    }
    for (int k = 0; k < repeats; ++k) {
      as_admin.push_back(measure_many(admins, per_trial, dir + "/admin-" + std::to_string(k)));
      as_users.push_back(measure_many(own, per_trial, dir + "/users-" + std::to_string(k)));
      std::cerr << users << " experiments at once, run " << k + 1 << ": admin's token " << static_cast<int64_t>(as_admin.back())
                << " per s, " << users << " users' tokens " << static_cast<int64_t>(as_users.back()) << " per s\n";
      runs.push_back({{"mode", "experiments_at_once"}, {"users", users}, {"admin_per_s", as_admin.back()},
                      {"users_per_s", as_users.back()}});
    }
  }
  nlohmann::json j{{"inproc_per_s", tune::bench::median(inproc)},
                   {"cross_process_per_s", tune::bench::median(cross)},
                   {"inproc_controller_per_cpu_s", tune::bench::median(inproc_cpu)},
                   {"cross_process_controller_per_cpu_s", tune::bench::median(cross_cpu)},
                   {"trials", trials},
                   {"users", users},
                   {"experiments_at_once_admin_per_s", tune::bench::median(as_admin)},
                   {"experiments_at_once_users_per_s", tune::bench::median(as_users)},
                   {"results_per_trial", per_trial},
                   {"plain_side_by_side_per_s", tune::bench::median(plain_side)},
                   {"tls_per_s", tune::bench::median(tls_side)},
                   {"tls_ratio", plain_side.empty() ? 0.0 : tune::bench::median(tls_side) / tune::bench::median(plain_side)},
                   {"repeats", repeats},
                   {"cpus", std::thread::hardware_concurrency()},
                   {"runs", runs}};
  std::cout << j.dump() << std::endl;
  return 0;
}
