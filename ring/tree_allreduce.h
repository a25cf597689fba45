// Tree all-reduce over the double binary tree (ring/double_tree.h): the buffer is cut
// in two halves, one per tree; in each, slices are reduced up (children's slices plus
// this rank's -> parent) and the root's results are broadcast down (parent -> this
// rank's output and the children), pipelined by slices. The latency is ~2 log2(n)
// hops instead of the ring's 2(n-1), at the price of about twice the ring's bytes on
// the busiest rank: the choice between them is ring/algorithm_choice.h's.
//
// Every reduction combines its operands in an order fixed by the tree, and the final
// value is computed once (at the root) and copied down, so all ranks end bitwise
// identical.
#pragma once

#include "ring/primitives.h"

namespace gyre {

// call.count elements; sendbuf may equal recvbuf. Needs pipes to doubleTreePeers().
void treeAllReduce(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                   const CollectiveCall& call, const void* sendbuf, void* recvbuf);

}  // namespace gyre
