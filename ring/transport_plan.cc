#include "ring/transport_plan.h"

#include <algorithm>

#include "base/error.h"

namespace gyre {

size_t TransportPlan::count(const std::string& transport) const {
  return static_cast<size_t>(std::count_if(
      peers.begin(), peers.end(), [&](const auto& p) { return p.second.transport == transport; }));
}

PeerClaim peerClaimOf(const Claim& claim) {
  PeerClaim p;
  p.rank = claim.rank;
  p.pid = claim.pid;
  p.hostId = claim.hostId;
  p.where = claim.where();
  p.offers["shm"] = {claim.shm ? "room" : "", ""};
  p.offers["rdma"] = {claim.rdma, claim.rdmaWhyNot};
  return p;
}

void setOffer(Claim* claim, const std::string& transport, const TransportOffer& offer) {
  if (transport == "shm") {
    claim->shm = offer.offered();
  } else if (transport == "rdma") {
    claim->rdma = offer.what;
    claim->rdmaWhyNot = offer.whyNot;
  } else if (offer.offered() || !offer.whyNot.empty()) {
    fail(ErrorCode::kInternal, "the check-in has no place for transport {}'s offer", transport);
  }
}

namespace {

PeerPlan planPeer(const TransportList& transports, const PeerClaim& me, const PeerClaim& peer,
                  TransportKind kind) {
  const std::string forced = kind == TransportKind::kAuto ? "" : transportName(kind);
  const TransportSetup& fallback = *transports.back();
  for (const auto& t : transports) {
    const bool named = forced == t->name();
    if (!forced.empty() && !named && t.get() != &fallback) continue;
    PeerFit fit = t->canConnect(me, peer, named);
    if (fit.verdict == PeerFit::kYes) return {t->name(), std::move(fit.reason)};
    if (fit.verdict == PeerFit::kNo) return {fallback.name(), std::move(fit.reason)};
  }
  fail(ErrorCode::kInternal, "rank {}: no transport connects it to rank {}", me.rank, peer.rank);
}

// Ranks alike for every transport's canConnect() (one host identity, the same offers):
// the pairs of ranks are the pairs of these groups, so judging every pair of the
// communicator costs the square of the groups (about the hosts), not of the ranks.
struct Group {
  const PeerClaim* claim;
  size_t ranks = 0;
};

std::vector<Group> groupsOf(const std::vector<PeerClaim>& claims) {
  std::map<std::string, size_t> index;
  std::vector<Group> groups;
  for (const PeerClaim& c : claims) {
    std::string key = c.hostId;
    for (const auto& [name, o] : c.offers) key += "\n" + name + "\n" + o.what + "\n" + o.whyNot;
    auto [it, fresh] = index.emplace(key, groups.size());
    if (fresh) groups.push_back({&c, 0});
    ++groups[it->second].ranks;
  }
  return groups;
}

// Whether every pair of ranks (with `withItself`, each rank with itself too) would meet
// over `name`; a pair the setting refuses (an error) counts as not.
bool everyPairUses(const TransportList& transports, const std::vector<Group>& groups,
                   TransportKind kind, const std::string& name, bool withItself) {
  for (size_t a = 0; a < groups.size(); ++a) {
    for (size_t b = a; b < groups.size(); ++b) {
      if (a == b && !withItself && groups[a].ranks < 2) continue;
      try {
        if (planPeer(transports, *groups[a].claim, *groups[b].claim, kind).transport != name) {
          return false;
        }
      } catch (const Error&) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

TransportPlan planTransports(const TransportList& transports, const std::vector<Claim>& claims,
                             int rank, const std::vector<int>& peers, TransportKind transport) {
  std::vector<PeerClaim> view;
  view.reserve(claims.size());
  for (const Claim& c : claims) view.push_back(peerClaimOf(c));
  TransportPlan plan;
  const PeerClaim& me = view.at(static_cast<size_t>(rank));
  for (int peer : peers) {
    plan.peers[peer] = planPeer(transports, me, view.at(static_cast<size_t>(peer)), transport);
  }
  const std::vector<Group> groups = groupsOf(view);
  // A rank with itself counts: one rank alone is "all shm" when it could be.
  plan.allShm = everyPairUses(transports, groups, transport, "shm", true);
  plan.allTcp = claims.size() >= 2 &&
                everyPairUses(transports, groups, transport, transports.back()->name(), false);
  return plan;
}

TransportPlan planTransports(const std::vector<Claim>& claims, int rank,
                             const std::vector<int>& peers, TransportKind transport) {
  return planTransports(registeredTransports(), claims, rank, peers, transport);
}

}  // namespace gyre
