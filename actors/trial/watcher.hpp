// The trial actor's other half: the thread that owns the worker process. It starts it
// (or has an idle worker of the experiment's take the trial), reads what it reports and
// writes, carries out what the actor asks, and tells the actor of its end (or, its trial
// done and its worker reusable, keeps the worker for the next trial).
//
// It never polls with sleeps: it blocks until something happens — the worker writes,
// its keeper says it ended, the actor asks something (control_channel: an eventfd the
// thread waits on beside the worker's pipes), or a deadline it set comes (the SIGKILL
// after a stop's grace, the next look at its cgroup's usage).
//
// To the actor (the atoms below), in order: started (pid > 0, or 0 and why not), lines
// (all one read gave), host (its cgroup's usage, about once a second), ended (the last).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "launch.hpp"

namespace tune {

// What the actor asks of the watching thread, in order, from any thread; the thread
// waits on fd() and takes them.
class control_channel {
 public:
  enum class kind {
    stop,     // SIGTERM now, SIGKILL after `value` ms
    kill,     // SIGKILL (for good: its end is near)
    pause,    // SIGSTOP, its cgroup frozen
    resume,
    save,     // ask the worker for a checkpoint now (SIGURG; tune/trial/PROTOCOL.md)
    hold,     // flow control: stop reading the worker (value 1) or read on (0)
  };
  struct command {
    kind what;
    int64_t value = 0;
  };

  // A channel, or why none could be made (no eventfd: out of descriptors).
  static expected<std::shared_ptr<control_channel>> make();
  explicit control_channel(int fd) : fd_(fd) {}
  ~control_channel();
  control_channel(const control_channel&) = delete;
  control_channel& operator=(const control_channel&) = delete;

  // `wake`: false for what may wait until the thread looks anyway (it reads the queue
  // on every turn of its loop): a hold, which only stops what it would do next.
  void post(kind what, int64_t value = 0, bool wake = true);
  // Flow control of the lines the thread sent the actor: counted here, so that the
  // actor's word that it handled some wakes the thread only when that lets it read again
  // (a wake for every batch would make it read in ever smaller pieces).
  void lines_sent(int64_t n);
  void lines_handled(int64_t n);
  bool too_many_lines();  // more than max_lines_in_flight sent and not handled yet
  static constexpr int64_t max_lines_in_flight = 8192;
  // What was posted since the last call, in order; fd() is quiet again afterwards.
  std::vector<command> take();
  int fd() const { return fd_; }  // readable while something waits to be taken

 private:
  std::mutex mu_;
  std::deque<command> queue_;
  int64_t in_flight_ = 0;
  int fd_ = -1;
  void wake();
};

// The thread's body (started by the actor; `self` is the actor).
void watch(trial_iface self, launch l, std::shared_ptr<control_channel> ctl, std::shared_ptr<spawner> via);

}  // namespace tune
