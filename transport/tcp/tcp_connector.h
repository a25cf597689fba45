// Connection setup for the tcp pipes: every directed pipe is one TCP connection, or
// `channels` of them (GYRE_NSOCKS, transport/tcp/tcp_striped_pipe.h), opened by the
// sending rank to the receiving rank's listener and authenticated by the challenge/
// response of transport/handshake.h (the Hello's `channel` says which of the pipe's
// connections it is) before it carries data. Both ends prove they hold the job's secret;
// the connector checks the acceptor before it answers, so a rank never keeps a
// connection to a listener that does not know the secret.
//
// Contract: `connectPipes` returns once every outgoing connection is accepted by its
// peer and one valid connection from every expected sender has arrived, or throws
// gyre::Error naming the ranks still missing when the deadline passes. A connection
// whose handshake is wrong (bytes from another job, another communicator, another
// protocol version, garbage) is logged and closed, and the listener keeps accepting:
// a stray client cannot stop a job from forming. Handshakes are read concurrently (at
// most 64 at once, each within 5 s; garbage is refused at its first bytes), so a silent,
// truncated or flooding client delays no real peer; a refused gyre peer gets a
// refusal reply, so it fails saying so instead of timing out. The first 10 refusals
// are logged one by one, the rest as a count. Both sides of every handshake run in one
// poll loop, so two ranks connecting to each other cannot deadlock. An acceptor whose
// challenge is not signed with the secret fails the call naming the peer rank and its
// address. Thread-safe (no shared state).
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "transport/socket.h"
#include "transport/handshake.h"
#include "transport/wire.h"

namespace gyre {

struct TcpPipeEndpoints {
  int self = -1;
  int worldSize = 0;
  uint64_t commId = 0;
  Key key{};             // authKey(secret) (base/secret.h)
  bool encrypt = false;  // GYRE_ENCRYPT: derive record keys for every connection
  std::map<int, SocketAddress> sendTo;  // peer rank -> its listener
  std::vector<int> recvFrom;            // peer ranks that connect to us
  int channels = 1;                     // connections per directed pipe (GYRE_NSOCKS)
  std::map<int, int> channelsOf;        // peers whose pipes take another number (rdma: 1)

  int channelsFor(int peer) const {
    auto it = channelsOf.find(peer);
    return it == channelsOf.end() ? channels : it->second;
  }
  int maxChannels() const {
    int most = channels;
    for (const auto& [peer, n] : channelsOf) most = std::max(most, n);
    return most;
  }
};

struct TcpConnections {
  std::map<int, std::vector<Fd>> out;  // by receiving peer, by channel
  std::map<int, std::vector<Fd>> in;   // by sending peer, by channel
  // With `encrypt`: the keys of each connection above, at the same places.
  std::map<int, std::vector<ConnectionKeys>> outKeys;
  std::map<int, std::vector<ConnectionKeys>> inKeys;
};

TcpConnections connectPipes(int listenFd, const TcpPipeEndpoints& endpoints,
                            Clock::time_point deadline);

}  // namespace gyre
