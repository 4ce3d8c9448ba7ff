// The heads running on this machine, as `tune run` and a tuning script without
// --address find them (as ray.init() finds a Ray cluster started here): a head started
// with `tune start --head` puts a record into shared_dir() + "/heads" (a folder every
// user may write, mode 1777; the record 0644: no secret in it) and removes it when it
// stops. A record whose process has ended counts no more.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tune/core/status.hpp"

namespace tune {

struct local_head {
  std::string address;     // HOST:PORT that reaches it from this machine ("127.0.0.1:6380")
  int port = 0;
  int pid = 0;
  uint64_t started = 0;    // its process's start time (process_start_time)
  uint32_t uid = 0;
  std::string user;        // who started it
  std::string token_file;  // its admin token (readable by that user alone)
  bool tls = false;        // connections need the cluster's certificates
  std::string version;
};

// Writes this head's record (its folder made when missing). The record is
// head-<port>.json: a second head on the same port cannot be running.
status announce_head(const local_head& h, const std::string& dir = "");
// Removes the record of the head on `port` (this process's own).
void withdraw_head(int port, const std::string& dir = "");
// The heads running on this machine now, by port. Records of heads that have ended are
// removed where this process may.
std::vector<local_head> local_heads(const std::string& dir = "");

// The folder of the records: `dir`, else shared_dir() + "/heads".
std::string heads_dir(const std::string& dir = "");

}  // namespace tune
