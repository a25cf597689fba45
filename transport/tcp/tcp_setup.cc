#include "transport/tcp/tcp_setup.h"

#include "base/log.h"
#include "transport/tcp/tcp_striped_pipe.h"

namespace gyre {

PeerFit TcpSetup::canConnect(const PeerClaim&, const PeerClaim&, bool forced) const {
  return {PeerFit::kYes, forced ? "GYRE_TRANSPORT=tcp" : "no other transport connects them"};
}

void TcpSetup::prepare(SetupEnv&, const std::vector<int>&, const std::vector<int>&) {
  progress_ = std::make_unique<TcpProgress>();
}

PipePair TcpSetup::connect(SetupEnv& env, int peer, PeerLinks links) {
  const TransportOptions& options = *env.options;
  for (auto* side : {&links.out, &links.in}) {
    for (Fd& fd : *side) {
      if (!options.tcpCongestion.empty()) setCongestionControl(fd.get(), options.tcpCongestion);
      if (congestion_.empty()) congestion_ = congestionControlOf(fd.get());
    }
  }
  // With GYRE_ENCRYPT, each connection's keys from its handshake (empty: plain).
  PipePair pipes;
  if (!links.out.empty()) {
    pipes.send = makeTcpSendPipe(std::move(links.out), peer, options.slots, env.slotBytes,
                                 progress_.get(), env.size, links.outKeys);
  }
  if (!links.in.empty()) {
    pipes.recv = makeTcpRecvPipe(std::move(links.in), peer, options.slots, env.slotBytes,
                                 env.size, links.inKeys);
  }
  return pipes;
}

std::string TcpSetup::detail(const TransportOptions& options) const {
  return fmt::format(" ({} connection{} each{}{})", options.nsocks, options.nsocks == 1 ? "" : "s",
                     options.encrypt ? ", AES-256-GCM" : "",
                     congestion_.empty()
                         ? std::string()
                         : fmt::format(", congestion control {}{}", congestion_,
                                       options.tcpCongestion.empty() ? " (the host's)" : ""));
}

}  // namespace gyre
