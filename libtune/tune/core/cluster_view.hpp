// The cluster as placement sees it: every schedulable node with its resources, and
// flat summaries of what is free, kept in step with every change, so that policies
// scan a thousand nodes in microseconds. Policies read a `const cluster_view&`;
// only the owner (the head) changes it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tune/core/node_resources.hpp"
#include "tune/core/status.hpp"

namespace tune {

using node_id = std::string;

class cluster_view {
 public:
  // What is free on one node, in flat numbers (derived from its node_resources).
  struct slot_summary {
    int64_t cpu_free = 0;     // quantity units
    int64_t memory_free = 0;  // bytes
    int64_t load = 0;         // node_resources::load()
    int64_t max_share = 0;    // the largest share (units) one card still takes, memory implied
    int32_t whole_free = 0;   // cards with nothing on them
    uint32_t first_card = 0;  // this node's cards in card_free() / card_share_cap()
    uint32_t cards = 0;
  };

  status add_node(node_id id, node_resources resources);
  // Forgets a node and what was allocated on it. Slots after it may move.
  status remove_node(const node_id& id);

  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  const node_id& id(size_t slot) const { return ids_[slot]; }
  const node_resources& node(size_t slot) const { return nodes_[slot]; }
  std::optional<size_t> slot_of(const node_id& id) const;
  const node_resources* find(const node_id& id) const;

  expected<allocation> allocate(const node_id& id, const resource_set& request);
  status apply(const node_id& id, const allocation& a);
  status release(const node_id& id, const allocation& a);
  status set_availability(const node_id& id, const node_availability& a);
  // What other programs hold on a node's cards (node_resources::set_others).
  status set_others(const node_id& id, std::vector<card_others> others);
  // Whether any node has something of others' on a card (a scan of the nodes).
  bool any_others() const;

  // The summaries, one per slot, and per card (all nodes' cards in slot order): the
  // free share (what others hold there left out), and the largest share the card takes
  // with its implied memory.
  std::span<const slot_summary> summaries() const { return summary_; }
  std::span<const int32_t> card_free() const { return card_free_; }
  std::span<const int32_t> card_share_cap() const { return card_cap_; }
  // The slot of each card.
  std::span<const uint32_t> card_slot() const { return card_slot_; }
  // Cards with some share free, as (free share units, card), fullest first: best fit
  // for a share s starts at lower_bound({s, 0}).
  const std::set<std::pair<int32_t, uint32_t>>& cards_by_free() const { return by_free_; }

  // Recomputes every summary from the nodes and compares: for tests.
  bool summaries_consistent() const;

 private:
  // Runs f on the node and re-syncs its summaries when f succeeded.
  template <class Change>
  auto change(const node_id& id, Change f) -> decltype(f(std::declval<node_resources&>()));
  void sync(size_t slot);
  void rebuild_cards();
  static slot_summary summarize(const node_resources& n);

  std::vector<node_id> ids_;
  std::vector<node_resources> nodes_;
  std::unordered_map<node_id, size_t> slot_;
  std::vector<slot_summary> summary_;
  std::vector<int32_t> card_free_, card_cap_;
  std::vector<uint32_t> card_slot_;
  std::set<std::pair<int32_t, uint32_t>> by_free_;
};

}  // namespace tune
