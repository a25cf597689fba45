// Two-level all-gather on hosts of equal rank counts (HostTopology::evenHierarchical):
//
//   1. across hosts: the ranks of local index l (one per host) ring-all-gather their own
//      shares; the L rings of a host run at once, so each host link carries (H-1) x L
//      shares in each direction: the least it can (every share of another host must
//      come in once). The flat ring sends n - 1 shares over every boundary it crosses.
//   2. inside each host: a ring over the L local ranks hands round each rank's H
//      shares (those of its local index on every host), over shm.
//
// Written in the primitives over the communicator's pipes; every received share is
// written once into recvbuf at its rank's place and forwarded from there, never
// written after it was sent, so direct sends may read recvbuf until each phase's flush.
// Each phase moves one slice per pipe for count 0 too (kMismatch for a disagreeing
// call). Results are copies: bitwise the flat all-gather's.
#pragma once

#include "collectives/host_topology.h"
#include "collectives/primitives.h"

namespace gyre {

// recvbuf: size x call.count elements; sendbuf: this rank's share (or in place at
// recvbuf + rank * count).
void hierarchicalAllGather(const PrimitiveContext& base, const PeerPipes& pipes,
                           const HostTopology& topology, int rank, const CollectiveCall& call,
                           const void* sendbuf, void* recvbuf);

}  // namespace gyre
