#include "ring/transport_plan.h"

#include <algorithm>
#include <set>

#include "base/error.h"

namespace gyre {

const char* pipeTransportName(PipeTransport t) {
  switch (t) {
    case PipeTransport::kShm: return "shm";
    case PipeTransport::kTcp: return "tcp";
    case PipeTransport::kRdma: return "rdma";
  }
  return "?";
}

size_t TransportPlan::count(PipeTransport t) const {
  return static_cast<size_t>(std::count_if(peers.begin(), peers.end(),
                                           [&](const auto& p) { return p.second.transport == t; }));
}

namespace {

PeerPlan planPeer(const Claim& me, const Claim& peer, TransportKind transport) {
  const bool sameHost = me.hostId == peer.hostId;
  if (transport == TransportKind::kTcp) return {PipeTransport::kTcp, "GYRE_TRANSPORT=tcp"};
  if (transport == TransportKind::kRdma) {
    if (me.rdma.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: GYRE_TRANSPORT=rdma, but this rank has no usable RDMA device: {} (check "
           "GYRE_IB_HCA and GYRE_IB_GID_INDEX, or use GYRE_TRANSPORT=auto or tcp)",
           me.rank, me.rdmaWhyNot);
    }
    if (peer.rdma.empty()) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: GYRE_TRANSPORT=rdma, but peer rank {} ({}) has no usable RDMA device: {}",
           me.rank, peer.rank, peer.where(), peer.rdmaWhyNot);
    }
    return {PipeTransport::kRdma, "GYRE_TRANSPORT=rdma, " + me.rdma + " -> " + peer.rdma +
                                      " on rank " + std::to_string(peer.rank)};
  }
  if (sameHost) {
    if (me.shm && peer.shm) return {PipeTransport::kShm, "same host"};
    const Claim& full = me.shm ? peer : me;
    return {PipeTransport::kTcp,
            fmt::format("same host, but /dev/shm has no room on rank {}", full.rank)};
  }
  if (transport == TransportKind::kShm) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: GYRE_TRANSPORT=shm, but peer rank {} is on another host ({} vs {})", me.rank,
         peer.rank, peer.hostId, me.hostId);
  }
  if (me.rdma.empty()) return {PipeTransport::kTcp, "this rank has no RDMA device: " + me.rdmaWhyNot};
  if (peer.rdma.empty()) {
    return {PipeTransport::kTcp, fmt::format("peer rank {} has no RDMA device", peer.rank)};
  }
  return {PipeTransport::kRdma,
          fmt::format("another host, {} -> {} on rank {}", me.rdma, peer.rdma, peer.rank)};
}

// planPeer's rules over every pair of ranks, in one pass over the claims: a pair meets
// over shm when it shares a host and both have room, over rdma (auto) when it spans two
// hosts and both have a device.
bool allPairsTcp(const std::vector<Claim>& claims, TransportKind transport) {
  if (claims.size() < 2) return false;  // no pipes at all
  if (transport == TransportKind::kTcp) return true;
  if (transport == TransportKind::kRdma) return false;
  std::set<std::string> withRoom, withDevice;
  for (const Claim& c : claims) {
    if (c.shm && !withRoom.insert(c.hostId).second) return false;  // a second on this host
    if (!c.rdma.empty()) withDevice.insert(c.hostId);
  }
  return transport == TransportKind::kShm || withDevice.size() < 2;
}

}  // namespace

TransportPlan planTransports(const std::vector<Claim>& claims, int rank,
                             const std::vector<int>& peers, TransportKind transport) {
  TransportPlan plan;
  const Claim& me = claims.at(static_cast<size_t>(rank));
  for (int peer : peers) plan.peers[peer] = planPeer(me, claims.at(static_cast<size_t>(peer)), transport);
  plan.allShm = transport == TransportKind::kAuto || transport == TransportKind::kShm;
  for (const Claim& c : claims) plan.allShm = plan.allShm && c.shm && c.hostId == me.hostId;
  plan.allTcp = allPairsTcp(claims, transport);
  return plan;
}

}  // namespace gyre
