#include "standby.hpp"

#include <algorithm>

namespace tune {

int64_t standby_copies::iteration(const std::string& key) const {
  auto it = sets_.find(key);
  return it == sets_.end() ? -1 : it->second.iteration;
}

std::vector<std::string> standby_copies::unnamed(const std::vector<std::string>& shas) const {
  std::vector<std::string> out;
  for (auto& sha : shas) {
    bool named = std::any_of(sets_.begin(), sets_.end(), [&](const auto& s) {
      return std::find(s.second.shas.begin(), s.second.shas.end(), sha) != s.second.shas.end();
    });
    if (!named) out.push_back(sha);
  }
  return out;
}

std::vector<std::string> standby_copies::drop(const std::string& key) {
  auto it = sets_.find(key);
  if (it == sets_.end()) return {};
  auto shas = std::move(it->second.shas);
  sets_.erase(it);
  return unnamed(shas);
}

standby_copies::outcome standby_copies::keep(const std::string& key, int64_t iteration, std::vector<std::string> shas,
                                             uint64_t bytes) {
  outcome out;
  if (this->iteration(key) >= iteration) {  // a newer one came meanwhile
    out.unnamed = unnamed(shas);
    return out;
  }
  out.kept = true;
  auto old = std::move(sets_[key].shas);
  sets_[key] = {iteration, std::move(shas), bytes, ++seq_};
  out.unnamed = unnamed(old);
  // Within the node's space: the oldest sets go (never the one just kept).
  for (;;) {
    uint64_t total = 0;
    auto oldest = sets_.end();
    for (auto it = sets_.begin(); it != sets_.end(); ++it) {
      total += it->second.bytes;
      if (it->first != key && (oldest == sets_.end() || it->second.seq < oldest->second.seq)) oldest = it;
    }
    if (total <= max_bytes_ || oldest == sets_.end()) break;
    auto gone = drop(oldest->first);
    out.unnamed.insert(out.unnamed.end(), gone.begin(), gone.end());
  }
  return out;
}

}  // namespace tune
