// Which pipes a large simulated communicator connects (sim/sim_world.h): the peers
// gyre's schedules talk to, so that 4,096 ranks need O(n log n) pipes instead of n^2.
//
//   every schedule on the ring      rank - 1, rank + 1
//   the double binary tree          collectives/double_tree.h's doubleTreePeers
//   recursive doubling              collectives/recursive_doubling.h's partners
//   two-level forms                 the host's ring (local index - 1, + 1), the ring of
//                                   its local index across hosts (host - 1, + 1; equal
//                                   hosts), the leaders' ring (leaders only)
//
// Rooted two-level calls (broadcast, reduce) also need the chain of
// HostTopology::hostOrderFrom(root), which sim_world.cc adds per root. All-to-all and
// send/recv to arbitrary peers need every pair: only up to SimOptions::allPairsMaxRanks.
//
// Contract: a pure function of (rank, topology); the relation is symmetric (a peer of
// rank r has r as a peer), so every pipe's both ends exist.
#pragma once

#include <vector>

#include "collectives/host_topology.h"

namespace gyre::sim {

// The peers of `rank`, sorted, without duplicates and without rank itself.
std::vector<int> schedulePeers(int rank, const HostTopology& topology);

}  // namespace gyre::sim
