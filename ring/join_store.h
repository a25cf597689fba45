// Reaching the bootstrap store at creation. Where it is comes from the launcher
// (base/launch_env.h, resolveStoreLocation):
// - served by rank 0 (gyrerun --no-agent-store, torchrun, mpirun, srun, by hand): rank 0
//   serves it at MASTER_ADDR:MASTER_PORT (MASTER_PORT+1 under torchrun's own agent
//   store), every other rank connects to it;
// - served by the launcher (GYRE_AGENT_STORE, set by gyrerun, whose gyre-store on node 0
//   lives as long as the job): every rank, 0 included, connects, and the communicator's
//   keys go under "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>", so that a restarted
//   group never reads an earlier attempt's keys and the store outlives any rank.
// A client retries (its server may start later) until GYRE_JOIN_TIMEOUT, saying on
// stderr, at the join's progress intervals, where it is waiting and why (refused,
// unreachable, no answer). Failures name the address, the variables that set it and the
// real elapsed time.
//
// Thread-safe (no shared state); blocking for at most Options::joinTimeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/launch_env.h"
#include "ring/options.h"

namespace gyre {

class Store;
class TcpStore;

// The store of a communicator created from the launcher's endpoint host:port: rank 0
// serves (per-call timeout Options::timeout) and the others connectStore(), or, on an
// agent store, every rank connects and gets a prefixed view of it. The store layer's
// own keys ("gyre/store/...", written by the server: store/tcp_store_server.h) are read
// through that view unprefixed, so the join still sees clients the store refused.
std::shared_ptr<Store> joinStore(const std::string& host, uint16_t port, int rank,
                                 const Options& options);
// A client of the store at host:port (served by rank 0 at MASTER_ADDR:MASTER_PORT).
// `fresh`: the store must be one this process has not joined yet (rank 0 serves a new
// store for every creation from the environment, so one where this rank is already
// known is the previous one, about to close: wait for the next). A store that resets or
// closes the connection is retried, as is a refusal.
std::shared_ptr<TcpStore> connectStore(const std::string& host, uint16_t port, int rank,
                                       const Options& options, bool fresh = false);
// The same for a store at `where` (its messages name where.from, and who serves it).
std::shared_ptr<TcpStore> connectStore(const StoreLocation& where, int rank,
                                       const Options& options, bool fresh);

}  // namespace gyre
