#include "tune/core/node_resources.hpp"

#include <algorithm>
#include <set>

namespace tune {

namespace {

constexpr int64_t whole_card = quantity::scale;

// The first host amount of `request` that `free` lacks, as "cpu: needs 4, 2 free".
std::string host_shortfall(const resource_set& request, const resource_set& free) {
  if (request.cpu() > free.cpu())
    return "cpu: needs " + request.cpu().to_string() + ", " + free.cpu().to_string() + " free";
  if (request.memory() > free.memory())
    return "memory: needs " + format_bytes(request.memory()) + ", " +
           format_bytes(free.memory()) + " free";
  for (auto& [name, q] : request.customs())
    if (q > free.custom(name))
      return name + ": needs " + q.to_string() + ", " + free.custom(name).to_string() + " free";
  return {};
}

resource_set host_part(const resource_set& r) {
  resource_set h = r;
  h.set_gpu({}).set_gpu_memory(0);
  return h;
}

// Grants name distinct cards of this node.
bool cards_valid(const std::vector<gpu_grant>& grants, size_t n_cards) {
  for (size_t i = 0; i < grants.size(); ++i) {
    if (grants[i].card >= n_cards) return false;
    for (size_t j = 0; j < i; ++j)
      if (grants[j].card == grants[i].card) return false;
  }
  return true;
}

}  // namespace

quantity allocation::gpu_total() const {
  quantity sum;
  for (auto& g : gpus) sum += g.share;
  return sum;
}

int64_t node_resources::implied_card_memory(quantity share, int64_t card_memory_total) {
  return static_cast<int64_t>(static_cast<__int128>(card_memory_total) * share.units() /
                              quantity::scale);
}

expected<node_resources> node_resources::make(resource_set host, std::vector<gpu_instance> gpus) {
  if (!host.gpu().is_zero() || host.gpu_memory() != 0)
    return status{errc::invalid_argument,
                  "a node's GPUs are given card by card, not as amounts in its host resources"};
  std::set<std::string> uuids;
  for (auto& g : gpus) {
    if (g.uuid.empty())
      return status{errc::invalid_argument,
                    "GPU " + std::to_string(g.index) + " has no UUID; every card needs one"};
    if (!uuids.insert(g.uuid).second)
      return status{errc::invalid_argument, "GPU UUID " + g.uuid + " appears twice on one node"};
    if (g.memory_total <= 0)
      return status{errc::invalid_argument,
                    "GPU " + g.uuid + " has no memory; give its memory in bytes"};
  }
  node_resources n;
  int64_t gpu_mem = 0;
  for (auto& g : gpus) {
    n.card_free_.push_back(whole_card);
    n.card_mem_free_.push_back(g.memory_total);
    gpu_mem += g.memory_total;
  }
  host.set_gpu(quantity::whole(static_cast<int64_t>(gpus.size()))).set_gpu_memory(gpu_mem);
  n.total_ = host;
  n.available_ = host;
  n.gpus_ = std::make_shared<const std::vector<gpu_instance>>(std::move(gpus));
  return n;
}

int64_t node_resources::card_units_usable(size_t card) const {
  return others_.empty() ? card_free_[card] : std::max<int64_t>(0, card_free_[card] - others_[card].units);
}

int64_t node_resources::card_memory_usable(size_t card) const {
  return others_.empty() ? card_mem_free_[card] : std::max<int64_t>(0, card_mem_free_[card] - others_[card].memory);
}

bool node_resources::card_whole_free(size_t card) const {
  if (card_free_[card] != whole_card) return false;
  return others_.empty() || (!others_[card].holds_card && others_[card].units == 0);
}

uint32_t node_resources::whole_free_cards() const {
  uint32_t n = 0;
  for (size_t c = 0; c < card_free_.size(); ++c) n += card_whole_free(c);
  return n;
}

bool node_resources::share_fits(size_t card, int64_t units, int64_t memory) const {
  return card_units_usable(card) >= units && card_memory_usable(card) >= memory;
}

int node_resources::find_share_card(quantity share, int64_t memory_wanted) const {
  int best = -1;
  int64_t best_free = 0;
  for (size_t c = 0; c < card_free_.size(); ++c) {
    int64_t need = memory_wanted > 0 ? memory_wanted
                                     : implied_card_memory(share, (*gpus_)[c].memory_total);
    if (!share_fits(c, share.units(), need)) continue;
    int64_t free = card_units_usable(c);
    if (best < 0 || free < best_free) best = static_cast<int>(c), best_free = free;
  }
  return best;
}

status node_resources::set_others(std::vector<card_others> others) {
  if (!others.empty() && others.size() != card_free_.size())
    return {errc::inconsistent, "the report of what others hold has " + std::to_string(others.size()) +
                                    " cards; the node has " + std::to_string(card_free_.size())};
  for (size_t c = 0; c < others.size(); ++c)
    if (others[c].units < 0 || others[c].units > whole_card || others[c].memory < 0 ||
        others[c].memory > (*gpus_)[c].memory_total)
      return {errc::inconsistent, "what others hold on card " + std::to_string(c) + " is outside 0..its total"};
  if (std::none_of(others.begin(), others.end(), [](const card_others& o) { return o.any(); })) others.clear();
  others_ = std::move(others);
  return status::ok();
}

bool node_resources::grant_fits(const gpu_grant& g) const {
  if (g.card >= card_free_.size()) return false;
  return g.share == quantity::whole(1) ? card_whole_free(g.card) : share_fits(g.card, g.share.units(), g.memory);
}

bool node_resources::beside_others(const allocation& a) const {
  return others_.empty() || std::all_of(a.gpus.begin(), a.gpus.end(), [&](const gpu_grant& g) { return grant_fits(g); });
}

std::string node_resources::others_in_the_way(const allocation& would) const {
  if (others_.empty()) return {};
  for (auto& g : would.gpus) {
    if (g.card >= others_.size() || !others_[g.card].any() || grant_fits(g)) continue;
    auto& card = (*gpus_)[g.card];
    auto& who = others_[g.card].who;
    return "GPU " + std::to_string(card.index) + " (" + card.uuid + ") is in use by another program" +
           (who.empty() ? std::string{} : ": " + who);
  }
  return {};
}

node_resources node_resources::without_others() const {
  node_resources n = *this;
  n.others_.clear();
  return n;
}

std::string node_resources::others_reason(const resource_set& request) const {
  if (others_.empty()) return {};
  auto would = without_others().plan(request);
  return would ? others_in_the_way(*would) : std::string{};
}

expected<allocation> node_resources::plan(const resource_set& request) const {
  if (auto st = check_request(request); !st) return st;
  if (!request.host_fits_in(available_))
    return status{errc::insufficient, host_shortfall(request, available_)};
  allocation a;
  a.host = host_part(request);
  quantity g = request.gpu();
  if (g.is_zero()) return a;
  int64_t mem_wanted = request.gpu_memory();
  if (g >= quantity::whole(1)) {
    auto n = static_cast<size_t>(g.whole_part());
    for (size_t c = 0; c < card_free_.size() && a.gpus.size() < n; ++c) {
      int64_t total = (*gpus_)[c].memory_total;
      if (card_whole_free(c) && mem_wanted <= total)
        a.gpus.push_back({static_cast<uint32_t>(c), quantity::whole(1),
                          mem_wanted > 0 ? mem_wanted : total});
    }
    if (a.gpus.size() < n) {
      if (auto why = others_reason(request); !why.empty()) return status{errc::insufficient, "gpu: " + why};
      return status{errc::insufficient,
                    "gpu: needs " + std::to_string(n) + " whole free cards" +
                        (mem_wanted > 0 ? " with " + format_bytes(mem_wanted) : std::string{}) +
                        ", " + std::to_string(a.gpus.size()) + " free"};
    }
    return a;
  }
  int card = find_share_card(g, mem_wanted);
  if (card < 0 && !others_.empty())
    if (auto why = others_reason(request); !why.empty()) return status{errc::insufficient, "gpu: " + why};
  if (card < 0)
    return status{errc::insufficient,
                  "gpu: no card has " + g.to_string() + " of a GPU free" +
                      (mem_wanted > 0 ? " with " + format_bytes(mem_wanted) : std::string{})};
  a.gpus.push_back({static_cast<uint32_t>(card), g,
                    mem_wanted > 0 ? mem_wanted
                                   : implied_card_memory(g, (*gpus_)[card].memory_total)});
  return a;
}

expected<allocation> node_resources::allocate(const resource_set& request) {
  auto a = plan(request);
  if (!a) return a;
  auto st = apply(*a);
  assert(st.is_ok());
  (void)st;
  return a;
}


status node_resources::apply(const allocation& a) {
  if (!cards_valid(a.gpus, card_free_.size()))
    return {errc::inconsistent, "the allocation names cards this node does not have"};
  if (!a.host.host_fits_in(available_))
    return {errc::insufficient, host_shortfall(a.host, available_)};
  for (auto& g : a.gpus)
    if (g.share.units() > card_free_[g.card] || g.memory > card_mem_free_[g.card])
      return {errc::insufficient, "gpu " + std::to_string(g.card) + ": " + g.share.to_string() +
                                      " with " + format_bytes(g.memory) + " is no longer free"};
  available_ -= a.host;
  for (auto& g : a.gpus) {
    card_free_[g.card] -= g.share.units();
    card_mem_free_[g.card] -= g.memory;
    available_.set_gpu(available_.gpu() - g.share)
        .set_gpu_memory(available_.gpu_memory() - g.memory);
  }
  return status::ok();
}

status node_resources::release(const allocation& a) {
  if (!cards_valid(a.gpus, card_free_.size()))
    return {errc::inconsistent, "the allocation names cards this node does not have"};
  resource_set after = available_;
  after += a.host;
  if (!after.host_fits_in(total_))
    return {errc::inconsistent,
            "releasing " + a.host.to_string() + " would free more than the node holds taken (" +
                host_shortfall(after, total_) + "); was it released already?"};
  for (auto& g : a.gpus)
    if (card_free_[g.card] + g.share.units() > whole_card ||
        card_mem_free_[g.card] + g.memory > (*gpus_)[g.card].memory_total)
      return {errc::inconsistent, "releasing " + g.share.to_string() + " of gpu " +
                                      std::to_string(g.card) +
                                      " would free more than is taken; was it released already?"};
  available_ = after;
  for (auto& g : a.gpus) {
    card_free_[g.card] += g.share.units();
    card_mem_free_[g.card] += g.memory;
    available_.set_gpu(available_.gpu() + g.share)
        .set_gpu_memory(available_.gpu_memory() + g.memory);
  }
  return status::ok();
}

bool node_resources::follows_rules(const resource_set& request, const allocation& a) const {
  if (!check_request(request) || a.host != host_part(request) || !cards_valid(a.gpus, card_free_.size()))
    return false;
  quantity g = request.gpu();
  bool whole = g >= quantity::whole(1);
  size_t cards = g.is_zero() ? 0 : whole ? static_cast<size_t>(g.whole_part()) : 1;
  if (a.gpus.size() != cards) return false;
  for (auto& grant : a.gpus) {
    int64_t total = (*gpus_)[grant.card].memory_total;
    int64_t memory = request.gpu_memory() > 0 ? request.gpu_memory() : whole ? total : implied_card_memory(g, total);
    if (grant.share != (whole ? quantity::whole(1) : g) || grant.memory != memory) return false;
  }
  return true;
}

node_availability node_resources::availability() const {
  node_availability a;
  a.host = host_part(available_);
  a.card_free = card_free_;
  a.card_memory_free = card_mem_free_;
  a.others = others_;
  return a;
}

status node_resources::set_availability(const node_availability& a) {
  const size_t n = card_free_.size();
  if (a.card_free.size() != n || a.card_memory_free.size() != n)
    return {errc::inconsistent, "the report has " + std::to_string(a.card_free.size()) +
                                    " cards; the node has " + std::to_string(n)};
  if (!a.host.host_fits_in(total_) || !a.host.first_negative().empty() ||
      !a.host.gpu().is_zero() || a.host.gpu_memory() != 0)
    return {errc::inconsistent, "the report claims more free than the node has: " +
                                    a.host.to_string() + " of " + host_part(total_).to_string()};
  resource_set next = a.host;
  quantity gpu_free;
  int64_t gpu_mem_free = 0;
  for (size_t c = 0; c < n; ++c) {
    if (a.card_free[c] < 0 || a.card_free[c] > whole_card || a.card_memory_free[c] < 0 ||
        a.card_memory_free[c] > (*gpus_)[c].memory_total)
      return {errc::inconsistent, "the report's card " + std::to_string(c) +
                                      " is outside 0..its total"};
    gpu_free += quantity::from_units(a.card_free[c]);
    gpu_mem_free += a.card_memory_free[c];
  }
  next.set_gpu(gpu_free).set_gpu_memory(gpu_mem_free);
  if (auto st = set_others(a.others); !st) return st;
  available_ = next;
  card_free_ = a.card_free;
  card_mem_free_ = a.card_memory_free;
  return status::ok();
}

bool node_resources::could_hold(const resource_set& request) const {
  if (!check_request(request) || !request.host_fits_in(total_)) return false;
  quantity g = request.gpu();
  if (g.is_zero()) return true;
  int64_t mem_wanted = request.gpu_memory();
  if (g >= quantity::whole(1)) {
    int64_t cards = 0;
    for (auto& d : *gpus_) cards += mem_wanted <= d.memory_total;
    return cards >= g.whole_part();
  }
  // A share's implied memory always fits an empty card; an explicit one must.
  for (auto& d : *gpus_)
    if (mem_wanted <= d.memory_total) return true;
  return false;
}

node_resources node_resources::emptied() const {
  node_resources n = *this;
  n.available_ = total_;
  n.others_.clear();
  for (size_t c = 0; c < card_free_.size(); ++c) {
    n.card_free_[c] = whole_card;
    n.card_mem_free_[c] = (*gpus_)[c].memory_total;
  }
  return n;
}

int64_t node_resources::load() const {
  auto used = [](int64_t total, int64_t free) -> int64_t {
    if (total <= 0) return 0;
    return static_cast<int64_t>(static_cast<__int128>(total - free) * quantity::scale / total);
  };
  return std::max({used(total_.cpu().units(), available_.cpu().units()),
                   used(total_.gpu().units(), available_.gpu().units()),
                   used(total_.memory(), available_.memory())});
}

}  // namespace tune
