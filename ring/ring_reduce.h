// Reduce to a root over the ring, written in the primitives: the chain starts at the
// root's right neighbour (send), every rank after it adds its share and forwards
// (recvReduceSend), and the root adds its own and keeps the result (recvReduce into
// recvbuf). Slices are pipelined as in ringBroadcast: time ~ S/B + (n-2) slices. An
// empty slice from the root back to the first rank closes the ring, so ranks that
// disagree on the root or the call fail with a mismatch on every rank.
#pragma once

#include "ring/primitives.h"

namespace gyre {

// call.count elements of call.dtype; recvbuf is written only on call.root (and may be
// null elsewhere); sendbuf may equal recvbuf on the root. Every reduction combines the
// operands in one fixed order, so the result has the same bits as ringAllReduce's
// would for the same inputs only when the op is exact (integers, min, max).
void ringReduce(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                const void* sendbuf, void* recvbuf);

}  // namespace gyre
