// Reduce to a root over the ring, written in the primitives: the chain starts at the
// root's right neighbour (send), every rank after it adds its share and forwards
// (recvReduceSend), and the root adds its own and keeps the result (recvReduce into
// recvbuf). Slices are pipelined as in ringBroadcast: time ~ S/B + (n-2) slices.
//
// An empty slice from the root to the first rank closes the ring, so that every rank
// receives a slice carrying its neighbour's tag. The root sends it before receiving
// anything and the first rank takes it after its first data slice: every rank's first
// blocking wait is then a receive, and ranks that disagree on the root or the call get
// a kMismatch from the first slice across a disagreeing pipe instead of waiting on each
// other. (Only if every rank names a root other than itself and its left neighbour,
// which takes two ranks disagreeing with the rest, does nobody send, and the timeout
// ends the wait.) The root delivers only when every rank made the same call: its data
// crossed every other pipe. A rank upstream of the mismatch may finish its part first;
// it learns of the failure from the abort, at the latest in its next call.
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// call.count elements of call.dtype; recvbuf is written only on call.root (and may be
// null elsewhere); sendbuf may equal recvbuf on the root. Every element is reduced in
// one fixed order, from root + 1 around to the root: the order ringAllReduce uses for
// its chunk `root`. Elsewhere the two agree bit for bit only when the op is exact
// (integers, min, max).
void ringReduce(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                const void* sendbuf, void* recvbuf);

// The same along any chain: `pos` is this rank's place counted from the root (0; the
// data flows from pos 1 up and back to the root), ctx's left and right its chain
// neighbours.
void chainReduce(const PrimitiveContext& ctx, int pos, int size, const CollectiveCall& call,
                 const void* sendbuf, void* recvbuf);

}  // namespace gyre
