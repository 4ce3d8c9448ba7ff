// The frames of the process protocol (PROTOCOL.md beside this file): how a node, a
// spawner, a keeper and a worker tell each other what to start and how it went. The one
// C++ description of them; tune/trial/python_spawner.py holds the Python one, and
// spawn_protocol_test checks that both write and read the same bytes.
//
// Every number is in the machine's own byte order: both ends of every channel run on
// one machine. The encoders and decoders are pure; the I/O functions below them send
// and receive one frame on a descriptor.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tune/core/status.hpp"
#include "tune/trial/process.hpp"

namespace tune {

// One end of each of the five pipes between a trial's keeper and worker and the node
// (the write ends in the keeper, the read ends in the node); -1: none.
struct channels {
  int out = -1;     // the worker's standard output
  int err = -1;     // its standard error
  int report = -1;  // its report channel (fd 3, TUNE_REPORT_FD)
  int fail = -1;    // why the worker could not start: a word, or end of file once it runs
  int news = -1;    // the keeper's news: the worker's pid, its wait status (, left behind)
};

namespace spawn_protocol {

// The spawner's answer passes the five read ends in this order.
inline constexpr size_t channel_count = 5;
std::array<int, channel_count> in_order(const channels& c);
channels from_order(const std::array<int, channel_count>& fds);

// --- words: the fail and news pipes' frames, and every length ----------------------

using word_bytes = std::array<char, 4>;
// Async-signal-safe (the keeper and the worker write words after a fork).
word_bytes encode_word(int32_t v);
int32_t decode_word(const word_bytes& b);

// --- a spawn request (node -> spawner) ---------------------------------------------

// The whole frame: the body's length (a word), then the body. Empty when the body would
// not fit a 32-bit length.
std::string encode_request(const process_spec& spec);
// A body (the bytes after its length); nullopt when it is malformed (PROTOCOL.md says
// what that is: every decoder rejects the same bodies).
std::optional<process_spec> decode_request(std::string_view body);

// --- a spawn answer (spawner -> node) ----------------------------------------------

struct spawn_answer {
  int32_t keeper = 0;  // the keeper's pid, when error == 0
  int32_t error = 0;   // an errno: why nothing started (EINVAL: a malformed request)
  bool operator==(const spawn_answer&) const = default;
};
using answer_bytes = std::array<char, 8>;
answer_bytes encode_answer(spawn_answer a);
spawn_answer decode_answer(const answer_bytes& b);

// --- I/O ---------------------------------------------------------------------------

// Reads exactly n bytes (again after EINTR); false at end of file or on an error.
bool read_full(int fd, void* data, size_t n);
// Async-signal-safe: write_all of the word.
bool write_word(int fd, int32_t v);
bool read_word(int fd, int32_t& v);

// The node: sends a request on the spawner's channel; false when it cannot (errno says).
bool send_request(int sock, const process_spec& spec);
// The spawner: the next request's body; nullopt when the channel ended (the node is
// gone) or failed mid-frame.
std::optional<std::string> read_request(int sock);
// The spawner: sends an answer, with the five read ends when `ends` is given (they stay
// open here); false when the channel is gone.
bool send_answer(int sock, spawn_answer a, const channels* ends);

// What the node received: the answer and the descriptors that came with it (close-on-
// exec), in the order above; `passed` counts them (5 with a keeper, 0 with an error).
struct received_answer {
  spawn_answer answer;
  channels ends;
  int passed = 0;
};
// The node: waits for the answer to its request; an error says why the channel is gone
// ("it closed its channel", "a short answer", or the system's error).
expected<received_answer> receive_answer(int sock);

}  // namespace spawn_protocol
}  // namespace tune
