// Failure propagation: how a failed collective is named on the rank that detects it,
// what that rank tells its neighbours, and how a rank the abort reaches names it.
//
// One failure, every rank learns it, every message names the same rank at fault:
//   detecting rank: "rank 1: allreduce #17 (float sum, count 262144) failed after sending
//                    65536 and receiving 32768 bytes: rank 0 failed: peer rank 0 closed
//                    the connection (it exited or failed)"
//   any other rank: "rank 5: allreduce #17 (...) failed after sending 0 and receiving 0
//                    bytes: rank 0 failed: rank 1 reported: peer rank 0 closed the
//                    connection (it exited or failed) (the abort reached this rank from
//                    peer rank 4)"
// The headline is "rank R failed" (it died, closed or broke the protocol), "rank R
// stalled" (a timeout: collectives/stall_inspector.h finds R), "collective mismatch" or
// "aborted"; the error code is the detecting rank's. The detecting rank aborts its
// communicator and publishes the failure (PeerStatus kAborted) on every pipe; a rank
// that receives it does the same, so it crosses the ring in both directions within
// milliseconds, with no rank waiting for its own timeout.
//
// Contract: pure functions on values; thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "base/error.h"
#include "collectives/collective.h"
#include "transport/pipe.h"

namespace gyre {

class StallInspector;

struct Failure {
  ErrorCode code = ErrorCode::kInternal;
  int culprit = -1;    // the rank at fault; -1 when unknown
  int reporter = -1;   // the rank that detected it
  int via = -1;        // on a rank the abort reached: the peer it came from
  std::string detail;  // what the reporter saw
};

// The failure behind an error a collective threw on rank `self`. `localAbort` is the
// reason abort() gave on this rank, if it was called.
Failure classifyFailure(const Error& error, int self, const StallInspector& inspector,
                        const std::string& localAbort);

// "rank 0 failed", "rank 3 stalled", "collective mismatch", "aborted".
std::string failureHeadline(const Failure& failure);

// The full message for `call` on rank `self` (see the file comment).
std::string failureMessage(int self, const CollectiveCall& call, size_t sent, size_t received,
                           const Failure& failure);

// What rank `self` publishes to its neighbours for `failure` during collective `seq`.
PeerStatus abortNotice(const Failure& failure, int self, uint32_t seq);

}  // namespace gyre
