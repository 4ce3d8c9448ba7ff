#include "tune/core/cluster_view.hpp"

#include <algorithm>

namespace tune {

namespace {

// The largest share s (units) with s <= free and implied_card_memory(s) <= mem_free:
// implied memory floor(s * total / scale) <= M  <=>  s < (M + 1) * scale / total.
int32_t share_cap(int64_t free, int64_t mem_free, int64_t mem_total) {
  auto x = static_cast<__int128>(mem_free + 1) * quantity::scale;
  auto by_memory = static_cast<int64_t>((x + mem_total - 1) / mem_total - 1);
  return static_cast<int32_t>(std::min({free, by_memory, quantity::scale}));
}

}  // namespace

cluster_view::slot_summary cluster_view::summarize(const node_resources& n) {
  slot_summary s;
  s.cpu_free = n.available().cpu().units();
  s.memory_free = n.available().memory();
  s.load = n.load();
  s.whole_free = static_cast<int32_t>(n.whole_free_cards());
  s.cards = static_cast<uint32_t>(n.gpus().size());
  for (size_t c = 0; c < n.gpus().size(); ++c)
    s.max_share = std::max<int64_t>(
        s.max_share, share_cap(n.card_units_usable(c), n.card_memory_usable(c), n.gpus()[c].memory_total));
  return s;
}

void cluster_view::sync(size_t slot) {
  auto first = summary_[slot].first_card;
  summary_[slot] = summarize(nodes_[slot]);
  summary_[slot].first_card = first;
  const auto& n = nodes_[slot];
  for (size_t c = 0; c < n.gpus().size(); ++c) {
    auto card = static_cast<uint32_t>(first + c);
    auto free = static_cast<int32_t>(n.card_units_usable(c));
    if (free != card_free_[card]) {
      if (card_free_[card] > 0) by_free_.erase({card_free_[card], card});
      if (free > 0) by_free_.insert({free, card});
    }
    card_slot_[card] = static_cast<uint32_t>(slot);
    card_free_[first + c] = free;
    card_cap_[first + c] = share_cap(n.card_units_usable(c), n.card_memory_usable(c), n.gpus()[c].memory_total);
  }
}

void cluster_view::rebuild_cards() {
  size_t total = 0;
  for (auto& n : nodes_) total += n.gpus().size();
  card_free_.assign(total, 0);
  card_cap_.assign(total, 0);
  card_slot_.assign(total, 0);
  by_free_.clear();
  uint32_t next = 0;
  for (size_t s = 0; s < nodes_.size(); ++s) {
    summary_[s].first_card = next;
    next += static_cast<uint32_t>(nodes_[s].gpus().size());
    sync(s);
  }
}

status cluster_view::add_node(node_id id, node_resources resources) {
  if (id.empty()) return {errc::invalid_argument, "a node id is empty"};
  if (slot_.count(id)) return {errc::already_exists, "node " + id + " is already in the cluster"};
  slot_.emplace(id, ids_.size());
  ids_.push_back(std::move(id));
  nodes_.push_back(std::move(resources));
  summary_.emplace_back();
  summary_.back().first_card = static_cast<uint32_t>(card_free_.size());
  card_free_.resize(card_free_.size() + nodes_.back().gpus().size());
  card_cap_.resize(card_free_.size());
  card_slot_.resize(card_free_.size());
  sync(nodes_.size() - 1);
  return status::ok();
}

status cluster_view::remove_node(const node_id& id) {
  auto it = slot_.find(id);
  if (it == slot_.end()) return {errc::not_found, "node " + id + " is not in the cluster"};
  size_t s = it->second, last = ids_.size() - 1;
  slot_.erase(it);
  if (s != last) {
    ids_[s] = std::move(ids_[last]);
    nodes_[s] = std::move(nodes_[last]);
    slot_[ids_[s]] = s;
  }
  ids_.pop_back();
  nodes_.pop_back();
  summary_.pop_back();
  rebuild_cards();
  return status::ok();
}

std::optional<size_t> cluster_view::slot_of(const node_id& id) const {
  auto it = slot_.find(id);
  if (it == slot_.end()) return std::nullopt;
  return it->second;
}

const node_resources* cluster_view::find(const node_id& id) const {
  auto s = slot_of(id);
  return s ? &nodes_[*s] : nullptr;
}

namespace {
status unknown_node(const node_id& id) {
  return {errc::not_found, "node " + id + " is not in the cluster (it left or never joined)"};
}
}  // namespace

template <class Change>
auto cluster_view::change(const node_id& id, Change f) -> decltype(f(std::declval<node_resources&>())) {
  auto s = slot_of(id);
  if (!s) return unknown_node(id);
  auto result = f(nodes_[*s]);
  if (result) sync(*s);
  return result;
}

expected<allocation> cluster_view::allocate(const node_id& id, const resource_set& request) {
  return change(id, [&](node_resources& n) { return n.allocate(request); });
}

status cluster_view::apply(const node_id& id, const allocation& a) {
  return change(id, [&](node_resources& n) { return n.apply(a); });
}

status cluster_view::release(const node_id& id, const allocation& a) {
  return change(id, [&](node_resources& n) { return n.release(a); });
}

status cluster_view::set_availability(const node_id& id, const node_availability& a) {
  return change(id, [&](node_resources& n) { return n.set_availability(a); });
}

status cluster_view::set_others(const node_id& id, std::vector<card_others> others) {
  auto s = slot_of(id);
  if (!s) return unknown_node(id);
  if (nodes_[*s].others() == others) return status::ok();
  auto st = nodes_[*s].set_others(std::move(others));
  if (st) sync(*s);
  return st;
}

bool cluster_view::any_others() const {
  return std::any_of(nodes_.begin(), nodes_.end(), [](const node_resources& n) { return !n.others().empty(); });
}

bool cluster_view::summaries_consistent() const {
  if (summary_.size() != nodes_.size()) return false;
  uint32_t next = 0;
  for (size_t s = 0; s < nodes_.size(); ++s) {
    auto want = summarize(nodes_[s]);
    const auto& have = summary_[s];
    if (have.first_card != next || have.cpu_free != want.cpu_free ||
        have.memory_free != want.memory_free || have.load != want.load ||
        have.max_share != want.max_share || have.whole_free != want.whole_free ||
        have.cards != want.cards)
      return false;
    const auto& n = nodes_[s];
    for (size_t c = 0; c < n.gpus().size(); ++c) {
      if (card_free_[next + c] != n.card_units_usable(c)) return false;
      if (card_slot_[next + c] != s) return false;
      bool indexed = by_free_.count({card_free_[next + c], next + c}) == 1;
      if (indexed != (card_free_[next + c] > 0)) return false;
      if (card_cap_[next + c] != share_cap(n.card_units_usable(c), n.card_memory_usable(c), n.gpus()[c].memory_total))
        return false;
    }
    next += static_cast<uint32_t>(n.gpus().size());
  }
  size_t with_room = 0;
  for (auto f : card_free_) with_room += f > 0;
  return next == card_free_.size() && by_free_.size() == with_room;
}

}  // namespace tune
