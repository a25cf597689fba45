#include "ring/bootstrap.h"

#include <unistd.h>

#include <algorithm>

#include "base/error.h"
#include "base/log.h"
#include "ring/host_identity.h"
#include "ring/store.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_connector.h"
#include "transport/tcp/tcp_pipe.h"

namespace gyre {

PipeSet connectPeers(Store& store, const BootstrapParams& p, const Options& options) {
  const auto deadline = Clock::now() + options.timeout;
  Fd listener = listenOn(SocketAddress::resolve(p.listenHost, 0));
  SocketAddress bound = SocketAddress::ofSocket(listener.get());
  store.setString(fmt::format("addr/{}", p.rank), bound.toString());
  store.setString(fmt::format("host/{}", p.rank), hostIdentity(options.hostId));
  store.setString(fmt::format("pid/{}", p.rank), std::to_string(::getpid()));
  log(LogLevel::kInfo, p.rank, "listening on {}", bound.toString());

  TcpPipeEndpoints ep;
  ep.self = p.rank;
  ep.worldSize = p.size;
  ep.commId = p.commId;
  ep.token = tokenBytes(p.token);
  ep.recvFrom = p.recvFrom;
  for (int peer : p.sendTo) {
    std::string addr = store.getString(fmt::format("addr/{}", peer));
    auto colon = addr.rfind(':');
    std::string host = addr.substr(0, colon);
    if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
    ep.sendTo.emplace(peer, SocketAddress::resolve(host, static_cast<uint16_t>(
                                                             std::stoi(addr.substr(colon + 1)))));
  }
  TcpConnections conns = connectPipes(listener.get(), ep, deadline);

  PipeSet set;
  for (int r = 0; r < p.size; ++r) set.hostIds.push_back(store.getString(fmt::format("host/{}", r)));
  set.localRanks = static_cast<int>(
      std::count(set.hostIds.begin(), set.hostIds.end(), set.hostIds[p.rank]));
  set.progress = std::make_unique<TcpProgress>();
  for (auto& [peer, fd] : conns.out) {
    set.send.emplace(peer, std::make_unique<TcpSendPipe>(std::move(fd), peer, options.slots,
                                                         options.slotBytes, set.progress.get()));
  }
  for (auto& [peer, fd] : conns.in) {
    set.recv.emplace(peer, std::make_unique<TcpRecvPipe>(std::move(fd), peer, options.slots,
                                                         options.slotBytes));
  }
  return set;
}

}  // namespace gyre
