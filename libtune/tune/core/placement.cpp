#include "tune/core/placement.hpp"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <optional>

namespace tune {

std::string_view to_string(strategy s) {
  switch (s) {
    case strategy::pack: return "PACK";
    case strategy::spread: return "SPREAD";
    case strategy::strict_pack: return "STRICT_PACK";
    case strategy::strict_spread: return "STRICT_SPREAD";
  }
  return "?";
}

expected<strategy> parse_strategy(std::string_view text) {
  std::string up{text};
  for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (auto s : {strategy::pack, strategy::spread, strategy::strict_pack, strategy::strict_spread})
    if (up == to_string(s)) return s;
  return status{errc::invalid_argument, "unknown placement strategy '" + std::string{text} +
                                            "'; use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"};
}

std::string_view to_string(outcome o) {
  switch (o) {
    case outcome::placed: return "placed";
    case outcome::not_now: return "not now";
    case outcome::infeasible: return "infeasible";
  }
  return "?";
}

namespace {

constexpr int64_t scale = quantity::scale;
constexpr int64_t key_shift = int64_t{1} << 20;  // above any load (<= scale)

// A bundle with the numbers the scans need.
struct shape {
  const resource_set* r = nullptr;
  size_t index = 0;    // position in the caller's list
  int64_t cpu = 0, memory = 0;
  int64_t share = 0;   // units when 0 < gpu < 1
  int64_t whole = 0;   // cards when gpu >= 1
  bool simple = true;  // no custom amounts and no gpu_memory: the summaries decide exactly
};

shape make_shape(const resource_set& r, size_t index) {
  shape s;
  s.r = &r;
  s.index = index;
  s.cpu = r.cpu().units();
  s.memory = r.memory();
  if (r.gpu() >= quantity::whole(1)) s.whole = r.gpu().whole_part();
  else s.share = r.gpu().units();
  s.simple = r.customs().empty() && r.gpu_memory() == 0;
  return s;
}

// Bigger bundles first: whole cards, then larger shares, then CPU, then memory.
bool larger(const shape& a, const shape& b) {
  if (a.whole != b.whole) return a.whole > b.whole;
  if (a.share != b.share) return a.share > b.share;
  if (a.cpu != b.cpu) return a.cpu > b.cpu;
  if (a.memory != b.memory) return a.memory > b.memory;
  return a.index < b.index;
}

// pack: best fit (fullest card, fewest free cards, busiest node);
// spread: least loaded node; room: the node with the most room (a group opening a node).
enum class prefer { pack, spread, room };

int64_t make_key(prefer p, const shape& b, int64_t load, int64_t best_card_free,
                 int64_t whole_free) {
  if (p == prefer::spread) return load;
  if (p == prefer::room) return b.whole > 0 ? -whole_free * key_shift + load : load;
  if (b.share > 0) return best_card_free;  // ties: the lower slot
  if (b.whole > 0) return whole_free * key_shift + (scale - load);
  return scale - load;
}

struct best_slot_hint {
  size_t slot = 0;
  int64_t key = 0;
  bool found = false;
};

// What a decision sees of each node: its state now; the same nodes with everything free
// (could it ever fit?); or its state now as if other programs held nothing on the cards
// (is it them it waits for?).
enum class basis { now, empty, no_others };

// The cluster as one decision sees it (its basis), plus copies of the nodes the decision
// has used.
class state {
 public:
  state(const cluster_view& v, basis b, const std::vector<char>& allowed) : view_(v), basis_(b), allowed_(allowed) {}

  bool allowed(size_t slot) const { return allowed_.empty() || allowed_[slot]; }

  bool touched(size_t slot) const { return overlay_of(slot) != nullptr; }
  const std::vector<std::pair<size_t, node_resources>>& overlay() const { return overlay_; }

  // The key (lower is better) of `b` on an untouched slot, or nothing if it does not fit.
  std::optional<int64_t> untouched_key(size_t slot, const shape& b, prefer p) const {
    if (!allowed(slot)) return std::nullopt;
    const auto& n = view_.node(slot);
    if (basis_ == basis::empty) {
      if (!n.could_hold(*b.r)) return std::nullopt;
      return make_key(p, b, 0, scale, static_cast<int64_t>(n.gpus().size()));
    }
    if (basis_ == basis::no_others) return node_key(n.without_others(), b, p);
    if (!b.simple) return node_key(n, b, p);
    const auto& s = view_.summaries()[slot];
    if (s.cpu_free < b.cpu || s.memory_free < b.memory) return std::nullopt;
    if (b.share > 0) {
      if (s.max_share < b.share) return std::nullopt;
      if (p != prefer::pack) return make_key(p, b, s.load, 0, 0);
      auto free = view_.card_free().subspan(s.first_card, s.cards);
      auto cap = view_.card_share_cap().subspan(s.first_card, s.cards);
      int64_t best = scale + 1;
      for (size_t c = 0; c < free.size(); ++c)
        if (cap[c] >= b.share && free[c] < best) best = free[c];
      return make_key(p, b, s.load, best, 0);
    }
    if (s.whole_free < b.whole) return std::nullopt;
    return make_key(p, b, s.load, 0, s.whole_free);
  }

  std::optional<int64_t> key(size_t slot, const shape& b, prefer p) const {
    if (auto* n = overlay_of(slot)) return node_key(*n, b, p);
    return untouched_key(slot, b, p);
  }

  // Takes `b` on `slot` (which fits) into this decision's copy of the node.
  allocation take(size_t slot, const shape& b) {
    auto* n = overlay_of(slot);
    if (!n) {
      overlay_.emplace_back(slot, base(slot));
      n = &overlay_.back().second;
    }
    auto a = n->allocate(*b.r);
    assert(a.has_value());
    return std::move(a).value();
  }

  // The node as this decision sees it, for a plan on an untouched slot.
  node_resources base(size_t slot) const {
    switch (basis_) {
      case basis::empty: return view_.node(slot).emptied();
      case basis::no_others: return view_.node(slot).without_others();
      case basis::now: break;
    }
    return view_.node(slot);
  }
  // What `b` takes on an untouched slot where it fits, leaving the slot untouched.
  allocation plan_untouched(size_t slot, const shape& b) const {
    auto a = basis_ == basis::now ? view_.node(slot).plan(*b.r) : base(slot).plan(*b.r);
    assert(a.has_value());
    return std::move(a).value();
  }
  const cluster_view& view() const { return view_; }
  bool empty_mode() const { return basis_ == basis::empty; }
  // The view's summaries and card index describe the nodes as this decision sees them.
  bool summaries_apply() const { return basis_ == basis::now; }

  // The best-fit card of the whole cluster for a simple share on untouched nodes, from
  // the view's index of cards by free share: the same choice as scanning every slot
  // with prefer::pack, in O(log cards) when the first candidates fit.
  best_slot_hint indexed_share(const shape& b) const {
    const auto& index = view_.cards_by_free();
    auto cap = view_.card_share_cap();
    auto slot_of = view_.card_slot();
    for (auto it = index.lower_bound({static_cast<int32_t>(b.share), 0}); it != index.end(); ++it) {
      auto card = it->second;
      if (cap[card] < b.share || !allowed(slot_of[card])) continue;
      const auto& s = view_.summaries()[slot_of[card]];
      if (s.cpu_free < b.cpu || s.memory_free < b.memory) continue;
      return {slot_of[card], it->first, true};
    }
    return {};
  }

 private:
  static std::optional<int64_t> node_key(const node_resources& n, const shape& b, prefer p) {
    auto a = n.plan(*b.r);
    if (!a) return std::nullopt;
    int64_t best = b.share > 0 ? n.card_units_usable(a->gpus.front().card) : 0;
    return make_key(p, b, n.load(), best, n.whole_free_cards());
  }

  node_resources* overlay_of(size_t slot) {
    for (auto& [s, n] : overlay_)
      if (s == slot) return &n;
    return nullptr;
  }
  const node_resources* overlay_of(size_t slot) const {
    for (auto& [s, n] : overlay_)
      if (s == slot) return &n;
    return nullptr;
  }

  const cluster_view& view_;
  basis basis_;
  const std::vector<char>& allowed_;  // per slot; empty: every slot
  std::vector<std::pair<size_t, node_resources>> overlay_;
};

// The result of one try: slots and allocations per bundle (caller's order), or
// where it failed.
struct attempt {
  bool ok = false;
  std::vector<size_t> slot;
  std::vector<allocation> alloc;
  size_t failed_bundle = 0;  // caller's index, when a bundle found no room
  size_t nodes_with_room = 0;  // STRICT_SPREAD: nodes that could take some bundle
};

struct best_slot {
  size_t slot = 0;
  int64_t key = 0;
  bool found = false;
  void offer(size_t s, std::optional<int64_t> k) {
    if (k && (!found || *k < key)) { slot = s; key = *k; found = true; }
  }
};

// Bundle by bundle, biggest first. PACK looks at the nodes the group uses first (best
// fit) and opens the roomiest node next when a group has several bundles; SPREAD
// looks at the nodes the group does not use first.
attempt sequential(state& st, std::vector<shape> shapes, prefer p) {
  const prefer opening = p == prefer::pack && shapes.size() > 1 ? prefer::room : p;
  attempt out;
  out.slot.resize(shapes.size());
  out.alloc.resize(shapes.size());
  std::sort(shapes.begin(), shapes.end(), larger);
  const size_t n = st.view().size();
  for (auto& b : shapes) {
    best_slot used, fresh;
    for (auto& [s, node] : st.overlay()) used.offer(s, st.key(s, b, p));
    if (!(p == prefer::pack && used.found)) {
      if (opening == prefer::pack && b.share > 0 && b.simple && st.overlay().empty() && st.summaries_apply()) {
        auto hint = st.indexed_share(b);
        fresh.offer(hint.slot, hint.found ? std::optional<int64_t>{hint.key} : std::nullopt);
      } else if (st.overlay().empty()) {
        for (size_t s = 0; s < n; ++s) fresh.offer(s, st.untouched_key(s, b, opening));
      } else {
        for (size_t s = 0; s < n; ++s)
          if (!st.touched(s)) fresh.offer(s, st.untouched_key(s, b, opening));
      }
    }
    best_slot pick = p == prefer::pack ? (used.found ? used : fresh) : (fresh.found ? fresh : used);
    if (!pick.found) {
      out.failed_bundle = b.index;
      return out;
    }
    out.slot[b.index] = pick.slot;
    out.alloc[b.index] = st.take(pick.slot, b);
  }
  out.ok = true;
  return out;
}

// All bundles on one node: the busiest node that has room for their sum first.
attempt strict_pack(state& st, std::vector<shape> shapes) {
  attempt out;
  resource_set sum;
  for (auto& b : shapes) sum += *b.r;
  std::sort(shapes.begin(), shapes.end(), larger);
  int64_t whole = 0;
  for (auto& b : shapes) whole += b.whole;
  std::vector<std::pair<int64_t, size_t>> candidates;  // (key, slot)
  for (size_t s = 0; s < st.view().size(); ++s) {
    if (!st.allowed(s)) continue;
    const auto& n = st.view().node(s);
    const auto& free = st.empty_mode() ? n.total() : n.available();
    if (!sum.host_fits_in(free) || sum.gpu() > free.gpu()) continue;
    int64_t whole_free = st.empty_mode()       ? static_cast<int64_t>(n.gpus().size())
                         : st.summaries_apply() ? st.view().summaries()[s].whole_free
                                                : static_cast<int64_t>(st.base(s).whole_free_cards());
    if (whole > whole_free) continue;
    int64_t load = st.empty_mode() ? 0 : st.view().summaries()[s].load;
    candidates.emplace_back(scale - load, s);
  }
  std::sort(candidates.begin(), candidates.end());
  for (auto& [key, s] : candidates) {
    node_resources n = st.base(s);
    std::vector<allocation> got(shapes.size());
    bool ok = true;
    for (auto& b : shapes) {
      auto a = n.allocate(*b.r);
      if (!a) { ok = false; break; }
      got[b.index] = std::move(a).value();
    }
    if (!ok) continue;
    out.ok = true;
    out.slot.assign(shapes.size(), s);
    out.alloc = std::move(got);
    return out;
  }
  return out;
}

// Kuhn's augmenting paths: bundle -> slot, each slot used once.
bool augment(size_t b, const std::vector<std::vector<size_t>>& cand, std::vector<long>& owner,
             std::vector<char>& seen, std::vector<size_t>& slot_of_bundle) {
  for (size_t s : cand[b]) {
    if (seen[s]) continue;
    seen[s] = 1;
    if (owner[s] < 0 ||
        augment(static_cast<size_t>(owner[s]), cand, owner, seen, slot_of_bundle)) {
      owner[s] = static_cast<long>(b);
      slot_of_bundle[b] = s;
      return true;
    }
  }
  return false;
}

// Every bundle on a different node: least loaded first, the most constrained bundle
// first; an exact matching when the greedy pass misses one.
attempt strict_spread(const state& st, const std::vector<shape>& shapes) {
  attempt out;
  const size_t n = st.view().size(), k = shapes.size();
  // Identical bundles share one candidate list.
  std::vector<size_t> list_of(k);
  std::vector<std::vector<std::pair<int64_t, size_t>>> lists;
  std::vector<size_t> list_rep;
  for (size_t i = 0; i < k; ++i) {
    size_t j = 0;
    while (j < list_rep.size() && !(*shapes[list_rep[j]].r == *shapes[i].r)) ++j;
    if (j == list_rep.size()) {
      list_rep.push_back(i);
      auto& l = lists.emplace_back();
      for (size_t s = 0; s < n; ++s)
        if (auto key = st.untouched_key(s, shapes[i], prefer::spread)) l.emplace_back(*key, s);
    }
    list_of[i] = j;
  }
  std::vector<char> any_room(n, 0);
  for (auto& l : lists)
    for (auto& [key, s] : l) any_room[s] = 1;
  out.nodes_with_room = static_cast<size_t>(std::count(any_room.begin(), any_room.end(), 1));
  for (auto& l : lists) {
    if (lists.size() == 1 && l.size() > k)
      std::partial_sort(l.begin(), l.begin() + static_cast<long>(k), l.end());
    else
      std::sort(l.begin(), l.end());
  }
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lists[list_of[a]].size() < lists[list_of[b]].size();
  });
  std::vector<char> used(n, 0);
  std::vector<size_t> slot(k);
  bool greedy_ok = true;
  for (size_t i : order) {
    auto& l = lists[list_of[i]];
    auto it = std::find_if(l.begin(), l.end(), [&](auto& e) { return !used[e.second]; });
    if (it == l.end()) { greedy_ok = false; break; }
    used[it->second] = 1;
    slot[i] = it->second;
  }
  if (!greedy_ok) {
    std::vector<std::vector<size_t>> cand(k);
    for (size_t i = 0; i < k; ++i)
      for (auto& [key, s] : lists[list_of[i]]) cand[i].push_back(s);
    std::vector<long> owner(n, -1);
    for (size_t i : order) {
      std::vector<char> seen(n, 0);
      if (!augment(i, cand, owner, seen, slot)) {
        out.failed_bundle = shapes[i].index;
        return out;
      }
    }
  }
  out.slot.resize(k);
  out.alloc.resize(k);
  for (size_t i = 0; i < k; ++i) {
    out.slot[shapes[i].index] = slot[i];
    out.alloc[shapes[i].index] = st.plan_untouched(slot[i], shapes[i]);
  }
  out.ok = true;
  return out;
}

attempt run(strategy s, state& st, const std::vector<shape>& shapes) {
  switch (s) {
    case strategy::pack: {
      if (shapes.size() == 1) return sequential(st, shapes, prefer::pack);
      auto a = strict_pack(st, shapes);
      return a.ok ? a : sequential(st, shapes, prefer::pack);
    }
    case strategy::spread: return sequential(st, shapes, prefer::spread);
    case strategy::strict_pack: return strict_pack(st, shapes);
    case strategy::strict_spread: return strict_spread(st, shapes);
  }
  return {};
}

std::string plural(int64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string{n == 1 ? one : many};
}

// "2 free GPUs on one node", "a card with 0.25 of a GPU free", "a node with {cpu: 4} free".
std::string wanted(const resource_set& r) {
  resource_set host = r;
  host.set_gpu({}).set_gpu_memory(0);
  std::string with = host.empty() ? "" : " and " + host.to_string();
  std::string mem = r.gpu_memory() > 0 ? " with " + format_bytes(r.gpu_memory()) : "";
  if (r.gpu() >= quantity::whole(1))
    return plural(r.gpu().whole_part(), "free GPU", "free GPUs") + mem + " on one node" + with;
  if (!r.gpu().is_zero()) return "a card with " + r.gpu().to_string() + " of a GPU" + mem +
                                 " free" + (with.empty() ? "" : " on a node with" + with.substr(4));
  return "a node with " + r.to_string() + " free";
}

// The largest amounts any node has, to say what a bundle asks beyond them.
struct largest {
  int64_t gpus = 0, card_memory = 0, memory = 0;
  quantity cpu;
  largest(const cluster_view& v, const std::vector<char>& allowed) {
    for (size_t s = 0; s < v.size(); ++s) {
      if (!allowed.empty() && !allowed[s]) continue;
      const auto& n = v.node(s);
      gpus = std::max<int64_t>(gpus, static_cast<int64_t>(n.gpus().size()));
      for (auto& g : n.gpus()) card_memory = std::max(card_memory, g.memory_total);
      memory = std::max(memory, n.total().memory());
      cpu = std::max(cpu, n.total().cpu());
    }
  }
  static quantity custom(const cluster_view& v, const std::vector<char>& allowed, std::string_view name) {
    quantity m;
    for (size_t s = 0; s < v.size(); ++s)
      if (allowed.empty() || allowed[s]) m = std::max(m, v.node(s).total().custom(name));
    return m;
  }
};

// Why no node could ever hold `r` (named `what`: "bundle 2", "the group").
std::string never_fits(const cluster_view& v, const std::vector<char>& allowed, const resource_set& r,
                       const std::string& what) {
  largest l{v, allowed};
  const std::string node = allowed.empty() ? "node" : "node allowed";
  auto g = r.gpu();
  if (!g.is_zero() && l.gpus == 0)
    return what + " asks " + (g >= quantity::whole(1) ? plural(g.whole_part(), "GPU", "GPUs")
                                                       : g.to_string() + " of a GPU") +
           "; no " + node + " has a GPU";
  if (g >= quantity::whole(1) && g.whole_part() > l.gpus)
    return what + " asks " + plural(g.whole_part(), "GPU", "GPUs") + "; the largest " + node + " has " +
           std::to_string(l.gpus);
  if (!g.is_whole() && g > quantity::whole(1))
    return what + " needs " + g.to_string() + " GPUs on one node; the largest " + node + " has " +
           std::to_string(l.gpus);
  if (r.gpu_memory() > l.card_memory)
    return what + " asks " + format_bytes(r.gpu_memory()) +
           " of GPU memory per card; the largest card has " + format_bytes(l.card_memory);
  if (r.cpu() > l.cpu)
    return what + " asks " + r.cpu().to_string() + " CPUs; the largest " + node + " has " +
           l.cpu.to_string();
  if (r.memory() > l.memory)
    return what + " asks " + format_bytes(r.memory()) + " of memory; the largest " + node + " has " +
           format_bytes(l.memory);
  for (auto& [name, q] : r.customs()) {
    auto most = largest::custom(v, allowed, name);
    if (most.is_zero()) return what + " asks " + q.to_string() + " '" + name + "'; no " + node + " has '" + name + "'";
    if (q > most)
      return what + " asks " + q.to_string() + " '" + name + "'; the most any " + node + " has is " +
             most.to_string();
  }
  return what + " asks " + r.to_string() + "; no " + node + " has all of it at once";
}

std::string why_infeasible(const cluster_view& v, strategy s, const std::vector<shape>& shapes,
                           const attempt& when_empty, const std::vector<char>& allowed) {
  if (v.empty()) return "the cluster has no nodes; start a node (tune start --address ...)";
  bool none_allowed = !allowed.empty() && std::find(allowed.begin(), allowed.end(), 1) == allowed.end();
  if (none_allowed) return "every node of the cluster is excluded for this placement";
  for (auto& b : shapes) {
    bool any = false;
    for (size_t slot = 0; slot < v.size() && !any; ++slot)
      any = (allowed.empty() || allowed[slot]) && v.node(slot).could_hold(*b.r);
    if (!any) return never_fits(v, allowed, *b.r, "bundle " + std::to_string(b.index));
  }
  switch (s) {
    case strategy::strict_pack: {
      resource_set sum;
      for (auto& b : shapes) sum += *b.r;
      auto why = never_fits(v, allowed, sum, "STRICT_PACK of " + plural(static_cast<int64_t>(shapes.size()), "bundle", "bundles"));
      return why;
    }
    case strategy::strict_spread:
      return "STRICT_SPREAD needs " + plural(static_cast<int64_t>(shapes.size()), "node", "nodes") +
             " that can each hold a bundle; the cluster has " +
             std::to_string(when_empty.nodes_with_room) + " that can hold one";
    default:
      return "the " + plural(static_cast<int64_t>(shapes.size()), "bundle", "bundles") +
             " do not fit together even when the cluster is empty";
  }
}

std::string why_not_now(strategy s, const std::vector<shape>& shapes, const attempt& now) {
  const size_t k = shapes.size();
  switch (s) {
    case strategy::strict_pack: {
      resource_set sum;
      for (auto& b : shapes) sum += *b.r;
      return "waiting for one node with room for all " + plural(static_cast<int64_t>(k), "bundle", "bundles") +
             " (" + sum.to_string() + ")";
    }
    case strategy::strict_spread:
      return "waiting for " + std::to_string(k) +
             " different nodes with room for a bundle; " + std::to_string(now.nodes_with_room) +
             " have room now";
    default: {
      std::string prefix = k > 1 ? "bundle " + std::to_string(now.failed_bundle) + ": " : "";
      return prefix + "waiting for " + wanted(*shapes[now.failed_bundle].r);
    }
  }
}

// "waiting: GPU 0 (GPU-...) is in use by another program: ..." when the group would be
// placed now were it not for other programs on the cards; "" otherwise.
std::string others_in_the_way(const cluster_view& view, strategy s, const std::vector<shape>& shapes,
                              const std::vector<char>& allowed) {
  if (!view.any_others()) return {};
  state without{view, basis::no_others, allowed};
  auto w = run(s, without, shapes);
  if (!w.ok) return {};
  for (size_t i = 0; i < shapes.size(); ++i)
    if (auto why = view.node(w.slot[i]).others_in_the_way(w.alloc[i]); !why.empty()) return "waiting: " + why;
  return {};
}

}  // namespace

expected<placement> place_preferring(const cluster_view& view, std::span<const resource_set> bundles, strategy s,
                                     std::span<const node_id> avoid, std::span<const node_id> prefer) {
  if (!prefer.empty()) {
    std::vector<node_id> others(avoid.begin(), avoid.end());
    for (size_t slot = 0; slot < view.size(); ++slot)
      if (std::find(prefer.begin(), prefer.end(), view.id(slot)) == prefer.end()) others.push_back(view.id(slot));
    auto p = place(view, bundles, s, others);
    if (!p || p->result == outcome::placed) return p;
  }
  return place(view, bundles, s, avoid);
}

expected<placement> place(const cluster_view& view, std::span<const resource_set> bundles,
                          strategy s, std::span<const node_id> avoid) {
  if (bundles.empty())
    return status{errc::invalid_argument, "a placement group needs at least one bundle"};
  std::vector<shape> shapes;
  shapes.reserve(bundles.size());
  for (size_t i = 0; i < bundles.size(); ++i) {
    if (auto st = check_request(bundles[i]); !st)
      return status{errc::invalid_argument, "bundle " + std::to_string(i) + ": " + st.message()};
    shapes.push_back(make_shape(bundles[i], i));
  }
  std::vector<char> allowed;  // empty: every node
  if (!avoid.empty()) {
    allowed.assign(view.size(), 1);
    for (auto& id : avoid)
      if (auto slot = view.slot_of(id)) allowed[*slot] = 0;
  }
  placement p;
  if (!view.empty()) {
    state now{view, basis::now, allowed};
    auto a = run(s, now, shapes);
    if (a.ok) {
      p.result = outcome::placed;
      p.bundles.reserve(bundles.size());
      for (size_t i = 0; i < bundles.size(); ++i)
        p.bundles.push_back({view.id(a.slot[i]), std::move(a.alloc[i])});
      return p;
    }
    state empty{view, basis::empty, allowed};
    auto e = run(s, empty, shapes);
    if (e.ok) {
      p.result = outcome::not_now;
      p.reason = others_in_the_way(view, s, shapes, allowed);
      if (p.reason.empty()) p.reason = why_not_now(s, shapes, a);
      return p;
    }
    p.result = outcome::infeasible;
    p.reason = why_infeasible(view, s, shapes, e, allowed);
    return p;
  }
  p.result = outcome::infeasible;
  p.reason = why_infeasible(view, s, shapes, attempt{}, allowed);
  return p;
}

namespace {

// Does `step` for every bundle; when one fails, undoes the ones done with `undo`.
template <class Step, class Undo>
status for_all_bundles(cluster_view& view, const placement& p, Step step, Undo undo) {
  for (size_t i = 0; i < p.bundles.size(); ++i) {
    auto st = (view.*step)(p.bundles[i].node, p.bundles[i].alloc);
    if (st) continue;
    for (size_t j = i; j-- > 0;) {
      auto back = (view.*undo)(p.bundles[j].node, p.bundles[j].alloc);
      assert(back.is_ok());
      (void)back;
    }
    return {st.code(), "bundle " + std::to_string(i) + " on node " + p.bundles[i].node + ": " +
                           st.message()};
  }
  return status::ok();
}

}  // namespace

status commit(cluster_view& view, const placement& p) {
  if (p.result != outcome::placed)
    return {errc::invalid_argument, "only a placed decision can be committed"};
  return for_all_bundles(view, p, &cluster_view::apply, &cluster_view::release);
}

status release(cluster_view& view, const placement& p) {
  return for_all_bundles(view, p, &cluster_view::release, &cluster_view::apply);
}

}  // namespace tune
