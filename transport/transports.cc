// The registered transports, in preference order (transport/transport_setup.h): shm
// between ranks of one host, rdma between hosts where both ends have a device, tcp for
// every other pair (the fallback, so it stays last). Adding a transport is one line here
// (docs/DESIGN.md, "Adding a transport").
#include "transport/rdma/rdma_setup.h"
#include "transport/shm/shm_setup.h"
#include "transport/tcp/tcp_setup.h"
#include "transport/transport_setup.h"

namespace gyre {

std::vector<std::unique_ptr<TransportSetup>> registeredTransports() {
  std::vector<std::unique_ptr<TransportSetup>> transports;
  transports.push_back(std::make_unique<ShmSetup>());
  transports.push_back(std::make_unique<RdmaSetup>());
  transports.push_back(std::make_unique<TcpSetup>());
  return transports;
}

const TransportOffer& PeerClaim::offer(const std::string& transport) const {
  static const TransportOffer none;
  auto it = offers.find(transport);
  return it == offers.end() ? none : it->second;
}

}  // namespace gyre
