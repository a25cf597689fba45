// gyre::spawn: run a function on n ranks in n forked processes, as
// torch.multiprocessing.spawn does, for tests and single-machine programs.
//
// The parent binds a fresh bootstrap store on loopback, forks n children, and rank 0's
// child serves the store on that socket. Each child builds its Communicator, runs
// fn(comm) and exits; an exception in fn (or in building the communicator) ends that
// child with its message. spawn returns when every child exited 0; otherwise it gives
// the others `grace` to finish or fail on their own, kills what is left, and throws
// gyre::Error naming the first rank that failed, how it ended, and its message (the
// other failed ranks' messages follow).
//
// Threads: call from a thread of a process that can fork (children must not rely on
// other threads of the parent). Children run with a copy of the parent's memory.
#pragma once

#include <chrono>
#include <functional>

#include "base/export.h"
#include "ring/options.h"

namespace gyre {

class Communicator;

struct SpawnOptions {
  Options options = Options::fromEnvironment();
  std::chrono::milliseconds grace{5000};  // after the first failure
  // Adjusts one rank's options before its communicator is built (tests fake hosts
  // with it: different hostId values put shm and tcp pipes in one ring).
  std::function<void(int rank, Options& options)> perRank;
};

GYRE_API void spawn(int nranks, const std::function<void(Communicator&)>& fn);
GYRE_API void spawn(int nranks, const std::function<void(Communicator&)>& fn,
                    const SpawnOptions& options);

}  // namespace gyre
