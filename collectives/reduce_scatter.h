// Ring reduce-scatter, written in the primitives: the first half of the ring
// all-reduce (send, recvReduceSend, then a final reduction into the rank's own
// share), pipelined by slices. Each rank sends and receives (n-1)/n of the input.
// Every rank sends before it waits, and its share needs every other rank's input, so
// ranks that disagree on the call all fail (kMismatch, or the abort of the rank that
// saw it).
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// call.count elements per rank: sendbuf holds size * call.count elements, recvbuf
// receives call.count: element i of rank r's share is op over ranks of
// sendbuf[r * call.count + i]. In place (as NCCL) when
// recvbuf == sendbuf + rank * call.count * elemsize; any other overlap is the caller's
// error (the communicator refuses it). Share r is reduced from rank r + 1 around to
// rank r, each rank's value added after the partial result it received: exactly the
// chunks and order of ringAllReduce on the size * count elements, so share r has the
// bits of that all-reduce's elements [r * count, (r + 1) * count) for any op and dtype
// (not necessarily those of the tree or recursive-doubling all-reduce).
void ringReduceScatter(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                       const void* sendbuf, void* recvbuf);

}  // namespace gyre
