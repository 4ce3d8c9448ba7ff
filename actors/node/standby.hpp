// A node's standby copies of checkpoints (wire.hpp, stage_atom), apart from the files
// and the fetches: which sets it keeps, by key "<user>/<trial>", each the files of one
// iteration by SHA-256 (a file two sets name is kept once), within a space where the
// oldest sets go first. The node stores the files in <work dir>/staged/<sha256>, removes
// those this says no set names any more, and copies a set in place when its trial
// starts here again (standby_test.cpp tests it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tune {

class standby_copies {
 public:
  struct set {
    int64_t iteration = -1;
    std::vector<std::string> shas;
    uint64_t bytes = 0;
    uint64_t seq = 0;  // the oldest go first when space runs out
  };
  explicit standby_copies(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  uint64_t max_bytes() const { return max_bytes_; }
  // The iteration kept for `key` (-1: none).
  int64_t iteration(const std::string& key) const;
  // A set fetched for `key`: kept unless one of the same or a later iteration is there
  // (then `kept` is false); the files no set names any more (the older set's, the
  // oldest sets' that no longer fit, or this one's when not kept), to be removed.
  struct outcome {
    bool kept = false;
    std::vector<std::string> unnamed;
  };
  outcome keep(const std::string& key, int64_t iteration, std::vector<std::string> shas, uint64_t bytes);
  // Forgets `key`'s set: the files no set names any more.
  std::vector<std::string> drop(const std::string& key);
  // Those of `shas` that no set names.
  std::vector<std::string> unnamed(const std::vector<std::string>& shas) const;
  void clear() { sets_.clear(); }
  const std::map<std::string, set>& sets() const { return sets_; }

 private:
  uint64_t max_bytes_;
  uint64_t seq_ = 0;
  std::map<std::string, set> sets_;
};

}  // namespace tune
