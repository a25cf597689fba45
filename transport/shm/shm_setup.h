// ShmSetup: how the shared-memory pipes between ranks of one host are made at creation
// (transport/transport_setup.h).
//
// Offer: room in /dev/shm for this rank's receive segments (not with GYRE_TRANSPORT=tcp);
// a full /dev/shm is a common container failure, so it is published and both ends fall
// back to tcp alike. Pairs: ranks of one host that both have room; another host is not
// this transport's pair (GYRE_TRANSPORT=shm there fails naming both hosts). Setup: each
// receiver creates its segment, anonymous (memfd: never a name in /dev/shm, so nothing is
// left there however the job dies), and publishes where to open it ("segment/<s>-<r>");
// after the barrier each sender opens it. Where memfd is missing the segments are named:
// a rank that fails on the way unlinks every name it is an end of (its peer may have died
// holding one), and finish() unlinks them once every rank has opened its segments.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "transport/shm/shm_pipe.h"
#include "transport/transport_setup.h"

namespace gyre {

class ShmSetup final : public TransportSetup {
 public:
  const char* name() const override { return "shm"; }
  TransportOffer offer(const SetupEnv& env) override;
  PeerFit canConnect(const PeerClaim& mine, const PeerClaim& peer, bool forced) const override;
  int linksPerPipe(const TransportOptions&) const override { return 0; }
  void prepare(SetupEnv& env, const std::vector<int>& sendTo,
               const std::vector<int>& recvFrom) override;
  PipePair connect(SetupEnv& env, int peer, PeerLinks links) override;
  void finish() override;
  void abandon() noexcept override;

 private:
  std::set<int> sendTo_;
  std::map<int, std::unique_ptr<ShmRecvPipe>> recv_;  // created, not yet handed out
  std::vector<std::string> names_;                    // every segment this rank is an end of
};

}  // namespace gyre
