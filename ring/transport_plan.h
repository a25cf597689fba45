// The transport of every pipe, decided from the claims alone.
//
// Both ends of a pipe must pick the same transport, so the choice is a pure function of
// what every rank published at check-in (ring/join.h Claim: host identity and each
// transport's offer, such as room for shared-memory segments or a usable RDMA device) and
// of GYRE_TRANSPORT, which the join makes equal on every rank. Each end computes it for
// its side and gets the same answer; nothing else (no later store read, no local probe)
// enters it. The reason travels with the choice so that the INFO line names what was
// really built.
//
// The rule is the registered transports' (transport/transport_setup.h), asked in
// preference order: the first whose canConnect() says yes carries the pair, one that says
// no sends it to the last (tcp) with its reason. With GYRE_TRANSPORT set, only the named
// transport is asked, then the last. So, per peer: GYRE_TRANSPORT=tcp: tcp. Same host (and
// not GYRE_TRANSPORT=rdma): shared memory when both ranks have room in /dev/shm, else
// tcp. Another host: rdma when both ranks have a device (GYRE_TRANSPORT=auto or rdma),
// else tcp. GYRE_TRANSPORT=shm with a peer on another host, and GYRE_TRANSPORT=rdma where
// either end has no device, fail with kInvalidArgument naming the ranks.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ring/join.h"
#include "ring/options.h"
#include "transport/transport_setup.h"

namespace gyre {

using TransportList = std::vector<std::unique_ptr<TransportSetup>>;

struct PeerPlan {
  std::string transport = "tcp";  // the transport's name()
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
  // transport/transport_options.h).
  bool allTcp = false;

  bool uses(int peer, const std::string& transport) const {
    auto it = peers.find(peer);
    return it != peers.end() && it->second.transport == transport;
  }
  size_t count(const std::string& transport) const;
};

// `claims` by rank (Join::checkIn's result); `peers` the ranks `rank` connects to;
// `transports` in preference order, the fallback last.
TransportPlan planTransports(const TransportList& transports, const std::vector<Claim>& claims,
                             int rank, const std::vector<int>& peers, TransportKind transport);
// The same with registeredTransports().
TransportPlan planTransports(const std::vector<Claim>& claims, int rank,
                             const std::vector<int>& peers, TransportKind transport);

// A Claim keeps each transport's offer in a field of its own (ring/join.h): these move
// offers between it and the transports' view of it. A transport whose offer has no field
// there fails setOffer() with kInternal.
PeerClaim peerClaimOf(const Claim& claim);
void setOffer(Claim* claim, const std::string& transport, const TransportOffer& offer);

}  // namespace gyre
