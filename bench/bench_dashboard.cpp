// What the dashboard costs, with a head in this process serving it over loopback HTTP:
//  - latency of each JSON view and /metrics (p50, p99 over --requests GETs, one client)
//    with 64 nodes of 8 GPUs and an experiment of 1,000 trials x 100 points on the board
//    (and the same with two objectives and a constraint: its page has the Pareto front);
//  - the head's own work while people watch: advertisements (heartbeats) it processes
//    per second with no dashboard open, and while 10 pages poll /api/cluster and one
//    the experiment's page (curves of every trial) every second, as browsers do —
//    side by side, medians of --repeats runs; and while 4 clients poll /api/cluster as
//    fast as they can (the worst a misbehaving script does).
// Last line: one JSON object. Usage: bench_dashboard [--repeats N] [--requests N]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "dashboard/dashboard.hpp"
#include "fake_nodes.hpp"
#include "head/head.hpp"
#include "procs.hpp"
#include "wire.hpp"

using namespace tune;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

const std::string token = "bench0123456789abcdef0123456789abcdef";

struct latency {
  double p50_ms = 0, p99_ms = 0;
  size_t bytes = 0;
};

latency measure(int port, const std::string& path, int requests) {
  httplib::Client c{"127.0.0.1", port};
  c.set_read_timeout(30, 0);
  httplib::Headers auth{{"Authorization", "Bearer " + token}};
  std::vector<double> ms;
  latency out;
  for (int i = 0; i < requests; ++i) {
    auto t0 = clock_type::now();
    auto r = c.Get(path, auth);
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    if (!r || r->status != 200) {
      std::fprintf(stderr, "bench_dashboard: GET %s failed (%d)\n", path.c_str(), r ? r->status : -1);
      std::exit(1);
    }
    out.bytes = r->body.size();
  }
  std::sort(ms.begin(), ms.end());
  out.p50_ms = ms[ms.size() / 2];
  out.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  return out;
}

// Clients polling paths until stopped: each GET, then a pause (`every`, 0: none).
struct pollers {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> requests{0};
  std::vector<std::thread> threads;
  void add(int port, std::string path, std::chrono::milliseconds every) {
    threads.emplace_back([this, port, path, every] {
      httplib::Client c{"127.0.0.1", port};
      httplib::Headers auth{{"Authorization", "Bearer " + token}};
      while (!stop) {
        auto next = clock_type::now() + every;
        if (auto r = c.Get(path, auth); r && r->status == 200) ++requests;
        while (!stop && clock_type::now() < next) std::this_thread::sleep_for(10ms);
      }
    });
  }
  ~pollers() {
    stop = true;
    for (auto& t : threads) t.join();
  }
};

}  // namespace

int main(int argc, char** argv) {
  int repeats = 3, requests = 100;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--repeats" || a == "--requests") && i + 1 < argc) (a == "--repeats" ? repeats : requests) = std::atoi(argv[++i]);
    else {
      std::printf("usage: bench_dashboard [--repeats N] [--requests N]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  if (repeats < 1 || requests < 1) {
    std::fprintf(stderr, "bench_dashboard: --repeats and --requests must be at least 1\n");
    return 2;
  }
  wire::config cfg{false};
  caf::actor_system sys{cfg};
  auto bound = dashboard_server::bind(sys, {"127.0.0.1", 0, false});
  if (!bound) {
    std::fprintf(stderr, "bench_dashboard: %s\n", bound.error().message().c_str());
    return 1;
  }
  auto server = std::move(*bound);
  int port = server->port();
  // Simulated nodes beat only when told: a long heartbeat timeout keeps them alive while
  // the views are measured (liveness is bench_cluster's subject).
  auto head = spawn_head(sys, {token, "bench:6380", std::chrono::minutes(10)});
  server->serve(head);

  // The board: one experiment of 1,000 trials with 100 points each.
  nlohmann::json report{{"id", "exp-bench"}, {"full", true}, {"name", "bench"}, {"metric", "acc"}, {"mode", "max"},
                        {"state", "running"}, {"results", 100000}};
  for (int t = 0; t < 1000; ++t) {
    std::string id = "trial-" + std::to_string(t);
    report["trials"].push_back({{"id", id}, {"state", "running"}, {"iteration", 100}, {"value", 0.5},
                                {"config", {{"lr", 0.01 * t}, {"width", 256}}}, {"node", "bench-0"}, {"pid", 1000 + t}});
    auto pts = nlohmann::json::array();
    for (int i = 1; i <= 100; ++i) pts.push_back({i, 0.5 + 0.001 * i});
    report["points"][id] = pts;
  }
  // The same with two objectives and a constraint: its page has the Pareto front too.
  nlohmann::json two = report;
  two["id"] = "exp-two";
  two["objectives"] = {{{"name", "acc"}, {"mode", "max"}}, {{"name", "ms"}, {"mode", "min"}}};
  two["constraints"] = {"over"};
  for (int t = 0; t < 1000; ++t) {
    const double x = (t * 7919 % 1000) / 1000.0;  // spread over [0, 1) in no order
    two["trials"][t]["value"] = 1 - (x - 0.7) * (x - 0.7);
    two["trials"][t]["others"] = {10 + 40 * x + (t % 13) * 0.5, x - 0.8};
  }
  {
    caf::scoped_actor program{sys};
    program->send(head, wire::board_atom::value, token, report.dump());
    program->send(head, wire::board_atom::value, token, two.dump());
    // It stays on the board while this actor lives; the views are measured meanwhile.
    auto nodes = bench::join_fake_nodes(sys, head, token, 64);
    std::printf("board: 2 experiments (one with two objectives and a constraint), 1000 trials x 100 points each; 64 nodes x 8 GPUs\n");
    nlohmann::json lat;
    for (std::string path : {"/api/cluster", "/api/gpus", "/api/nodes", "/api/groups", "/metrics", "/api/experiments",
                             "/api/experiments/exp-bench", "/api/experiments/exp-two",
                             "/api/experiments/exp-bench/trials/trial-7"}) {
      auto l = measure(port, path, requests);
      std::printf("GET %-38s p50 %7.2f ms  p99 %7.2f ms  %8zu bytes\n", path.c_str(), l.p50_ms, l.p99_ms, l.bytes);
      lat[path] = {{"p50_ms", l.p50_ms}, {"p99_ms", l.p99_ms}, {"bytes", l.bytes}};
    }
    for (auto& n : nodes) caf::anon_send_exit(n, caf::exit_reason::user_shutdown);

    // The head's advertisement rate: alone, with pages open, with 4 clients polling hard.
    // Each run sends 64 x 25,000 advertisements (a few seconds: the pages poll meanwhile),
    // after one run to warm up.
    const int per_node = 25000;
    std::vector<double> alone, watched, hammered;
    int64_t watched_requests = 0, hammered_requests = 0;
    (void)bench::ads_per_s_barrier(sys, head, token, 64, per_node);
    for (int r = 0; r < repeats; ++r) {
      alone.push_back(bench::ads_per_s_barrier(sys, head, token, 64, per_node));
      {
        pollers p;
        for (int i = 0; i < 10; ++i) p.add(port, "/api/cluster", 1000ms);
        p.add(port, "/api/experiments/exp-bench", 1000ms);
        watched.push_back(bench::ads_per_s_barrier(sys, head, token, 64, per_node));
        watched_requests += p.requests;
      }
      {
        pollers p;
        for (int i = 0; i < 4; ++i) p.add(port, "/api/cluster", 0ms);
        hammered.push_back(bench::ads_per_s_barrier(sys, head, token, 64, per_node));
        hammered_requests += p.requests;
      }
      std::printf("ads run %d: %.0f/s alone, %.0f/s with 11 pages open, %.0f/s with 4 clients polling nonstop\n", r + 1,
                  alone.back(), watched.back(), hammered.back());
    }
    double a = bench::median(alone), w = bench::median(watched), h = bench::median(hammered);
    nlohmann::json out{{"latency", lat},
                       {"ads_per_s_alone", a},
                       {"ads_per_s_pages_open", w},
                       {"ads_per_s_polled_nonstop", h},
                       {"pages_open_ratio", w / a},
                       {"polled_nonstop_ratio", h / a},
                       {"requests_pages_open", watched_requests},
                       {"requests_polled_nonstop", hammered_requests},
                       {"repeats", repeats}};
    std::printf("%s\n", out.dump().c_str());
  }
  server.reset();
  caf::anon_send_exit(head, caf::exit_reason::user_shutdown);
  return 0;
}
