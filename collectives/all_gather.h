// Ring all-gather, written in the primitives: n-1 steps in which every rank forwards
// the share it received last (recvCopySend), pipelined by slices. Each rank sends and
// receives (n-1)/n of the output: bandwidth-optimal (busbw factor (n-1)/n). Every rank
// sends before it waits, and its result needs every other rank's share, so ranks that
// disagree on the call all fail (kMismatch, or the abort of the rank that saw it).
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// call.count elements per rank: sendbuf holds this rank's call.count elements and
// recvbuf receives size * call.count, rank r's share at offset r * call.count. In
// place (as NCCL) when sendbuf == recvbuf + rank * call.count * elemsize: the share is
// then not copied. Any other overlap is the caller's error (the communicator refuses it).
void ringAllGather(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                   const void* sendbuf, void* recvbuf);

}  // namespace gyre
