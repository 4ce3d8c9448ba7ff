// The keeper (PROTOCOL.md, "The keeper"): the first child of the node or of a spawner,
// leader of the trial's process group and parent of its worker. It exists so that a
// node killed with SIGKILL still takes everything of its trials with it: the worker dies
// by its own death signal when the keeper goes, and the keeper, told of the node's death
// by a catchable signal (death_signal()), kills the whole group (the worker's children
// included) first. It passes the worker's pid and, at the end, its wait status on the
// news pipe, then kills what is left of the group, itself last.
#pragma once

#include "tune/core/status.hpp"
#include "tune/trial/process.hpp"
#include "tune/trial/spawn_protocol.hpp"

namespace tune::keeper {

// Makes the five pipes, forks the keeper (born in spec.contain.into when given), which
// starts the worker, and closes the write ends here. The keeper's pid, with the read
// ends in `read_ends`; an error (nothing left open) when a pipe, the cgroup or the fork
// fails.
expected<int> start(const process_spec& spec, channels& read_ends);

// The keeper's news of its parent's death: a real-time signal nobody sends by habit (a
// trial signalling its own process group with SIGUSR1 must not end its keeper).
int death_signal();

// Closes every descriptor but these (async-signal-safe: no allocation).
void close_all_but(int a, int b, int c, int d, int e);

}  // namespace tune::keeper
