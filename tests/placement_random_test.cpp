// Randomized operations on a cluster view (allocate, release, place and commit groups,
// add and remove nodes), checking the invariants after every step. The seed is printed
// on failure; LIBTUNE_SEED=<n> replays one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include "tune/core/placement.hpp"

namespace tune {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;

struct held {
  node_id node;
  allocation alloc;
  int group = -1;  // bundles of one committed group share a number
};

class random_cluster {
 public:
  explicit random_cluster(uint64_t seed) : rng_(seed) {
    for (int i = 0; i < 6; ++i) add_node();
  }

  void step() {
    int op = pick(100);
    if (op < 35) allocate_one();
    else if (op < 55) release_one();
    else if (op < 85) place_group();
    else if (op < 90) release_group();
    else if (op < 95) remove_node();
    else add_node();
    check_invariants();
  }

  int ops_of_each_outcome(outcome o) const { return outcomes_.count(o) ? outcomes_.at(o) : 0; }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <class T> const T& pick_of(const std::vector<T>& v) { return v[pick(static_cast<int>(v.size()))]; }

  void add_node() {
    if (view_.size() >= 12) return;
    static const std::vector<int> gpu_counts{0, 1, 2, 4, 8};
    static const std::vector<int64_t> card_mems{16 * GiB, 40 * GiB, 80 * GiB};
    static const std::vector<double> cpus{4, 8, 16, 64};
    std::string id = 'n' + std::to_string(next_id_++);
    int gpus = pick_of(gpu_counts);
    int64_t mem = pick_of(card_mems);
    std::vector<gpu_instance> cards;
    for (int c = 0; c < gpus; ++c)
      cards.push_back({c, id + "-gpu" + std::to_string(c), "bus", "card", mem, false});
    resource_set host;
    host.set_cpu(*quantity::from_double(pick_of(cpus), "cpu")).set_memory(int64_t{64 + pick(4) * 64} * GiB);
    if (pick(3) == 0) host.set_custom("tpu", quantity::whole(1 + pick(4)));
    auto n = node_resources::make(host, cards);
    ASSERT_TRUE(n);
    ASSERT_TRUE(view_.add_node(id, *n));
  }

  void remove_node() {
    if (view_.size() <= 1) return;
    node_id id = view_.id(static_cast<size_t>(pick(static_cast<int>(view_.size()))));
    ASSERT_TRUE(view_.remove_node(id));
    std::erase_if(held_, [&](const held& h) { return h.node == id; });
  }

  // A request, sometimes a bad one (bad: set to true).
  resource_set random_request(bool& bad) {
    static const std::vector<double> gpus{0, 0, 0.1, 0.125, 0.25, 0.25, 0.3, 0.5, 0.5, 0.75, 1, 1, 1, 2, 2, 3, 4, 8};
    static const std::vector<double> cpus{0, 0.5, 1, 1, 2, 2, 4, 4, 8, 64};
    resource_set r;
    r.set_gpu(*quantity::from_double(pick_of(gpus), "gpu"));
    r.set_cpu(*quantity::from_double(pick_of(cpus), "cpu"));
    if (pick(4) == 0) r.set_memory(int64_t{1 + pick(100)} * GiB);
    if (!r.gpu().is_zero() && pick(6) == 0) r.set_gpu_memory(int64_t{1 + pick(90)} * GiB);
    if (pick(8) == 0) r.set_custom("tpu", quantity::whole(1 + pick(3)));
    bad = false;
    switch (pick(40)) {
      case 0: r.set_gpu(*quantity::parse("1.5", "gpu")); bad = true; break;
      case 1: r.set_cpu(quantity::from_units(-1)); bad = true; break;
      case 2: r = resource_set{}; bad = true; break;
      case 3: r.set_gpu({}).set_gpu_memory(GiB); bad = true; break;
      default: break;
    }
    if (!bad && r.empty()) r.set_cpu(quantity::whole(1));
    return r;
  }

  std::vector<resource_set> availability() const {
    std::vector<resource_set> out;
    for (size_t s = 0; s < view_.size(); ++s) {
      out.push_back(view_.node(s).available());
      for (size_t c = 0; c < view_.node(s).gpus().size(); ++c) {
        resource_set card;  // one entry per card keeps the comparison exact
        card.set_gpu(view_.node(s).card_free(c)).set_memory(view_.node(s).card_memory_free(c));
        out.push_back(card);
      }
    }
    return out;
  }

  void allocate_one() {
    bool bad;
    auto r = random_request(bad);
    node_id id = view_.id(static_cast<size_t>(pick(static_cast<int>(view_.size()))));
    auto before = availability();
    auto a = view_.allocate(id, r);
    if (bad) {
      ASSERT_FALSE(a) << r.to_string();
      EXPECT_EQ(a.error().code(), errc::invalid_argument);
    }
    if (!a) {
      ASSERT_EQ(availability(), before) << "a failed allocation changed the node";
      return;
    }
    check_grants(*view_.find(id), r, *a);
    held_.push_back({id, *a});
  }

  void release_one() {
    if (held_.empty()) return;
    size_t i = static_cast<size_t>(pick(static_cast<int>(held_.size())));
    if (held_[i].group >= 0) return;  // groups go together
    ASSERT_TRUE(view_.release(held_[i].node, held_[i].alloc));
    // A second release of the same allocation must be refused and change nothing.
    auto before = availability();
    auto again = view_.release(held_[i].node, held_[i].alloc);
    if (!again) {
      ASSERT_EQ(availability(), before);
    } else {  // it freed another allocation's equal share: put it back
      ASSERT_TRUE(view_.apply(held_[i].node, held_[i].alloc));
    }
    held_.erase(held_.begin() + static_cast<long>(i));
  }

  void release_group() {
    if (groups_.empty()) return;
    auto it = groups_.begin();
    std::advance(it, pick(static_cast<int>(groups_.size())));
    int g = *it;
    groups_.erase(it);
    for (auto& h : held_)
      if (h.group == g) {
        ASSERT_TRUE(view_.release(h.node, h.alloc));
      }
    std::erase_if(held_, [&](const held& h) { return h.group == g; });
  }

  // A fresh view of the same nodes with everything free.
  cluster_view emptied() const {
    cluster_view v;
    for (size_t s = 0; s < view_.size(); ++s) EXPECT_TRUE(v.add_node(view_.id(s), view_.node(s).emptied()));
    return v;
  }

  // Whether the bundles can sit on distinct nodes by the nodes' totals (augmenting paths).
  bool spread_matching_exists(const std::vector<resource_set>& bundles, const std::vector<node_id>& avoid) const {
    std::vector<long> owner(view_.size(), -1);
    std::function<bool(size_t, std::vector<char>&)> try_bundle = [&](size_t b, std::vector<char>& seen) {
      for (size_t s = 0; s < view_.size(); ++s) {
        if (seen[s] || !view_.node(s).could_hold(bundles[b])) continue;
        if (std::find(avoid.begin(), avoid.end(), view_.id(s)) != avoid.end()) continue;
        seen[s] = 1;
        if (owner[s] < 0 || try_bundle(static_cast<size_t>(owner[s]), seen)) {
          owner[s] = static_cast<long>(b);
          return true;
        }
      }
      return false;
    };
    for (size_t b = 0; b < bundles.size(); ++b) {
      std::vector<char> seen(view_.size(), 0);
      if (!try_bundle(b, seen)) return false;
    }
    return true;
  }

  void place_group() {
    static const std::vector<strategy> strategies{strategy::pack, strategy::spread,
                                                  strategy::strict_pack, strategy::strict_spread};
    strategy s = pick_of(strategies);
    int k = 1 + pick(6);
    bool any_bad = false;
    std::vector<resource_set> bundles;
    if (pick(2) == 0) {  // identical bundles, as trials usually ask
      bool bad;
      auto r = random_request(bad);
      any_bad = bad;
      bundles.assign(static_cast<size_t>(k), r);
    } else {
      for (int i = 0; i < k; ++i) {
        bool bad;
        bundles.push_back(random_request(bad));
        any_bad |= bad;
      }
    }
    std::vector<node_id> avoid;  // sometimes a node or two are off limits (drained, ...)
    if (pick(5) == 0)
      for (int i = 0, n = 1 + pick(2); i < n; ++i) avoid.push_back(view_.id(static_cast<size_t>(pick(static_cast<int>(view_.size())))));
    auto allowed = [&](const node_id& id) { return std::find(avoid.begin(), avoid.end(), id) == avoid.end(); };
    auto before = availability();
    auto p = place(view_, bundles, s, avoid);
    ASSERT_EQ(availability(), before) << "a policy changed the view";
    if (any_bad) {
      ASSERT_FALSE(p);
      EXPECT_EQ(p.error().code(), errc::invalid_argument);
      return;
    }
    ASSERT_TRUE(p) << p.error().message();
    ++outcomes_[p->result];
    SCOPED_TRACE(std::string{to_string(s)} + " of " + std::to_string(k) + ": " + std::string{to_string(p->result)} +
                 " " + p->reason);

    bool some_bundle_never_fits = false;
    for (auto& b : bundles) {
      bool any = false;
      for (size_t n = 0; n < view_.size(); ++n) any |= allowed(view_.id(n)) && view_.node(n).could_hold(b);
      some_bundle_never_fits |= !any;
    }
    if (some_bundle_never_fits) {
      ASSERT_EQ(p->result, outcome::infeasible);
    }
    if (k == 1 && s != strategy::strict_pack) {
      ASSERT_EQ(p->result == outcome::infeasible, some_bundle_never_fits);
    }
    if (s == strategy::strict_spread) {
      ASSERT_EQ(p->result == outcome::infeasible, !spread_matching_exists(bundles, avoid));
    }
    if (p->result != outcome::placed) {
      // infeasible iff it would not fit even on the emptied cluster: never pending forever.
      auto e = emptied();
      auto on_empty = place(e, bundles, s, avoid);
      ASSERT_TRUE(on_empty);
      ASSERT_EQ(on_empty->result == outcome::placed, p->result == outcome::not_now);
      ASSERT_FALSE(p->reason.empty());
      return;
    }

    ASSERT_EQ(p->bundles.size(), bundles.size());
    std::set<node_id> nodes;
    for (auto& b : p->bundles) {
      nodes.insert(b.node);
      ASSERT_TRUE(allowed(b.node)) << "a bundle landed on an avoided node";
    }
    if (s == strategy::strict_spread) {
      ASSERT_EQ(nodes.size(), bundles.size());
    }
    if (s == strategy::strict_pack) {
      ASSERT_EQ(nodes.size(), 1u);
    }
    if (k == 1 && avoid.empty()) check_single_choice(s, bundles[0], p->bundles[0]);
    for (size_t i = 0; i < bundles.size(); ++i)
      check_grants(*view_.find(p->bundles[i].node), bundles[i], p->bundles[i].alloc);

    if (pick(10) < 7) {
      ASSERT_TRUE(commit(view_, *p));
      int g = next_group_++;
      groups_.insert(g);
      for (auto& b : p->bundles) held_.push_back({b.node, b.alloc, g});
    }
  }

  // The documented choice for one bundle: PACK puts a share on the fullest card of the
  // cluster that fits; SPREAD goes to the least loaded node that fits.
  void check_single_choice(strategy s, const resource_set& r, const bundle_placement& got) {
    const auto& chosen = *view_.find(got.node);
    if (s == strategy::pack && r.gpu() < quantity::whole(1) && !r.gpu().is_zero()) {
      int64_t best = quantity::scale + 1;
      for (size_t n = 0; n < view_.size(); ++n)
        if (auto a = view_.node(n).plan(r))
          best = std::min(best, view_.node(n).card_free(a->gpus[0].card).units());
      ASSERT_EQ(chosen.card_free(got.alloc.gpus[0].card).units(), best);
    }
    if (s == strategy::spread || s == strategy::strict_spread) {
      int64_t least = quantity::scale + 1;
      for (size_t n = 0; n < view_.size(); ++n)
        if (view_.node(n).plan(r)) least = std::min(least, view_.node(n).load());
      ASSERT_EQ(chosen.load(), least);
    }
  }

  // What a grant must look like for the request.
  void check_grants(const node_resources& n, const resource_set& r, const allocation& a) {
    ASSERT_TRUE(n.follows_rules(r, a));
    resource_set host = r;
    host.set_gpu({}).set_gpu_memory(0);
    ASSERT_EQ(a.host, host);
    ASSERT_EQ(a.gpu_total(), r.gpu());
    if (r.gpu() >= quantity::whole(1)) {
      ASSERT_EQ(a.gpus.size(), static_cast<size_t>(r.gpu().whole_part()));
      for (auto& g : a.gpus) ASSERT_EQ(g.share, quantity::whole(1));
    } else if (!r.gpu().is_zero()) {
      ASSERT_EQ(a.gpus.size(), 1u);
    }
    for (auto& g : a.gpus) {
      int64_t want = r.gpu_memory() > 0 ? r.gpu_memory()
                   : g.share == quantity::whole(1) ? n.gpus()[g.card].memory_total
                   : node_resources::implied_card_memory(g.share, n.gpus()[g.card].memory_total);
      ASSERT_EQ(g.memory, want);
    }
  }

  // Nothing over-committed, and what is taken is exactly what is held.
  void check_invariants() {
    ASSERT_TRUE(view_.summaries_consistent());
    for (size_t s = 0; s < view_.size(); ++s) {
      const auto& n = view_.node(s);
      resource_set taken;
      std::vector<int64_t> share(n.gpus().size(), 0), mem(n.gpus().size(), 0);
      for (auto& h : held_) {
        if (h.node != view_.id(s)) continue;
        taken += h.alloc.host;
        for (auto& g : h.alloc.gpus) {
          share[g.card] += g.share.units();
          mem[g.card] += g.memory;
        }
      }
      resource_set used = n.total();
      used -= n.available();
      used.set_gpu({}).set_gpu_memory(0);
      ASSERT_EQ(used, taken) << "node " << view_.id(s);
      ASSERT_TRUE(n.available().fits_in(n.total()));
      for (size_t c = 0; c < n.gpus().size(); ++c) {
        ASSERT_LE(share[c], quantity::scale) << "card over-committed";
        ASSERT_LE(mem[c], n.gpus()[c].memory_total) << "card memory over-committed";
        ASSERT_EQ(n.card_free(c).units(), quantity::scale - share[c]);
        ASSERT_EQ(n.card_memory_free(c), n.gpus()[c].memory_total - mem[c]);
      }
    }
  }

  std::mt19937_64 rng_;
  cluster_view view_;
  std::vector<held> held_;
  std::set<int> groups_;
  std::map<outcome, int> outcomes_;
  int next_id_ = 0, next_group_ = 0;
};

TEST(PlacementRandom, InvariantsHoldOverManyOperations) {
  uint64_t seed = 20261129;
  if (const char* s = std::getenv("LIBTUNE_SEED")) seed = std::strtoull(s, nullptr, 10);
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with LIBTUNE_SEED=" + std::to_string(seed) + ")");
  random_cluster c{seed};
  constexpr int steps = 20000;
  for (int i = 0; i < steps; ++i) {
    c.step();
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) {
      ADD_FAILURE() << "failed at step " << i;
      return;
    }
  }
  std::printf("seed %llu: %d steps; placed %d, not now %d, infeasible %d\n",
              static_cast<unsigned long long>(seed), steps, c.ops_of_each_outcome(outcome::placed),
              c.ops_of_each_outcome(outcome::not_now), c.ops_of_each_outcome(outcome::infeasible));
  // The run must have exercised every outcome.
  EXPECT_GT(c.ops_of_each_outcome(outcome::placed), 1000);
  EXPECT_GT(c.ops_of_each_outcome(outcome::not_now), 100);
  EXPECT_GT(c.ops_of_each_outcome(outcome::infeasible), 100);
}

}  // namespace
}  // namespace tune
