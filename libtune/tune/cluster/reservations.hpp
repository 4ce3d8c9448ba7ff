// A node's reservations for placement groups: the node side of the two-phase
// protocol. Every message names a bundle by (group id, bundle index) and is
// idempotent, so repeated or late messages do no harm:
//
//              prepare (fits)             commit
//   (none) ------------------> prepared ----------> committed
//      ^                          |                    |
//      +---- abort / expiry ------+---- abort/remove --+
//
// A prepared bundle that is not committed within the time-to-live is released by
// expire(): when the head or the group's actor dies mid-protocol, nothing leaks.
// The node is the authority on what it holds; holdings() is what it reports to a
// (restarted) head for reconciliation.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tune/core/node_resources.hpp"

namespace tune {

struct bundle_key {
  std::string group;
  uint32_t bundle = 0;
  friend auto operator<=>(const bundle_key&, const bundle_key&) = default;
  std::string to_string() const { return group + "#" + std::to_string(bundle); }
};

enum class hold_state { prepared, committed };
std::string_view to_string(hold_state s);

class reservation_table {
 public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;

  struct hold {
    bundle_key key;
    hold_state state = hold_state::prepared;
    resource_set request;
    allocation alloc;
    time_point since{};
  };

  // `first_version`: where the version count starts. A node starts it from the clock,
  // so that a restarted node's versions are still larger than its earlier ones.
  explicit reservation_table(node_resources resources, uint64_t first_version = 0)
      : resources_(std::move(resources)), version_(first_version) {}

  // Reserves `request` for `key`, on the cards of `preferred` when they are still free
  // (what the head chose from its view), else wherever this node's rules put it.
  // Returns what it took. A key already prepared or committed for the same request
  // returns what it holds (a repeated prepare); for another request it is an error.
  // A request that does not fit now fails with errc::insufficient, changing nothing.
  expected<allocation> prepare(const bundle_key& key, const resource_set& request, const allocation& preferred,
                               time_point now);
  // prepared -> committed; committed stays committed. An unknown key (aborted, or
  // expired before the commit came) is errc::not_found: the head must place again.
  status commit(const bundle_key& key);
  // Releases what the key holds; an unknown key is fine (a repeated abort).
  void abort(const bundle_key& key);
  // Releases every bundle of a group; returns how many it held.
  size_t remove_group(const std::string& group);
  // Releases bundles prepared longer than `ttl` ago and never committed.
  std::vector<bundle_key> expire(time_point now, std::chrono::milliseconds ttl);

  // What other programs hold on the node's cards (node_resources::set_others): new
  // prepares fit beside it; what is held stays held.
  status set_others(std::vector<card_others> others) { return resources_.set_others(std::move(others)); }

  const hold* find(const bundle_key& key) const;
  // Counts every change (a prepare taken, a commit, a release): a list of holdings
  // tagged with the version it was taken at tells the head what it can judge from it.
  uint64_t version() const { return version_; }
  std::vector<hold> holdings() const;
  const node_resources& resources() const { return resources_; }

 private:
  node_resources resources_;
  std::map<bundle_key, hold> holds_;
  uint64_t version_ = 0;
};

}  // namespace tune
