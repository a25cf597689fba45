// The transport of every pipe, decided from the claims alone.
//
// Both ends of a pipe must pick the same transport, so the choice is a pure function of
// what every rank published at check-in (ring/join.h Claim: host identity, room for
// shared-memory segments, a usable RDMA device) and of GYRE_TRANSPORT, which the join
// makes equal on every rank. Each end computes it for its side and gets the same answer;
// nothing else (no later store read, no local probe) enters it. The reason travels with
// the choice so that the INFO line names what was really built.
//
// Rules, per peer: GYRE_TRANSPORT=tcp: tcp. Same host (and not GYRE_TRANSPORT=rdma):
// shared memory when both ranks have room in /dev/shm, else tcp. Another host: rdma when
// both ranks have a device (GYRE_TRANSPORT=auto or rdma), else tcp. GYRE_TRANSPORT=shm
// with a peer on another host, and GYRE_TRANSPORT=rdma where either end has no device,
// fail with kInvalidArgument naming the ranks.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/options.h"
#include "ring/join.h"

namespace gyre {

enum class PipeTransport { kShm, kTcp, kRdma };

const char* pipeTransportName(PipeTransport t);

struct PeerPlan {
  PipeTransport transport = PipeTransport::kTcp;
  std::string reason;  // "same host", "GYRE_TRANSPORT=tcp", "peer rank 3 has no RDMA device"
};

struct TransportPlan {
  std::map<int, PeerPlan> peers;  // every peer of `rank` that was asked for
  // Every rank on one host with shared memory between all of them: the cost model's
  // input, equal on every rank.
  bool allShm = false;
  // There are pipes, and every pipe between any two ranks of the communicator is tcp
  // (GYRE_TRANSPORT=tcp, or no two ranks that would meet over shm or rdma): equal on
  // every rank, so it may pick what every rank must agree on (the default slot,
  // base/options.h).
  bool allTcp = false;

  bool uses(int peer, PipeTransport t) const {
    auto it = peers.find(peer);
    return it != peers.end() && it->second.transport == t;
  }
  size_t count(PipeTransport t) const;
};

// `claims` by rank (Join::checkIn's result); `peers` the ranks `rank` connects to.
TransportPlan planTransports(const std::vector<Claim>& claims, int rank,
                             const std::vector<int>& peers, TransportKind transport);

}  // namespace gyre
