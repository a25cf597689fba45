// RdmaSetup: how the rdma pipes between hosts are made at creation
// (transport/transport_setup.h), over RdmaConnector (rdma_connector.h).
//
// Offer: this rank's usable RDMA port, opened before the check-in so that the claim can
// say whether there is one (GYRE_TRANSPORT=auto or rdma only), else why not. Pairs: ranks
// on two hosts that both have a device; under GYRE_TRANSPORT=rdma every pair, failing
// naming the rank without one. Setup: each end registers its pipe's memory and publishes
// its queue pair ("rdma/<s>-<r>/r" by the receiver, ".../s" by the sender); after the
// barrier each end brings its queue pair up with the other's, taking one link (an
// authenticated TCP connection) as the pipe's status channel (rdma_pipe.h). The device
// is closed when no peer gets an rdma pipe, and the connector once every pipe is out.
//
// Defined here rather than in a .cc: transport/rdma/*.cc are compiled only where
// libibverbs is found (CMakeLists.txt), and this runs in both builds (without it, the
// offer says why not: rdma_connector_none.cc).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "transport/rdma/rdma_connector.h"
#include "transport/transport_setup.h"

namespace gyre {

class RdmaSetup final : public TransportSetup {
 public:
  const char* name() const override { return "rdma"; }

  TransportOffer offer(const SetupEnv& env) override {
    const TransportKind kind = env.options->transport;
    TransportOffer offer;
    if (kind != TransportKind::kAuto && kind != TransportKind::kRdma) {
      offer.whyNot = fmt::format("GYRE_TRANSPORT={}", transportName(kind));
      return offer;
    }
    connector_ = RdmaConnector::open(*env.options, &offer.whyNot);
    if (connector_) offer.what = connector_->description();
    return offer;
  }

  PeerFit canConnect(const PeerClaim& mine, const PeerClaim& peer, bool forced) const override {
    const TransportOffer& own = mine.offer(name());
    const TransportOffer& theirs = peer.offer(name());
    if (forced) {
      if (!own.offered()) {
        fail(ErrorCode::kInvalidArgument,
             "rank {}: GYRE_TRANSPORT=rdma, but this rank has no usable RDMA device: {} (check "
             "GYRE_IB_HCA and GYRE_IB_GID_INDEX, or use GYRE_TRANSPORT=auto or tcp)",
             mine.rank, own.whyNot);
      }
      if (!theirs.offered()) {
        fail(ErrorCode::kInvalidArgument,
             "rank {}: GYRE_TRANSPORT=rdma, but peer rank {} ({}) has no usable RDMA device: {}",
             mine.rank, peer.rank, peer.where, theirs.whyNot);
      }
      return {PeerFit::kYes, "GYRE_TRANSPORT=rdma, " + own.what + " -> " + theirs.what +
                                 " on rank " + std::to_string(peer.rank)};
    }
    if (mine.hostId == peer.hostId) return {PeerFit::kPass, ""};  // one host: not by default
    if (!own.offered()) return {PeerFit::kNo, "this rank has no RDMA device: " + own.whyNot};
    if (!theirs.offered()) {
      return {PeerFit::kNo, fmt::format("peer rank {} has no RDMA device", peer.rank)};
    }
    return {PeerFit::kYes,
            fmt::format("another host, {} -> {} on rank {}", own.what, theirs.what, peer.rank)};
  }

  int linksPerPipe(const TransportOptions&) const override { return 1; }

  void prepare(SetupEnv& env, const std::vector<int>& sendTo,
               const std::vector<int>& recvFrom) override {
    if (sendTo.empty() && recvFrom.empty()) {
      connector_.reset();  // no rdma pipe: the device is not kept open
      return;
    }
    const size_t slots = env.options->slots;
    for (int peer : recvFrom) {
      env.exchange->publish(key(peer, env.rank, "r"),
                            connector_->addRecv(peer, slots, env.slotBytes, env.size));
    }
    for (int peer : sendTo) {
      env.exchange->publish(key(env.rank, peer, "s"),
                            connector_->addSend(peer, slots, env.slotBytes, env.size));
    }
  }

  PipePair connect(SetupEnv& env, int peer, PeerLinks links) override {
    PipePair pipes;
    if (!links.out.empty()) {
      pipes.send = connector_->connectSend(peer, env.exchange->read(key(env.rank, peer, "r")),
                                           std::move(links.out.front()));
    }
    if (!links.in.empty()) {
      pipes.recv = connector_->connectRecv(peer, env.exchange->read(key(peer, env.rank, "s")),
                                           std::move(links.in.front()));
    }
    return pipes;
  }

  void finish() override { connector_.reset(); }  // the pipes share the device

 private:
  static std::string key(int sender, int receiver, const char* end) {
    return fmt::format("rdma/{}-{}/{}", sender, receiver, end);
  }

  std::unique_ptr<RdmaConnector> connector_;
};

}  // namespace gyre
