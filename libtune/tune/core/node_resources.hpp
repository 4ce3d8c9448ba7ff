// A node's resources: host amounts (CPU, memory, custom) and its GPUs one by one,
// with what is free on each. The allocation rules live here:
//
// - all or nothing: an allocation that fails changes nothing;
// - a request of n >= 1 GPUs takes n whole free cards (lowest index first);
// - a share below 1 goes best-fit onto one card: the fullest card that still fits;
// - each GPU grant reserves card memory: the request's gpu_memory when given, else
//   the share of the card's memory (0.25 of an 80 GiB card: 20 GiB). A whole card
//   reserves all of its memory unless gpu_memory says less;
// - release returns exactly what was taken, and refuses what was never taken;
// - what other programs hold on a card (card_others: another libtune cluster on the
//   same machine, a notebook, someone's job) is left to them: a share goes only where
//   its share and memory fit beside it, a whole card never where another program holds
//   it. Their holdings never change what this node has taken or gives back.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tune/core/gpu_instance.hpp"
#include "tune/core/resource_set.hpp"
#include "tune/core/status.hpp"

namespace tune {

// One card's part of an allocation.
struct gpu_grant {
  uint32_t card = 0;       // index into the node's gpus()
  quantity share;          // 1 for a whole card, else the fraction
  int64_t memory = 0;      // bytes reserved on the card (the trial's memory quota)
  friend bool operator==(const gpu_grant&, const gpu_grant&) = default;
};

// What one request took from one node.
struct allocation {
  resource_set host;              // cpu, memory and custom amounts taken
  std::vector<gpu_grant> gpus;    // in card order
  friend bool operator==(const allocation&, const allocation&) = default;
  // The GPU amount in all: the sum of the shares.
  quantity gpu_total() const;
};

// What programs other than a node's trials hold on one of its cards, as the node finds
// it (docs/gpu-sharing.md): other libtune clusters' claims on this machine, and the
// memory of processes that are no cluster's (found by the GPU audit), with a margin.
struct card_others {
  int64_t units = 0;   // share units other clusters claim on the card (0..1 card)
  int64_t memory = 0;  // bytes kept for them
  bool holds_card = false;  // the card is not given whole (another program holds it)
  std::string who;     // the largest holder, for people: "pid 4711 python3 (user ann), 20.3 GiB"
  bool any() const { return units > 0 || memory > 0 || holds_card; }
  friend bool operator==(const card_others&, const card_others&) = default;
};

// What is free on a node, as the node reports it to the head: the host amounts
// (cpu, memory, custom) and, per card, the free share units and free memory, and what
// other programs hold there (empty: nothing on any card).
struct node_availability {
  resource_set host;
  std::vector<int64_t> card_free;         // quantity units
  std::vector<int64_t> card_memory_free;  // bytes
  std::vector<card_others> others;        // one per card, or none
  friend bool operator==(const node_availability&, const node_availability&) = default;
};

class node_resources {
 public:
  node_resources() = default;

  // `host` holds cpu, memory and custom totals; its gpu and gpu_memory must be zero
  // (GPUs come from `gpus`, which must have distinct, non-empty UUIDs and memory > 0).
  static expected<node_resources> make(resource_set host, std::vector<gpu_instance> gpus);

  // Totals and what is free now. gpu() is the sum of the cards' free shares and
  // gpu_memory() the sum of their free memory.
  const resource_set& total() const { return total_; }
  const resource_set& available() const { return available_; }
  const std::vector<gpu_instance>& gpus() const { return *gpus_; }
  // What this node has not given to its own bundles on a card.
  quantity card_free(size_t card) const { return quantity::from_units(card_free_[card]); }
  int64_t card_memory_free(size_t card) const { return card_mem_free_[card]; }
  // What a new bundle may take there: the free part less what other programs hold
  // (never below 0).
  int64_t card_units_usable(size_t card) const;
  int64_t card_memory_usable(size_t card) const;
  // Cards with nothing on them: none of this node's bundles, nothing of others'.
  uint32_t whole_free_cards() const;
  bool card_whole_free(size_t card) const;

  // What other programs hold on each card (one per card, or none: nothing anywhere).
  // Refused, changing nothing: a list of another length, amounts outside 0..the card.
  status set_others(std::vector<card_others> others);
  const std::vector<card_others>& others() const { return others_; }
  const card_others* others_on(size_t card) const { return others_.empty() ? nullptr : &others_[card]; }
  // Whether `a`, not taken yet, fits now beside what other programs hold on its cards
  // (apply() alone checks only this node's own bookkeeping: bundles held already stay
  // held whatever appears beside them).
  bool beside_others(const allocation& a) const;
  // The same node as if no other program held anything.
  node_resources without_others() const;
  // Why `would` (what a request would take here were others gone) does not fit now:
  // "GPU 0 (GPU-8f3c...) is in use by another program: pid 4711 python3 (user ann),
  // 20.3 GiB", naming the first of its cards that others hold; "" when none is.
  std::string others_in_the_way(const allocation& would) const;

  // What allocate(request) would take now, without taking it: a checked request that
  // does not fit gives errc::insufficient; a bad request errc::invalid_argument.
  expected<allocation> plan(const resource_set& request) const;
  expected<allocation> allocate(const resource_set& request);
  // Takes an allocation planned on this node (or an identical one). Fails, changing
  // nothing, when it no longer fits.
  status apply(const allocation& a);
  // Gives back an allocation taken here. Refuses (changing nothing) one that would
  // free more than is taken: a double release or another node's allocation.
  status release(const allocation& a);

  // What is free now, and setting it from a report (the node is the authority on its
  // own reservations and on what others hold on its cards). A report that does not
  // match this node's cards, or claims more free than the totals or less than zero, is
  // refused and changes nothing.
  node_availability availability() const;
  status set_availability(const node_availability& a);

  // Whether `a` is what this node's rules give `request` on some cards (right host
  // amounts; whole cards or one card for a share; the memory each grant reserves),
  // whether or not those cards are free now.
  bool follows_rules(const resource_set& request, const allocation& a) const;

  // Whether the request would fit if the node were empty (other programs gone too).
  bool could_hold(const resource_set& request) const;
  // The same node with everything free, nothing of others' on it.
  node_resources emptied() const;
  bool is_empty() const { return available_ == total_; }

  // The load: the highest used fraction over CPU, GPU and memory, in quantity units
  // (0 = idle, 10000 = a resource fully used).
  int64_t load() const;

  // The memory a share reserves on a card when the request gives no gpu_memory.
  static int64_t implied_card_memory(quantity share, int64_t card_memory_total);

 private:
  // Best-fit card for a share, or -1.
  int find_share_card(quantity share, int64_t memory_wanted) const;
  bool share_fits(size_t card, int64_t units, int64_t memory) const;
  // Whether a grant not taken yet fits its card now, others included.
  bool grant_fits(const gpu_grant& g) const;
  // others_in_the_way() of what `request` would take were others gone ("" : they are not why).
  std::string others_reason(const resource_set& request) const;

  resource_set total_, available_;
  // Shared: copies of a node (placement tries them out) do not copy the descriptions.
  std::shared_ptr<const std::vector<gpu_instance>> gpus_ =
      std::make_shared<const std::vector<gpu_instance>>();
  std::vector<int64_t> card_free_;      // free share units per card
  std::vector<int64_t> card_mem_free_;  // free bytes per card
  std::vector<card_others> others_;     // per card, or empty: nothing of others' anywhere
};

}  // namespace tune
