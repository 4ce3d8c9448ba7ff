// Step times of trials' starts and ends across a cluster's processes, for finding where
// a trial's start goes (bench/steps.py reads them). Off unless the environment variable
// TUNE_TRACE_STEPS names a file when the process starts: then each traced step appends
// "<step> <trial> <CLOCK_MONOTONIC nanoseconds>\n" to it with one write() on an O_APPEND
// descriptor, so the lines of the controller, head, nodes and trial threads sharing the
// file never interleave. The monotonic clock is one machine's: trace a cluster whose
// processes all run on one machine (loopback), as bench_overhead does.
#pragma once

#include <string>

namespace tune {

class step_trace {
 public:
  explicit step_trace(const std::string& path);  // empty: off
  ~step_trace();
  step_trace(const step_trace&) = delete;
  step_trace& operator=(const step_trace&) = delete;
  bool on() const { return fd_ >= 0; }
  void operator()(const char* step, const std::string& trial) const;

 private:
  int fd_ = -1;
};

// This process's trace (TUNE_TRACE_STEPS, read at the first call; a path that cannot
// be opened is said once on standard error). step_tracing(): whether it is on, for
// callers that would build the trial's name only to trace it.
bool step_tracing();
void trace_step(const char* step, const std::string& trial);

}  // namespace tune
