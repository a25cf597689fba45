// The contents of a gyreUniqueId, and the bootstrap stores that gyreGetUniqueId starts.
//
// Contract:
// - An id is text in a fixed 128-byte field: "gyre-id1 <port> <token> <host>\0", zero
//   padded. decode() rejects anything else with kInvalidArgument (an uninitialized or
//   truncated id), so a bad id fails before connecting anywhere.
// - serveUniqueId() starts a TcpStore server on a free port of `host` and keeps it in a
//   process-wide registry until the process exits: gyre's split goes through the store,
//   for every sub-communicator of every rank, so no earlier moment is safe to stop it. At
//   exit (an atexit handler) the servers this process started are stopped and joined.
//   Servers inherited through fork() belong to the parent: a child never stops (or
//   touches) them; their threads do not exist in the child.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ring/options.h"

namespace gyre::capi {

struct UniqueId {
  std::string host;
  uint16_t port = 0;
  std::string token;  // 32 hex digits; becomes Options::token of every rank
};

inline constexpr size_t kUniqueIdBytes = 128;

// Writes kUniqueIdBytes bytes to out; kInvalidArgument if the host is too long to fit.
void encode(const UniqueId& id, char* out);
UniqueId decode(const char* bytes);

// Starts a store server (host from MASTER_ADDR, default 127.0.0.1) and returns its id
// with a fresh random token.
UniqueId serveUniqueId(const Options& options);

}  // namespace gyre::capi
