// gyre-bench's bootstrap through MPI, as nccl-tests does it: under mpirun, rank 0 starts
// the store on a free port of its own address and MPI_Bcast hands that address out, so
// no MASTER_ADDR or MASTER_PORT is needed, wherever mpirun placed rank 0.
//
// Contract: communicatorFromMpi() returns nullptr when gyre-bench was built without MPI
// (no Open MPI found by CMake) or the process was not started by mpirun (see
// base/launch_env.h); the caller then uses Communicator::fromEnvironment. Otherwise it
// calls MPI_Init, agrees on the store, calls MPI_Finalize (MPI is not used afterwards)
// and returns the joined communicator; failures throw gyre::Error. Rank 0's address is
// the one it would reach mpirun's host from (GYRE_SOCKET_IFNAME wins when set), or
// MASTER_ADDR when the user exported it. Call once, from the main thread.
#pragma once

#include <memory>

#include "ring/communicator.h"
#include "ring/options.h"

namespace gyre::bench {

// True when this gyre-bench was built with MPI.
bool builtWithMpi();

std::unique_ptr<Communicator> communicatorFromMpi(const Options& options);

}  // namespace gyre::bench
