// The Python driver as the experiment's hook host (tune/tuner/hooks.hpp): the process that
// started `tune run` (Tuner.fit(), docs/hooks.md) holds the user's callbacks, stoppers,
// searcher, scheduler and functions, and answers over a socket it gave `tune run`
// (--driver-fd). The protocol, JSON lines both ways, is DRIVER.md beside this file;
// python/libtune/tune/_driver.py is the other end.
//
// Two threads of its own: one writes the events (all that queued up while it wrote the
// last, as one line: results batch themselves when they come fast), one reads the
// answers. Nothing here blocks the caller. The driver's end closing (the driver killed)
// or the driver not acknowledging what it was sent for `timeout` makes broken() say so.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tune/tuner/hooks.hpp"

namespace tune {

class driver_link final : public hook_host {
 public:
  // `fd`: the socket (owned from now on); `serves`: what the driver answers.
  driver_link(int fd, hook::interest serves, std::chrono::milliseconds timeout);
  ~driver_link() override;
  driver_link(const driver_link&) = delete;
  driver_link& operator=(const driver_link&) = delete;

  const hook::interest& wants() const override { return wants_; }
  std::string name() const override { return "the Python driver"; }
  status start(std::function<void()> wake) override;
  void post(hook::event e) override;
  std::vector<hook::answer> take() override;
  std::string broken() const override;
  void drain(std::chrono::milliseconds timeout) override;

 private:
  void write_loop();
  void read_loop();
  void lost(std::string why);

  int fd_ = -1;
  hook::interest wants_;
  std::chrono::milliseconds timeout_;
  std::function<void()> wake_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<hook::event> queue_;
  std::vector<hook::answer> answers_;
  uint64_t lines_sent_ = 0, lines_acked_ = 0;
  std::chrono::steady_clock::time_point waiting_since_{};  // the oldest line not acknowledged
  bool stopping_ = false, done_ = false;
  std::string broken_;
  std::thread writer_, reader_;
};

// The protocol's lines (DRIVER.md), for the link and its tests.
namespace driver_protocol {
std::string events_line(const std::vector<hook::event>& events);
// One line from the driver: its answers and how many event lines it has handled
// (`acked`, cumulative), or why it is not a line of the protocol.
struct from_driver {
  std::vector<hook::answer> answers;
  std::optional<uint64_t> acked;
};
expected<from_driver> read_line(const std::string& line);
}  // namespace driver_protocol

}  // namespace tune
