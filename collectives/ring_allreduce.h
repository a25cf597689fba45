// Ring all-reduce (reduce-scatter, then all-gather), written in the five primitives.
//
// With n ranks the buffer is cut into n chunks; rank r finishes chunk r. One pass of
// the schedule moves one slice of every chunk, and passes repeat until the chunks are
// done, so slices of consecutive passes are in flight on different hops at once
// (pipelined chunking). Each rank sends and receives 2(n-1)/n of the data: the
// bandwidth-optimal amount. Called with the pipes to the ring neighbours.
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// call.count elements of call.dtype; sendbuf may equal recvbuf (in place).
void ringAllReduce(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                   const void* sendbuf, void* recvbuf);

}  // namespace gyre
