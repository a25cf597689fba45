// Which peers a communicator connects at creation (GYRE_CONNECT=lazy, the default): the
// ones the default schedules use on every call path, so that no collective of the
// default plan waits for a connection and a rank holds O(neighbours) pipes, not n - 1.
//
//   every ring schedule             rank - 1, rank + 1
//   the double binary tree          doubleTreePeers (collectives/double_tree.h)
//   recursive doubling              recursiveDoublingPeers (collectives/recursive_doubling.h),
//                                   where GYRE_ALGO lets it run (auto picks it for small
//                                   all-reduces and barriers)
//   two-level forms                 the host's ring (local index - 1, + 1), the ring of
//                                   its local index across hosts (equal hosts), the
//                                   leaders' ring (leaders only; it carries the link probe)
//
// Everything else connects the first time an operation needs it (ring/lazy_connector.h):
// all-to-all(v), send/recv to any peer, the chains of rooted two-level calls, recursive
// doubling's partners where GYRE_ALGO forces another algorithm. Adding a schedule that talks to other peers on every call:
// add them here.
//
// Contract: a pure function of its arguments, the same on every rank; the result is
// symmetric (q is a peer of r exactly when r is a peer of q), sorted, without duplicates
// and without `rank`.
#pragma once

#include <vector>

#include "collectives/host_topology.h"

namespace gyre {

// `recursiveDoubling`: GYRE_ALGO is auto or rd (the same on every rank: the join checks it).
std::vector<int> eagerPeers(int rank, const HostTopology& topology, bool recursiveDoubling);

// The peers `rank`'s own schedules name (the table above), sorted, without duplicates and
// without `rank`; each relation in it is symmetric, so for n ranks in one process (the
// simulator, sim/sim_world.h) this is eagerPeers without its O(n) check per rank.
std::vector<int> schedulePeers(int rank, const HostTopology& topology, bool recursiveDoubling);

}  // namespace gyre
