#include "transport/tcp/tcp_links.h"

#include <algorithm>

#include "base/error.h"

namespace gyre {
namespace {

template <typename T>
std::vector<T> takeFrom(std::map<int, std::vector<T>>& from, int peer) {
  auto it = from.find(peer);
  if (it == from.end()) return {};
  std::vector<T> out = std::move(it->second);
  from.erase(it);
  return out;
}

}  // namespace

TcpLinks::TcpLinks(const std::string& host, int rank, int size, const TransportOptions& options)
    : listener_(listenOn(SocketAddress::resolve(host, 0), SOMAXCONN)) {  // every rank may dial it at once (all-to-all)
  if (!options.tcpCongestion.empty()) setCongestionControl(listener_.get(), options.tcpCongestion);
  address_ = SocketAddress::ofSocket(listener_.get()).toString();
  ep_.self = rank;
  ep_.worldSize = size;
  ep_.encrypt = options.encrypt;
  ep_.channels = options.nsocks;
}

void TcpLinks::addSend(int peer, const std::string& address, int count) {
  ep_.sendTo.emplace(peer, SocketAddress::parse(address));
  if (count != ep_.channels) ep_.channelsOf[peer] = count;
}

void TcpLinks::addRecv(int peer, int count) {
  ep_.recvFrom.push_back(peer);
  if (count != ep_.channels) ep_.channelsOf[peer] = count;
}

void TcpLinks::connect(uint64_t commId, const Key& key, Clock::time_point deadline,
                       bool keepListener) {
  ep_.commId = commId;
  ep_.key = key;
  std::sort(ep_.recvFrom.begin(), ep_.recvFrom.end());  // the order messages name them in
  conns_ = connectPipes(listener_.get(), ep_, deadline);
  if (!keepListener) listener_.reset();
  connected_ = true;
}

PeerLinks TcpLinks::take(int peer) {
  PeerLinks links;
  links.out = takeFrom(conns_.out, peer);
  links.in = takeFrom(conns_.in, peer);
  links.outKeys = takeFrom(conns_.outKeys, peer);
  links.inKeys = takeFrom(conns_.inKeys, peer);
  return links;
}

}  // namespace gyre
