// Hierarchical (two-level) all-reduce, as NCCL's intra-node chain + inter-node ring and
// Horovod's hierarchical all-reduce, written in the five primitives over the
// communicator's existing pipes (a schedule, not a new mechanism):
//
//   1. reduce-scatter inside each host: a ring over the host's L local ranks; local
//      rank l ends with chunk l (of L, ceil(count / L) elements) summed over its host;
//   2. all-reduce of chunk l across hosts: a ring over the H ranks of local index l,
//      one per host; the L rings of a host run at once, so every host link carries
//      2(H-1)/H of the buffer in each direction (a flat ring over H*L ranks sends
//      2(HL-1)/(HL) over each link it crosses: 1.75x the buffer for 2 x 4 against 1x);
//   3. all-gather inside each host: the same local ring hands every chunk around.
//
// Operand order and bits: every element is reduced once per step in a fixed order
// (phase 1: received partial then own; phase 2: as ringAllReduce); the final value
// (avg divided by the total rank count) is computed by one rank and copied to all
// others, so every rank ends bitwise identical. Each phase moves at least one slice on
// each of its pipes, count 0 included, so a mismatched call fails with kMismatch.
// Between phases the rank flushes its sends, so no direct send still reads a user
// buffer that the next phase writes. No heap allocation per call beyond the two
// small rank lists.
//
// Above 2 slots per local rank the three phases are pipelined over up to 8 pieces of the
// buffer (the cross-host passes of piece c interleaved with the host's all-gather of
// c - 1 and reduce-scatter of c + 1), so the shm phases run while the link carries the
// previous piece; each piece's operand order is the unpipelined schedule's.
//
// Unequal hosts (3 + 1, 3 + 2 + 1) run the leaders-only form instead: each host's sum
// reaches its leader (local index 0) along a chain over shm (1 -> 2 -> ... -> L-1 -> 0),
// the leaders ring-all-reduce the whole buffer across hosts (each host link carries
// 2(H-1)/H of it, as in the shard-parallel form; only one rank per host uses it), and
// the result goes down the chain 0 -> 1 -> ... -> L-1. A host of one rank skips its
// chains. The same bits everywhere: the leaders' ring computes each final element
// once; the chains only copy it.
//
// Requires topology.hierarchical() (the caller falls back to the flat ring otherwise).
#pragma once

#include "collectives/host_topology.h"
#include "collectives/primitives.h"

namespace gyre {

// call.count elements; sendbuf may equal recvbuf. Needs pipes to this rank's host
// neighbours and to the ranks of its local index on the neighbouring hosts.
void hierarchicalAllReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                           const HostTopology& topology, int rank, const CollectiveCall& call,
                           const void* sendbuf, void* recvbuf);

}  // namespace gyre
