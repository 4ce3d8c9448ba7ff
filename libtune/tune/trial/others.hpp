// What other programs hold on a node's cards, as placement counts it (card_others in
// tune/core/node_resources.hpp), from the two things a node finds out:
//   - the claims of other libtune nodes on this machine (tune/host/card_claims.hpp): what
//     they have given to bundles, share and memory, whether their trials run yet or not;
//   - the processes on the cards that are no trial of this node's (the GPU audit's
//     "foreign" ones, tune/trial/audit.hpp): what they hold, plus a margin for them to
//     grow. A process of another node's trial is counted in that node's claim, not twice.
// A card where such processes hold more than the threshold is not given whole (a CUDA
// context alone is about 500 MiB); a share goes only where its memory fits beside them.
// Pure: tested with made-up claims and processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/gpu_instance.hpp"
#include "tune/core/node_resources.hpp"
#include "tune/host/card_claims.hpp"
#include "tune/trial/audit.hpp"

namespace tune {

struct others_policy {
  int64_t threshold = int64_t{256} << 20;  // more than this held by others: the card is not given whole
  int64_t margin = int64_t{1} << 30;       // kept free beside what processes of others hold
};

// What a process holds when the driver does not say (no privileges): as a CUDA context.
inline constexpr int64_t unknown_process_memory = int64_t{512} << 20;

// The claimer whose trial `p` is (its node among p's ancestors, or p in a cgroup below the
// claimer's), or none.
const claimer* claimer_of(const foreign_process& p, const std::vector<claimer>& claims);

// For each of `cards` (in order): what the claims of other nodes and the processes in
// `foreign` hold there. Cards no other program can use (logical ones) get nothing.
std::vector<card_others> others_on_cards(const std::vector<gpu_instance>& cards, const std::vector<claimer>& claims,
                                         const std::vector<foreign_process>& foreign, const others_policy& policy);

// "pid 4711 python3 (user ann), 20.3 GiB": a process of others' for people.
std::string describe_process(const foreign_process& p);

}  // namespace tune
