#include "tune/trial/others.hpp"

#include <algorithm>
#include <map>

#include "tune/core/quantity.hpp"

namespace tune {

namespace {

bool below(const std::string& cgroup, const std::string& root) {
  return !root.empty() && cgroup.compare(0, root.size(), root) == 0 &&
         (cgroup.size() == root.size() || cgroup[root.size()] == '/');
}

// "0.25 GPU", "1 GPU", "2 GPUs" from share units.
std::string share_text(int64_t units) {
  auto q = quantity::from_units(units);
  return q.to_string() + (units > quantity::scale ? " GPUs" : " GPU");
}

}  // namespace

const claimer* claimer_of(const foreign_process& p, const std::vector<claimer>& claims) {
  for (auto& c : claims) {
    if (below(p.cgroup, c.cgroup)) return &c;
    if (std::find(p.ancestors.begin(), p.ancestors.end(), c.pid) != p.ancestors.end()) return &c;
  }
  return nullptr;
}

std::string describe_process(const foreign_process& p) {
  std::string out = "pid " + std::to_string(p.pid);
  if (!p.name.empty()) out += " " + p.name;
  if (p.uid >= 0) out += " (user " + user_name(static_cast<uint32_t>(p.uid)) + ")";
  out += p.memory >= 0 ? ", " + format_bytes(p.memory) : ", memory not known";
  return out;
}

std::vector<card_others> others_on_cards(const std::vector<gpu_instance>& cards, const std::vector<claimer>& claims,
                                         const std::vector<foreign_process>& foreign, const others_policy& policy) {
  std::vector<card_others> out(cards.size());
  std::map<std::string, size_t> index;
  for (size_t c = 0; c < cards.size(); ++c)
    if (shared_card(cards[c])) index[cards[c].uuid] = c;
  // The largest holder of each card, for people, and how many there are.
  std::vector<std::pair<int64_t, std::string>> largest(cards.size());
  std::vector<int> holders(cards.size(), 0);
  auto note = [&](size_t c, int64_t amount, std::string who) {
    ++holders[c];
    if (holders[c] == 1 || amount > largest[c].first) largest[c] = {amount, std::move(who)};
  };
  for (auto& claim : claims)
    for (auto& [uuid, k] : claim.cards) {
      auto it = index.find(uuid);
      if (it == index.end() || (k.units <= 0 && k.memory <= 0)) continue;
      auto& o = out[it->second];
      o.units += k.units;
      o.memory += k.memory;
      o.holds_card = true;
      note(it->second, k.memory,
           "libtune cluster node " + claim.node + " (pid " + std::to_string(claim.pid) + ", user " +
               (claim.user.empty() ? user_name(claim.uid) : claim.user) + "): " + share_text(k.units) + ", " +
               format_bytes(k.memory));
    }
  std::vector<int64_t> held(cards.size(), 0);
  for (auto& p : foreign) {
    auto it = index.find(p.uuid);
    if (it == index.end() || claimer_of(p, claims)) continue;  // another node's trial: in its claim
    int64_t bytes = p.memory >= 0 ? p.memory : unknown_process_memory;
    held[it->second] += bytes;
    note(it->second, bytes, describe_process(p));
  }
  for (size_t c = 0; c < cards.size(); ++c) {
    auto& o = out[c];
    if (held[c] > 0) {
      o.memory += held[c] + policy.margin;
      if (held[c] > policy.threshold) o.holds_card = true;
    }
    o.units = std::min<int64_t>(o.units, quantity::scale);
    o.memory = std::min(o.memory, cards[c].memory_total);
    if (holders[c] > 0)
      o.who = largest[c].second + (holders[c] > 1 ? " and " + std::to_string(holders[c] - 1) + " more" : "");
  }
  return out;
}

}  // namespace tune
