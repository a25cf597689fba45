// Reaching the bootstrap store at creation: rank 0 serves it at MASTER_ADDR:MASTER_PORT,
// every other rank connects to it, retrying (rank 0 may start later) until
// GYRE_JOIN_TIMEOUT and saying on stderr, at the join's progress intervals, where it is
// waiting and why (refused, unreachable, no answer). Failures name the address, the
// variables that set it and the real elapsed time.
//
// Thread-safe (no shared state); blocking for at most Options::joinTimeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/options.h"

namespace gyre {

class TcpStore;

// `rank` 0 serves (per-call timeout Options::timeout); the others connectStore().
std::shared_ptr<TcpStore> joinStore(const std::string& host, uint16_t port, int rank,
                                    const Options& options);
// A client of the store at host:port. `fresh`: the store must be one this process has
// not joined yet (rank 0 serves a new store for every creation from the environment, so
// one where this rank is already known is the previous one, about to close: wait for
// the next). A store that resets or closes the connection is retried, as is a refusal.
std::shared_ptr<TcpStore> connectStore(const std::string& host, uint16_t port, int rank,
                                       const Options& options, bool fresh = false);

}  // namespace gyre
