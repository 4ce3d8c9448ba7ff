// Placement decisions per second on a snapshot of 1,000 nodes x 8 GPUs, kept busy:
// the cluster is filled to a steady occupancy, then each round decides (timed), commits
// the decision and releases an older one, so every decision sees a fresh state.
// Last line: one JSON object. Usage: bench_placement [--repeats N] [--nodes N] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "tune/core/placement.hpp"

using namespace tune;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int64_t GiB = int64_t{1} << 30;

cluster_view make_cluster(int nodes, int gpus) {
  cluster_view v;
  for (int n = 0; n < nodes; ++n) {
    std::string id = "node-" + std::to_string(n);
    std::vector<gpu_instance> cards;
    for (int c = 0; c < gpus; ++c)
      cards.push_back({c, id + "-GPU-" + std::to_string(c), "bus", "NVIDIA H200", 141 * GiB, false});
    resource_set host;
    host.set_cpu(quantity::whole(128)).set_memory(2048 * GiB);
    if (!v.add_node(id, *node_resources::make(host, cards))) std::abort();
  }
  return v;
}

struct result {
  double decisions_per_s = 0;   // time inside place() only
  double rounds_per_s = 0;      // place + commit + release
  double placed_fraction = 0;
};

// Runs `rounds` decisions of `make_bundles()` with strategy `s`, holding at most `keep`
// committed placements (the oldest is released when more are held).
template <class MakeBundles>
result run(cluster_view& v, strategy s, MakeBundles make_bundles, int rounds, size_t keep,
           std::mt19937_64& rng) {
  std::deque<placement> held;
  auto settle = [&](placement p) {
    if (p.result == outcome::placed) {
      if (!commit(v, p)) std::abort();
      held.push_back(std::move(p));
    }
    while (held.size() > keep || (p.result != outcome::placed && !held.empty() && held.size() > keep / 2)) {
      // Release a random held placement: churn all over the cluster, not FIFO order only.
      size_t i = std::uniform_int_distribution<size_t>(0, held.size() - 1)(rng);
      if (!release(v, held[i])) std::abort();
      held[i] = std::move(held.back());
      held.pop_back();
      if (p.result == outcome::placed) break;
    }
  };
  // Fill to the steady state first (untimed).
  for (size_t i = 0; i < keep * 2 && held.size() < keep; ++i) {
    auto bundles = make_bundles();
    auto p = place(v, bundles, s);
    if (!p) std::abort();
    settle(std::move(*p));
  }
  std::chrono::nanoseconds in_place{0};
  int placed = 0;
  auto start = clock_type::now();
  for (int r = 0; r < rounds; ++r) {
    auto bundles = make_bundles();
    auto t0 = clock_type::now();
    auto p = place(v, bundles, s);
    in_place += clock_type::now() - t0;
    if (!p) std::abort();
    placed += p->result == outcome::placed;
    settle(std::move(*p));
  }
  double total = std::chrono::duration<double>(clock_type::now() - start).count();
  for (auto& p : held) release(v, p);
  result out;
  out.decisions_per_s = rounds / std::chrono::duration<double>(in_place).count();
  out.rounds_per_s = rounds / total;
  out.placed_fraction = static_cast<double>(placed) / rounds;
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5, nodes = 1000, gpus = 8;
  int single_rounds = 200000, group_rounds = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) { std::fprintf(stderr, "%s needs a number\n", a.c_str()); std::exit(2); }
      int v = std::atoi(argv[++i]);
      if (v <= 0) { std::fprintf(stderr, "%s needs a positive number\n", a.c_str()); std::exit(2); }
      return v;
    };
    if (a == "--repeats") repeats = next();
    else if (a == "--nodes") nodes = next();
    else if (a == "--quick") { repeats = 1; single_rounds = 20000; group_rounds = 2000; }
    else if (a == "--help" || a == "-h") {
      std::puts("usage: bench_placement [--repeats N] [--nodes N] [--quick]\n"
                "Placement decisions per second on N nodes x 8 GPUs (default 1000), median of\n"
                "the repeats (default 5). The last line is a JSON object.");
      return 0;
    } else {
      std::fprintf(stderr, "bench_placement: unknown option '%s' (try --help)\n", a.c_str());
      return 2;
    }
  }

  auto v = make_cluster(nodes, gpus);
  std::mt19937_64 rng{42};
  const std::vector<resource_set> shares = {
      *resource_set::make({{"gpu", 0.125}, {"cpu", 1}}), *resource_set::make({{"gpu", 0.25}, {"cpu", 2}}),
      *resource_set::make({{"gpu", 0.5}, {"cpu", 4}}), *resource_set::make({{"gpu", 0.1}, {"cpu", 1}})};
  const auto whole = *resource_set::make({{"gpu", 1}, {"cpu", 4}});
  const size_t total_gpus = static_cast<size_t>(nodes) * gpus;

  std::vector<double> single, single_rounds_s, group, group_rounds_s;
  for (int r = 0; r < repeats; ++r) {
    // Single fractional bundles, PACK; ~70% of the GPU capacity held.
    size_t i = 0;
    auto one = [&] { return std::vector<resource_set>{shares[i++ % shares.size()]}; };
    auto a = run(v, strategy::pack, one, single_rounds, total_gpus * 70 / 100 * 4, rng);
    // 8-bundle STRICT_SPREAD groups of one whole GPU each; ~70% of the GPUs held.
    auto eight = [&] { return std::vector<resource_set>(8, whole); };
    auto b = run(v, strategy::strict_spread, eight, group_rounds, total_gpus * 70 / 100 / 8, rng);
    std::printf("run %d: single %.0f/s (%.0f/s with commit+release, %.0f%% placed), "
                "group %.0f/s (%.0f/s with commit+release, %.0f%% placed)\n",
                r + 1, a.decisions_per_s, a.rounds_per_s, 100 * a.placed_fraction, b.decisions_per_s,
                b.rounds_per_s, 100 * b.placed_fraction);
    std::fflush(stdout);
    single.push_back(a.decisions_per_s);
    single_rounds_s.push_back(a.rounds_per_s);
    group.push_back(b.decisions_per_s);
    group_rounds_s.push_back(b.rounds_per_s);
  }
  std::printf("{\"single_bundle_per_s\": %.0f, \"group_per_s\": %.0f, "
              "\"single_bundle_with_commit_per_s\": %.0f, \"group_with_commit_per_s\": %.0f, "
              "\"nodes\": %d, \"gpus_per_node\": %d, \"repeats\": %d}\n",
              median(single), median(group), median(single_rounds_s), median(group_rounds_s), nodes,
              gpus, repeats);
}
