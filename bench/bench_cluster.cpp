// Cluster benchmarks, against real processes:
//  - detect_dead_ms: SIGKILL of a node process -> the head reports it dead (10 runs);
//  - detect_frozen_ms: SIGSTOP of a node process -> dead (3 runs, bounded by the
//    3 s heartbeat timeout);
//  - ads_per_s: node advertisements (heartbeats, each changing what is free) the head
//    processes per second, sent by 64 simulated nodes over loopback through the gate,
//    and the same with the head in this process (no network).
// Last line: one JSON object. Usage: bench_cluster [--quick]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "head/head.hpp"
#include "fake_nodes.hpp"
#include "procs.hpp"
#include "tune/cluster/token.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"
#include "wire.hpp"

using namespace tune;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {


using bench::ads_per_s;
using bench::median;

std::string sh(const std::string& cmd) { return bench::run(cmd); }

int pid_in(const std::string& s) {
  std::smatch m;
  return std::regex_search(s, m, std::regex{R"(\(pid (\d+)\))"}) ? std::stoi(m[1]) : 0;
}

std::string id_in(const std::string& s) {
  std::smatch m;
  return std::regex_search(s, m, std::regex{R"(node-[0-9a-f]{8})"}) ? std::string{m[0]} : std::string{};
}


// Waits for the head's event that `id` reached `state`; the time it arrived.
std::optional<clock_type::time_point> await_event(caf::scoped_actor& self, const std::string& id,
                                                  const std::string& state, std::chrono::seconds limit) {
  auto deadline = clock_type::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0) return std::nullopt;
    std::optional<clock_type::time_point> got;
    bool timeout = false;
    self->receive(
        [&](wire::node_event_atom, const std::string& who, const std::string& s, const std::string&) {
          if (who == id && s == state) got = clock_type::now();
        },
        caf::after(left) >> [&] { timeout = true; });
    if (got) return got;
    if (timeout) return std::nullopt;
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string{argv[1]} == "--quick";
  if (argc > 1 && !quick) {
    std::cout << "usage: bench_cluster [--quick]\n";
    return std::string{argv[1]} == "--help" ? 0 : 2;
  }
  // Whatever happens, the head and nodes this run started are stopped and its files go.
  bench::make_scratch("bench_cluster");
  auto token = ensure_token(bench::scratch::token_path);
  if (!token) {
    std::cerr << token.error().message() << "\n";
    return 1;
  }
  int port = 20000 + static_cast<int>(::getpid() % 20000);
  std::string address = "127.0.0.1:" + std::to_string(port);
  auto started = sh(bench::tune_binary() + " start --head --host 127.0.0.1 --port " + std::to_string(port));
  if (pid_in(started) == 0) {
    std::cerr << "bench_cluster: cannot start a head: " << started;
    return 1;
  }

  wire::config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto remote = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
  if (!remote) {
    std::cerr << "bench_cluster: cannot reach the head: " << sys.render(remote.error()) << "\n";
    return 1;
  }
  auto head = *remote;
  self->request(head, 5s, wire::subscribe_atom::value, token->token).receive([](wire::subscribe_atom, std::string&) {}, [](caf::error&) {});

  auto measure = [&](int signal, int runs, std::vector<double>& out) {
    for (int r = 0; r < runs; ++r) {
      auto s = sh(bench::tune_binary() + " start --address " + address);
      int pid = pid_in(s);
      std::string id = id_in(s);
      if (!pid || !await_event(self, id, "alive", 10s)) {
        std::cerr << "bench_cluster: a node did not start: " << s;
        std::exit(1);
      }
      auto t0 = clock_type::now();
      ::kill(pid, signal);
      auto dead = await_event(self, id, "dead", 15s);
      if (signal == SIGSTOP) ::kill(pid, SIGKILL);
      if (!dead) {
        std::cerr << "bench_cluster: node " << id << " was never reported dead\n";
        std::exit(1);
      }
      out.push_back(std::chrono::duration<double, std::milli>(*dead - t0).count());
      std::printf("%s %d: %.1f ms\n", signal == SIGKILL ? "SIGKILL" : "SIGSTOP", r + 1, out.back());
      std::fflush(stdout);
    }
  };
  std::vector<double> dead_ms, frozen_ms;
  measure(SIGKILL, quick ? 3 : 10, dead_ms);
  measure(SIGSTOP, quick ? 1 : 3, frozen_ms);

  const int nodes = 64, per_node = quick ? 500 : 3000;
  std::vector<double> loopback, inproc;
  for (int r = 0; r < (quick ? 1 : 3); ++r) {
    loopback.push_back(ads_per_s(sys, head, token->token, nodes, per_node));
    auto local_head = spawn_head(sys, {token->token, "in-process", wire::heartbeat_timeout});
    inproc.push_back(ads_per_s(sys, local_head, token->token, nodes, per_node));
    self->send_exit(local_head, caf::exit_reason::user_shutdown);
    std::printf("ads run %d: %.0f/s over loopback, %.0f/s in process\n", r + 1, loopback.back(), inproc.back());
    std::fflush(stdout);
  }
  std::printf("{\"detect_dead_ms_p50\": %.1f, \"detect_dead_ms_max\": %.1f, \"detect_frozen_ms_p50\": %.1f, "
              "\"ads_per_s\": %.0f, \"ads_per_s_inproc\": %.0f, \"dead_runs\": %zu, \"ads_nodes\": %d}\n",
              median(dead_ms), *std::max_element(dead_ms.begin(), dead_ms.end()), median(frozen_ms),
              median(loopback), median(inproc), dead_ms.size(), nodes);
  std::fflush(stdout);
  std::exit(0);  // runs the clean-up above
}
