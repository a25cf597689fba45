// Connection setup for the tcp pipes: every directed pipe is one TCP connection, or
// `channels` of them (GYRE_NSOCKS, transport/tcp/tcp_striped_pipe.h), opened by the
// sending rank to the receiving rank's listener and checked by a handshake
// (transport/wire.h, whose `channel` says which of the pipe's connections it is) before
// it carries data.
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
// are logged one by one, the rest as a count. Thread-safe (no shared state).
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "transport/socket.h"
#include "transport/wire.h"

namespace gyre {

struct TcpPipeEndpoints {
  int self = -1;
  int worldSize = 0;
  uint64_t commId = 0;
  std::array<uint8_t, kTokenBytes> token{};
  std::map<int, SocketAddress> sendTo;  // peer rank -> its listener
  std::vector<int> recvFrom;            // peer ranks that connect to us
  int channels = 1;                     // connections per directed pipe (GYRE_NSOCKS)
  std::set<int> oneChannel;             // peers whose pipes take one connection (rdma)

  int channelsFor(int peer) const { return oneChannel.count(peer) ? 1 : channels; }
};

struct TcpConnections {
  std::map<int, std::vector<Fd>> out;  // by receiving peer, by channel
  std::map<int, std::vector<Fd>> in;   // by sending peer, by channel
};

TcpConnections connectPipes(int listenFd, const TcpPipeEndpoints& endpoints,
                            Clock::time_point deadline);

}  // namespace gyre
