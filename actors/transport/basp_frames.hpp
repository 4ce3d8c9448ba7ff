// The checks of the frames a peer sends, before CAF's BASP parser reads them.
//
// CAF 0.17 trusts the length in every BASP header it reads: a header that claims a
// 4 GiB payload makes a process allocate 4 GiB. Whatever reads a connection from the
// network for CAF (the head's gate, actors/transport/gate.hpp; a TLS connection to a head,
// actors/transport/tls_scribe.hpp) first passes what it read through a frame_checker: every
// 32-byte header must name a BASP operation and a payload of at most `max_frame`
// bytes, and the first must be the handshake that side sends first.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace tune {

namespace basp {
constexpr size_t header_size = 32;       // BASP header in CAF 0.17
constexpr uint8_t server_handshake = 0;  // caf::io::basp::message_type
constexpr uint8_t client_handshake = 1;
constexpr uint8_t last_operation = 6;  // heartbeat
}  // namespace basp

class frame_checker {
 public:
  // `first_op`: the handshake the peer must send first (a head sends the server's).
  explicit frame_checker(uint8_t first_op) : first_op_(first_op) {}

  // The next `n` bytes the peer sent; false (and why, for people) at the first frame
  // that breaks the rules: the connection is then to be closed.
  bool check(const char* data, size_t n, uint32_t max_frame, std::string& why) {
    size_t i = 0;
    while (i < n) {
      if (payload_left_ > 0) {
        size_t take = static_cast<size_t>(std::min<uint64_t>(payload_left_, n - i));
        payload_left_ -= take;
        i += take;
        continue;
      }
      size_t take = std::min(basp::header_size - header_.size(), n - i);
      header_.append(data + i, take);
      i += take;
      if (header_.size() < basp::header_size) break;
      auto op = static_cast<uint8_t>(header_[0]);
      uint32_t len;
      std::memcpy(&len, header_.data() + 4, 4);
      len = ntohl(len);
      if (op > basp::last_operation) {
        why = "bytes that are not the libtune protocol (unknown operation " + std::to_string(op) + ")";
        return false;
      }
      if (first_ && op != first_op_) {
        why = "bytes that are not the libtune protocol (no handshake first)";
        return false;
      }
      if (len > max_frame) {
        why = "a message of " + std::to_string(len) + " bytes, above the limit of " + std::to_string(max_frame);
        return false;
      }
      first_ = false;
      payload_left_ = len;
      header_.clear();
    }
    return true;
  }

  // Whether the peer has not yet sent a whole first header.
  bool waiting_first() const { return first_; }

 private:
  uint8_t first_op_;
  bool first_ = true;
  std::string header_;  // the header being read
  uint64_t payload_left_ = 0;
};

}  // namespace tune
