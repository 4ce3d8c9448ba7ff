#include "tune/cluster/reservations.hpp"

namespace tune {

std::string_view to_string(hold_state s) { return s == hold_state::prepared ? "prepared" : "committed"; }

expected<allocation> reservation_table::prepare(const bundle_key& key, const resource_set& request,
                                                const allocation& preferred, time_point now) {
  if (auto it = holds_.find(key); it != holds_.end()) {
    if (it->second.request == request) return it->second.alloc;  // a repeated prepare
    return status{errc::inconsistent, "bundle " + key.to_string() + " is already held here for " +
                                          it->second.request.to_string() + ", not " + request.to_string()};
  }
  if (auto st = check_request(request); !st) return st;
  // The head's choice of cards, if it follows this node's rules and still fits here,
  // beside what other programs hold on them.
  if (resources_.follows_rules(request, preferred) && resources_.beside_others(preferred) &&
      resources_.apply(preferred)) {
    holds_[key] = {key, hold_state::prepared, request, preferred, now};
    ++version_;
    return preferred;
  }
  auto a = resources_.allocate(request);
  if (!a) return a.error();
  holds_[key] = {key, hold_state::prepared, request, *a, now};
  ++version_;
  return a;
}

status reservation_table::commit(const bundle_key& key) {
  auto it = holds_.find(key);
  if (it == holds_.end())
    return {errc::not_found, "bundle " + key.to_string() + " is not prepared here (aborted, or it expired before the commit)"};
  if (it->second.state != hold_state::committed) ++version_;
  it->second.state = hold_state::committed;
  return status::ok();
}

void reservation_table::abort(const bundle_key& key) {
  auto it = holds_.find(key);
  if (it == holds_.end()) return;
  auto st = resources_.release(it->second.alloc);
  assert(st.is_ok());
  (void)st;
  holds_.erase(it);
  ++version_;
}

size_t reservation_table::remove_group(const std::string& group) {
  size_t n = 0;
  for (auto it = holds_.lower_bound({group, 0}); it != holds_.end() && it->first.group == group;) {
    auto st = resources_.release(it->second.alloc);
    assert(st.is_ok());
    (void)st;
    it = holds_.erase(it);
    ++n;
    ++version_;
  }
  return n;
}

std::vector<bundle_key> reservation_table::expire(time_point now, std::chrono::milliseconds ttl) {
  std::vector<bundle_key> gone;
  for (auto& [key, h] : holds_)
    if (h.state == hold_state::prepared && now - h.since > ttl) gone.push_back(key);
  for (auto& key : gone) abort(key);
  return gone;
}

const reservation_table::hold* reservation_table::find(const bundle_key& key) const {
  auto it = holds_.find(key);
  return it == holds_.end() ? nullptr : &it->second;
}

std::vector<reservation_table::hold> reservation_table::holdings() const {
  std::vector<hold> out;
  out.reserve(holds_.size());
  for (auto& [key, h] : holds_) out.push_back(h);
  return out;
}

}  // namespace tune
