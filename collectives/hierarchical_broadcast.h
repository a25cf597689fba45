// Two-level broadcast and reduce: the ring broadcast's and ring reduce's schedules
// (collectives/ring_broadcast.h, ring_reduce.h) over a chain that visits the ranks host
// after host (HostTopology::hostOrderFrom(root)) instead of in rank order, so the data
// crosses each host boundary once: every host link carries the buffer once, against
// once per boundary the flat ring crosses (up to n - 1 times when hosts interleave their
// ranks). On hosts of consecutive ranks the flat ring already crosses each boundary
// once, and the cost model (collectives/topology_choice.h) keeps it.
//
// Same primitives, pipes and mismatch protocol as the flat schedules (the closing empty
// slice to the root, so ranks that disagree on the root or the call fail with
// kMismatch); call.root is the real root, so errors name it. The reduce's result is the
// chain's fold in chain order: on one communicator it is the same every call.
#pragma once

#include "collectives/host_topology.h"
#include "collectives/primitives.h"

namespace gyre {

// call.count elements in `buffer`, from call.root to every rank.
void hierarchicalBroadcast(const PrimitiveContext& base, const PeerPipes& pipes,
                           const HostTopology& topology, int rank, const CollectiveCall& call,
                           void* buffer);

// call.count elements reduced into call.root's recvbuf (null elsewhere allowed).
void hierarchicalReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                        const HostTopology& topology, int rank, const CollectiveCall& call,
                        const void* sendbuf, void* recvbuf);

}  // namespace gyre
