// Warm starts for libtune programs' own trials (C++ trainables run as
// `PROGRAM --tune-worker NAME`): the node starts the program once as its own spawner
// (`PROGRAM --tune-spawner`, spawner::serve), and each trial's worker is a fork of it
// that runs the trainable: no exec, no dynamic loading and relocation, no static
// initialisation per trial (most of a short trial's CPU: bench_overhead's table). The
// keeper, process group, cgroup, pipes, credentials, environment and end are the same
// as for an exec'd worker (the spawner's protocol, tune/trial/process.hpp).
//
// What a library reads from the environment as it loads (thread counts, the dynamic
// loader's variables) is the spawner's, so there is one spawner per program and per
// value of those variables, started with the trial's values; a spawner whose program
// started threads as it loaded refuses to serve (it exits), and its trials are exec'd
// as always. At most `max_warm` spawners live; the least recently used one ends.
// Thread-safe: trials start from their own threads.
#pragma once

#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "tune/trial/process.hpp"

namespace tune {

class program_spawners {
 public:
  // `env`: the environment the spawners start with (the node's trials' own, less what
  // each trial adds); each gets the trial's load-time variables on top.
  explicit program_spawners(std::map<std::string, std::string> env, size_t max_warm = 4);

  // The spawner for a worker whose spec is `spec`: a warm one when its command is a
  // libtune program's worker (argv: PROGRAM --tune-worker NAME) and LIBTUNE_FRESH_PROCESS
  // is not set; none otherwise, or when it cannot start (then exec'd as always).
  std::shared_ptr<spawner> for_spec(const process_spec& spec);

  // The variables read as a program loads, whose values the spawner must share with
  // the trial (a spawner per distinct set).
  static const std::vector<std::string>& load_time_variables();

 private:
  std::map<std::string, std::string> env_;
  size_t max_warm_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<spawner>> warm_;  // by program and load-time values
  std::list<std::string> recent_;                         // most recent first
  std::map<std::string, int> starts_;                     // how often each was started
};

}  // namespace tune
