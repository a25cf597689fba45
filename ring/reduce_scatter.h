// Ring reduce-scatter, written in the primitives: the first half of the ring
// all-reduce (send, recvReduceSend, then a final reduction into the rank's own
// share), pipelined by slices. Each rank sends and receives (n-1)/n of the input.
#pragma once

#include "ring/primitives.h"

namespace gyre {

// call.count elements per rank: sendbuf holds size * call.count elements, recvbuf
// receives call.count: element i of rank r's share is op over ranks of
// sendbuf[r * call.count + i]. In place (as NCCL) when
// recvbuf == sendbuf + rank * call.count * elemsize. The reduction order of each
// element is the ring's, as in ringAllReduce, so the two give the same bits.
void ringReduceScatter(const PrimitiveContext& ctx, int rank, int size,
                       const CollectiveCall& call, const void* sendbuf, void* recvbuf);

}  // namespace gyre
