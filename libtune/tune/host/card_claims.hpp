// The cards that libtune nodes on this machine have given to bundles, in a folder they
// all share (shared_dir() + "/gpus"): a folder per card, and in it one file per node that
// holds some of that card, with the share and the memory it holds there, its process (pid
// and start time: the file of a node that has ended counts no more) and where its
// trials' cgroups are. A node reads its cards' files when it reserves a bundle, under its
// cards' locks, and writes its own before it lets them go: two clusters on one machine
// never give one card twice, also in the seconds before a trial's process shows on the
// card (docs/gpu-sharing.md). Nodes on disjoint cards never wait for each other and read
// nothing of each other's.
//
// The folders are made mode 1777, as /tmp is: every user's nodes write their own files
// there, and none can replace another's. Thread-compatible: one node actor uses it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/core/status.hpp"

namespace tune {

// What a node holds on one card: share units (quantity units; a whole card is
// quantity::scale) and bytes of its memory.
struct card_claim {
  int64_t units = 0;
  int64_t memory = 0;
  friend bool operator==(const card_claim&, const card_claim&) = default;
};

struct claimer {
  std::string node;       // its node id
  int pid = 0;            // the node's process
  uint64_t started = 0;   // that process's start time (process_start_time): a reused pid is not it
  uint32_t uid = 0;
  std::string user;
  std::string cgroup;     // its trials' cgroups are below this, as /proc/PID/cgroup names them ("": none)
  std::map<std::string, card_claim> cards;  // by card UUID
};

class card_claims {
 public:
  // Opens (makes) the folders of `cards` (this node's, by UUID) and takes `self` as this
  // node; its files are written by write(). An error says why a folder cannot be used.
  static expected<std::unique_ptr<card_claims>> open(const std::string& dir, claimer self,
                                                     const std::vector<std::string>& cards);
  ~card_claims();  // this node's files go with it
  card_claims(const card_claims&) = delete;
  card_claims& operator=(const card_claims&) = delete;

  // The locks of some of this node's cards for a reservation, held while the object
  // lives (taken in the order of the cards' UUIDs: no two nodes wait for each other in a
  // circle). Waits up to 2 s for them (another node holds one for microseconds at a
  // time); held() says whether they were had.
  class lock {
   public:
    lock(lock&& o) noexcept : fds_(std::move(o.fds_)), cards_(std::move(o.cards_)), ok_(o.ok_) { o.fds_.clear(); }
    lock& operator=(lock&&) = delete;
    ~lock();
    bool held() const { return ok_; }
    // Whether the lock of this node's card number `i` (in cards() order) is held.
    bool covers(size_t i) const { return ok_ && std::binary_search(cards_.begin(), cards_.end(), i); }

   private:
    friend class card_claims;
    lock() = default;
    std::vector<int> fds_;      // the flocked files (the card_claims keeps them open)
    std::vector<size_t> cards_;  // which of the node's cards
    bool ok_ = false;
  };
  // These of this node's cards (others are not its own: left out).
  lock hold(const std::vector<std::string>& cards) const;
  lock hold_all() const { return hold(cards_); }

  // Every other node's claims on this node's cards that still count (its process lives),
  // a claimer per node: the folders of `fresh` read again when they changed (their
  // modification time), the others' as last read. Files of nodes that have ended are
  // removed where this process may.
  std::vector<claimer> others(const std::vector<std::string>& fresh) const;
  std::vector<claimer> others() const { return others(cards_); }
  // This node's claims now: the files of the cards whose claim changed replaced whole
  // (nothing held there: removed), each under its card's lock (`held`'s, or taken here:
  // nobody writes in a card's folder without it). A card that is not this node's is an
  // error, and nothing is written.
  status write(const std::map<std::string, card_claim>& cards, const lock* held = nullptr);

  const std::vector<std::string>& cards() const { return cards_; }
  const std::string& dir() const { return dir_; }

 private:
  card_claims() = default;
  std::string card_dir(const std::string& uuid) const;
  std::string dir_, file_name_;
  claimer self_;
  std::vector<std::string> cards_;  // this node's, sorted
  std::vector<int> lock_fds_;       // each card's lock file, open for the node's life
  // Each card's folder as last read: its modification time then, and the other nodes'
  // files in it.
  struct folder_seen {
    bool read = false;
    int64_t mtime_ns = 0;
    std::vector<std::pair<claimer, card_claim>> files;
    std::vector<std::string> names;  // each file's name, in the same order
  };
  mutable std::vector<folder_seen> seen_;
};

// What libtune processes on this machine share: $TUNE_SHARED_DIR, else /dev/shm/libtune
// (/tmp/libtune-shared where there is no /dev/shm).
std::string shared_dir();

// A small JSON file another process writes (a claim, a head's record, a simulated view's
// file): its value, or a discarded one (is_discarded()) when it cannot be read or is not
// JSON.
nlohmann::json read_json_file(const std::string& path);

// The start time of process `pid` (clock ticks after boot, field 22 of /proc/PID/stat);
// 0 when it is gone or cannot be read.
uint64_t process_start_time(int pid);

// The name of the user with this uid ("uid 1234" when it has none).
std::string user_name(uint32_t uid);

}  // namespace tune
