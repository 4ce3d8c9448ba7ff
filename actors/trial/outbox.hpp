// What a trial's actor sends its owner, apart from actors (outbox_test.cpp tests it):
// every message numbered from 0, sent at once while the owner can be reached, kept
// until the owner acknowledges it (trial_ack_atom) so that what a broken route lost is
// sent again when the owner greets the trial (route_atom, "I have the first N"), and the
// flow control that stops reading the worker while the owner is behind (wire.hpp).
//
//   greeted ──── hold (the node lost the head) ────► held: kept, not sent
//      ▲                                               │
//      └──────── greet(received): the rest sent ◄──────┘
//
// At first a trial with an owner is held until the owner's first greeting (or until
// the actor gives up waiting and greets it with 0). While greeted, what the owner
// acknowledged is dropped and at most `kept` messages are kept; while held, all are.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <vector>

namespace tune {

template <class Message>
class outbox {
 public:
  // `kept`: the most kept while greeted; `window`: the most unacknowledged before the
  // owner counts as behind; without an owner nothing is kept or sent.
  outbox() : outbox(0, 0, false) {}
  outbox(size_t kept, uint64_t window, bool has_owner)
      : kept_(kept), window_(window), owner_(has_owner), greeted_(!has_owner) {}

  // A message for the owner: true when it goes out now (else it waits for a greeting).
  bool push(Message m) {
    if (!owner_) return false;
    kept_messages_.push_back(std::move(m));
    trim();
    return greeted_;
  }
  // The owner has the first `received`.
  void ack(uint64_t received) {
    acked_ = std::max(acked_, received);
    trim();
  }
  // The owner greets the trial, having had the first `received`: the messages to send
  // again, in order (none when nothing is missing); `lost`: how many it missed that are
  // no longer kept.
  struct resend {
    std::vector<Message> again;
    uint64_t lost = 0;
  };
  resend greet(uint64_t received) {
    resend out;
    acked_ = std::max(acked_, received);
    if (greeted_ && received >= end()) {
      trim();
      return out;
    }
    if (received < first_) out.lost = first_ - received;
    for (uint64_t i = std::max(received, first_); i < end(); ++i) out.again.push_back(kept_messages_[i - first_]);
    greeted_ = true;
    trim();
    return out;
  }
  // The route to the owner is gone: what follows is kept until it greets again. False
  // when it was held already.
  bool hold() {
    if (!greeted_ || !owner_) return false;
    greeted_ = false;
    held_since_ = end();
    return true;
  }

  bool greeted() const { return greeted_; }
  // More than `window` messages not acknowledged: stop reading what makes more.
  bool behind() const { return owner_ && end() > acked_ + window_; }
  uint64_t end() const { return first_ + kept_messages_.size(); }  // the number the next message gets
  uint64_t since_hold() const { return end() - held_since_; }      // messages kept since the last hold
  size_t kept() const { return kept_messages_.size(); }

 private:
  void trim() {
    if (!greeted_) return;
    // What the owner acknowledged is not kept: a message can hold a batch of hundreds
    // of results, and keeping the latest `kept` of them whatever was acknowledged held
    // hundreds of MiB in a report flood when the owner was slow.
    while (!kept_messages_.empty() && (first_ < acked_ || kept_messages_.size() > kept_)) {
      kept_messages_.pop_front();
      ++first_;
    }
  }

  size_t kept_;
  uint64_t window_;
  bool owner_, greeted_;
  std::deque<Message> kept_messages_;
  uint64_t first_ = 0;       // the number of the first kept
  uint64_t acked_ = 0;       // how many the owner said it received
  uint64_t held_since_ = 0;  // messages from this number on were not sent (while held)
};

}  // namespace tune
