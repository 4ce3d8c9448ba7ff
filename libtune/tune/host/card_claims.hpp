// The cards that libtune nodes on this machine have given to bundles, in a folder they
// all share (shared_dir() + "/gpus"): one file per node, with the share and the memory it
// holds on each card, its process (pid and start time: the file of a node that has ended
// counts no more) and where its trials' cgroups are. A node reads the other nodes' files
// when it reserves a bundle, under one lock for the machine, and writes its own before it
// lets the lock go: two clusters on one machine never give one card twice, also in the
// seconds before a trial's process shows on the card (docs/gpu-sharing.md).
//
// The folder is made mode 1777, as /tmp is: every user's nodes write their own files
// there, and none can replace another's. Thread-compatible: one node actor uses it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

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
  // Opens (makes) the folder and takes `self` as this node; the node's file is written
  // by write(). An error says why the folder cannot be used.
  static expected<std::unique_ptr<card_claims>> open(const std::string& dir, claimer self);
  ~card_claims();  // this node's file goes with it
  card_claims(const card_claims&) = delete;
  card_claims& operator=(const card_claims&) = delete;

  // The machine's lock for a reservation, held while the object lives. Waits up to 2 s
  // for it (another node holds it for microseconds at a time); held() says whether it
  // was had.
  class lock {
   public:
    lock(lock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    lock& operator=(lock&&) = delete;
    ~lock();
    bool held() const { return fd_ >= 0; }

   private:
    friend class card_claims;
    explicit lock(int fd) : fd_(fd) {}
    int fd_ = -1;
  };
  lock hold() const;

  // Every other node's claims that still count (its process lives). Files of nodes that
  // have ended are removed where this process may.
  std::vector<claimer> others() const;
  // This node's claims now: its file replaced whole (none: removed). Unchanged claims
  // are not written again.
  status write(const std::map<std::string, card_claim>& cards);

  const std::string& dir() const { return dir_; }

 private:
  card_claims() = default;
  std::string dir_, file_;
  claimer self_;
  bool written_ = false;
};

// What libtune processes on this machine share: $TUNE_SHARED_DIR, else /dev/shm/libtune
// (/tmp/libtune-shared where there is no /dev/shm).
std::string shared_dir();

// The start time of process `pid` (clock ticks after boot, field 22 of /proc/PID/stat);
// 0 when it is gone or cannot be read.
uint64_t process_start_time(int pid);

// The name of the user with this uid ("uid 1234" when it has none).
std::string user_name(uint32_t uid);

}  // namespace tune
