// Simulated nodes for the benchmarks: actors that join a head as nodes of 8 logical
// GPUs and send it heartbeats (advertisements) as fast as they can when told, and the
// rate at which the head processes them.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "procs.hpp"
#include "tune/cluster/version.hpp"
#include "tune/host/detect.hpp"
#include "wire.hpp"

namespace tune::bench {

using namespace std::chrono_literals;

// A simulated node: joins, then sends `n` heartbeats when told, alternating two
// availability states so that each one changes what the head holds.
inline caf::behavior fake_node(caf::event_based_actor* self, caf::actor head, std::string token, std::string id) {
  resource_set host;
  host.set_cpu(quantity::whole(64)).set_memory(int64_t{512} << 30);
  auto n = *node_resources::make(host, logical_gpus(id, 8, int64_t{80} << 30));
  auto ad = wire::make_ad(id, "bench", "127.0.0.1", n);
  ad.version = version();
  auto busy = n;
  (void)busy.allocate(*resource_set::make({{"gpu", 0.25}, {"cpu", 2}}));
  auto a = wire::to_wire(n.availability()), b = wire::to_wire(busy.availability());
  return {
      // Joins from this actor, so that the head takes it as the node's connection.
      [=](wire::join_atom) {
        auto rp = self->make_response_promise();
        self->request(head, 10s, wire::join_atom::value, token, ad)
            .then([rp](wire::join_atom, std::string& version) mutable { rp.deliver(wire::join_atom::value, version); },
                  [rp](caf::error& err) mutable { rp.deliver(err); });
        return rp;
      },
      [=](wire::rejoin_atom) {
        std::cerr << "bench: the head does not take " << id << "'s heartbeats\n";
        cleanup_scratch();
        std::_Exit(1);
      },
      [=](wire::beat_atom, uint64_t count) {
        for (uint64_t i = 0; i < count; ++i)
          self->send(head, wire::heartbeat_atom::value, token, id, i, i % 2 ? b : a, std::vector<wire::wire_hold>{});
        return count;
      },
      // The same, answered once the head has handled them all: a status request of a
      // made-up version, which the head refuses at once, comes after them from this actor
      // (one sender's messages are handled in order), at no cost but its own.
      [=](wire::beat_atom, uint64_t count, bool) {
        for (uint64_t i = 0; i < count; ++i)
          self->send(head, wire::heartbeat_atom::value, token, id, i, i % 2 ? b : a, std::vector<wire::wire_hold>{});
        auto rp = self->make_response_promise();
        self->request(head, 120s, wire::status_atom::value, token, std::string{"barrier"})
            .then([rp, count](wire::status_atom, std::string&) mutable { rp.deliver(count); },
                  [rp, count](caf::error& err) mutable {  // refused, as expected: the barrier passed
                    if (wire::is_refusal(err)) rp.deliver(count);
                    else rp.deliver(err);
                  });
        return rp;
      },
  };
}

// `nodes` simulated nodes (bench-0, bench-1, ...), joined.
inline std::vector<caf::actor> join_fake_nodes(caf::actor_system& sys, caf::actor head, const std::string& token,
                                               int nodes) {
  caf::scoped_actor self{sys};
  std::vector<caf::actor> fakes;
  for (int i = 0; i < nodes; ++i) {
    auto f = sys.spawn(fake_node, head, token, "bench-" + std::to_string(i));
    bool ok = false;
    self->request(f, 10s, wire::join_atom::value)
        .receive([&](wire::join_atom, std::string&) { ok = true; }, [](caf::error&) {});
    if (!ok) {
      std::cerr << "bench: a simulated node could not join\n";
      std::exit(1);
    }
    fakes.push_back(f);
  }
  return fakes;
}

// Joins `nodes` simulated nodes, sends `per_node` heartbeats from each, and waits until
// the head has processed all of them (status counts them). Ads per second.
inline double ads_per_s(caf::actor_system& sys, caf::actor head, const std::string& token, int nodes, int per_node) {
  caf::scoped_actor self{sys};
  auto fakes = join_fake_nodes(sys, head, token, nodes);
  auto processed = [&] {
    int64_t total = -1;
    self->request(head, 30s, wire::status_atom::value, token, version())
        .receive(
            [&](wire::status_atom, std::string& text) {
              total = 0;
              auto status = nlohmann::json::parse(text);
              for (auto& n : status["nodes"])
                if (n["id"].get<std::string>().rfind("bench-", 0) == 0) total += n["heartbeats"].get<int64_t>();
            },
            [](caf::error&) {});
    return total;
  };
  int64_t before = processed();
  auto start = std::chrono::steady_clock::now();
  for (auto& f : fakes) self->send(f, wire::beat_atom::value, static_cast<uint64_t>(per_node));
  int64_t want = before + int64_t{nodes} * per_node;
  for (int64_t got = processed(); got < want; got = processed()) {
    if (std::getenv("BENCH_DEBUG")) std::fprintf(stderr, "processed %lld of %lld\n", static_cast<long long>(got), static_cast<long long>(want));
    if (std::chrono::steady_clock::now() - start > 120s) {
      std::cerr << "bench: the head did not process every advertisement in 120 s\n";
      std::exit(1);
    }
    std::this_thread::sleep_for(2ms);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& f : fakes) self->send_exit(f, caf::exit_reason::user_shutdown);
  return static_cast<double>(want - before) / s;
}

// The same rate measured without asking the head for its status while it runs (a status
// of many nodes costs the head more than thousands of heartbeats): each simulated node
// sends its heartbeats and then a request the head answers at once; the rate is taken
// when every node has its answer.
inline double ads_per_s_barrier(caf::actor_system& sys, caf::actor head, const std::string& token, int nodes,
                                int per_node) {
  caf::scoped_actor self{sys};
  auto fakes = join_fake_nodes(sys, head, token, nodes);
  auto start = std::chrono::steady_clock::now();
  for (auto& f : fakes) self->send(f, wire::beat_atom::value, static_cast<uint64_t>(per_node), true);
  for (size_t i = 0; i < fakes.size(); ++i)
    self->receive([](uint64_t) {},
                  [](caf::error& err) {
                    std::cerr << "bench: a simulated node's heartbeats were not all handled: " << to_string(err) << "\n";
                    std::exit(1);
                  },
                  caf::after(std::chrono::seconds(180)) >> [] {
                    std::cerr << "bench: the head did not handle every advertisement in 180 s\n";
                    std::exit(1);
                  });
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& f : fakes) self->send_exit(f, caf::exit_reason::user_shutdown);
  return static_cast<double>(nodes) * per_node / s;
}

}  // namespace tune::bench
