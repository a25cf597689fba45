// Tree all-reduce over the double binary tree (collectives/double_tree.h): the buffer is cut
// in two halves, one per tree (tree 0 takes the first, ceil(count / 2) elements); in
// each, slices are reduced up (children's slices plus this rank's -> parent) and the
// root's results are broadcast down (parent -> this rank's output and the children),
// pipelined by slices, both trees and both directions at once on one thread
// (collectives/tree_clock.h). The latency is ~2 log2(n) hops instead of the ring's
// 2(n-1), for about as many bytes as the ring on the busiest rank: 2S for a buffer of S
// (inner in one tree: 2 x S/2 in and S/2 out up, S/2 in and 2 x S/2 out down; a leaf in
// the other: S/2 each way), where the ring moves 2(n-1)/n S. The choice between them is
// collectives/algorithm_choice.h's.
//
// Every reduction combines its operands in an order fixed by the tree (children[0],
// this rank, children[1]), and the final value is computed once (at the root, where
// avg divides by the rank count) and copied down, so all ranks end bitwise identical.
// Every tree edge carries at least one slice per call, count 0 included, so mismatched
// calls fail with kMismatch. Needs at least 2 slots per pipe (Options::slots >= 2).
// No heap allocation per call; no copy beyond the reductions and the transports' own.
#pragma once

#include "collectives/primitives.h"

namespace gyre {

// call.count elements; sendbuf may equal recvbuf. Needs pipes to doubleTreePeers().
void treeAllReduce(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                   const CollectiveCall& call, const void* sendbuf, void* recvbuf);

}  // namespace gyre
