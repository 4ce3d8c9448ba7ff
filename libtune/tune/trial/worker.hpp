// The worker's start (PROTOCOL.md, "The worker"): what runs in the process the keeper
// forked, between the fork and the trial's program. Only async-signal-safe calls.
#pragma once

#include <sys/types.h>

#include "tune/trial/process.hpp"
#include "tune/trial/spawn_protocol.hpp"

namespace tune::worker {

// Everything the worker needs, built before the keeper's fork (nothing allocates after).
struct start_args {
  const process_spec* spec = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  channels ends;       // the write ends of out, err, report and fail (news is the keeper's)
  pid_t keeper = -1;   // its parent
  bool warm = false;   // runs in this process (runs_in_process) instead of exec
};

// Becomes the trial's worker: its account, its death signal, its descriptors (0 on
// /dev/null, 1, 2 and 3 the pipes, nothing else), its folder; then exec, or with `warm`
// the in-process function. A failure is a word on `ends.fail` (an errno), then exit 127.
[[noreturn]] void become(const start_args& a);

// Tells the node why it could not start (a word on `fd`: an errno, or -errno for the
// keeper's cgroups), and ends with 127.
[[noreturn]] void fail_with(int fd, int e);

// A program's own spawner (spawner::serve) sets the function that runs a worker of this
// very program in a fork of it; null (the default): always exec.
void set_in_process(spawner::in_process_fn fn);
// Whether a worker of `spec` runs in a fork of this process: it is this very program
// file with --tune-worker, and nothing in its environment would make a fresh start differ
// (the dynamic loader's variables; LIBTUNE_FRESH_PROCESS asks for exec). Before the
// keeper's fork (it allocates).
bool runs_in_process(const process_spec& spec);

}  // namespace tune::worker
