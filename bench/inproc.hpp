// In-process nodes for the benchmarks that run a head in their own process (bench_pg,
// bench_preempt): `count` nodes of `gpus` logical GPUs (64 CPUs, 512 GiB), joined.
#pragma once

#include <caf/all.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "node/node.hpp"
#include "procs.hpp"
#include "tune/host/detect.hpp"

namespace tune::bench {

inline std::vector<caf::actor> spawn_inproc_nodes(caf::actor_system& sys, const caf::actor& head, const std::string& token,
                                                  int count, int gpus) {
  std::vector<caf::actor> nodes;
  for (int i = 0; i < count; ++i) {
    node_options opt;
    opt.head_actor = head;
    opt.token = token;
    opt.node_id = "inproc-" + std::to_string(i);
    opt.hostname = "bench";
    opt.address = "in-process";
    resource_set host;
    host.set_cpu(quantity::whole(64)).set_memory(int64_t{512} << 30);
    opt.resources = *node_resources::make(host, logical_gpus(opt.node_id, gpus, int64_t{80} << 30));
    auto joined = std::make_shared<std::promise<status>>();
    auto f = joined->get_future();
    opt.on_first_join = [joined](const status& st) { joined->set_value(st); };
    nodes.push_back(spawn_node(sys, std::move(opt)));
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready || !f.get()) die("an in-process node did not join");
  }
  return nodes;
}

}  // namespace tune::bench
