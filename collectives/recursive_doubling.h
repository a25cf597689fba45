// Recursive-doubling all-reduce for small messages: log2(n) exchange steps instead of
// the ring's 2(n-1) hops, so latency-bound calls finish in a few pipe hand-offs.
//
// Ranks pair up with partner rank ^ 2^k at step k; each sends its whole buffer and
// reduces what it receives into it. A rank count that is not a power of two p first
// folds the n - p highest ranks into the lowest (r + p sends to r) and hands them the
// result at the end. Every reduction combines the lower rank's operand first, so both
// partners compute the same bits and all ranks end bitwise identical (min and max are
// not bitwise commutative for +0/-0). The whole buffer travels in one slice, so the
// caller uses this only when count * elemsize fits a slot (RecursiveDoubling::fits).
#pragma once

#include <vector>

#include "collectives/primitives.h"

namespace gyre {

// The partners of `rank` in schedule order (the fold partner first where there is one):
// what the schedule below exchanges with, and what the topology's cost model counts
// (its row in recursive_doubling.cc).
std::vector<int> recursiveDoublingPeers(int rank, int size);

// Whether a call of `bytes` can run as recursive doubling over pipes of `slotBytes`.
bool recursiveDoublingFits(size_t bytes, size_t slotBytes);

// call.count elements; sendbuf may equal recvbuf. `base` supplies timeout, spin, abort
// flag, rank and inspector; its pipes are replaced per partner from `pipes`.
void recursiveDoublingAllReduce(const PrimitiveContext& base, const PeerPipes& pipes, int rank,
                                int size, const CollectiveCall& call, const void* sendbuf,
                                void* recvbuf);

}  // namespace gyre
