// TcpSetup: how the tcp pipes are made at creation (transport/transport_setup.h); the
// last registered transport, so the one every pair without a better one falls back to.
//
// Offer: nothing (every rank listens for links: the claim's address). Pairs: any; the
// reason it carries a pair is usually another transport's refusal ("peer rank 3 has no
// RDMA device"). Setup: each pipe takes GYRE_NSOCKS links (authenticated TCP connections,
// transport/tcp/tcp_links.h), which get GYRE_TCP_CONGESTION and become a striped pipe
// (tcp_striped_pipe.h) with its record keys under GYRE_ENCRYPT. Owns the communicator's
// tcp progress thread, which must outlive the pipes (ring/bootstrap.h PipeSet keeps it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/tcp/tcp_progress.h"
#include "transport/transport_setup.h"

namespace gyre {

class TcpSetup final : public TransportSetup {
 public:
  const char* name() const override { return "tcp"; }
  TransportOffer offer(const SetupEnv&) override { return {}; }
  PeerFit canConnect(const PeerClaim& mine, const PeerClaim& peer, bool forced) const override;
  int linksPerPipe(const TransportOptions& options) const override { return options.nsocks; }
  void prepare(SetupEnv& env, const std::vector<int>& sendTo,
               const std::vector<int>& recvFrom) override;
  PipePair connect(SetupEnv& env, int peer, PeerLinks links) override;
  std::string detail(const TransportOptions& options) const override;

 private:
  std::unique_ptr<TcpProgress> progress_;
  std::string congestion_;  // what the pipes' connections use, for the log
};

}  // namespace gyre
