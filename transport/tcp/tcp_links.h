// TcpLinks: the authenticated TCP connections between a communicator's ranks ("links"):
// a tcp pipe is made of GYRE_NSOCKS of them, an rdma pipe takes one as its status
// channel (transport/transport_setup.h linksPerPipe()).
//
// Every rank listens on one socket, whose address it publishes in its claim. Once every
// rank has said which links it needs, connect() forms them all in one call
// (tcp_connector.h: both sides of every handshake in one poll loop, so two ranks
// connecting to each other cannot deadlock) and closes the listener (or keeps it for
// pipes connected on first use); take() hands each
// pipe pair its connections. One thread (creation's); owns the listener and the links
// not yet taken.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "transport/tcp/tcp_connector.h"
#include "transport/transport_options.h"
#include "transport/transport_setup.h"

namespace gyre {

class TcpLinks {
 public:
  // Listens on `host` (a numeric address), any port. With GYRE_TCP_CONGESTION the
  // listener takes it: a name the kernel refuses fails here, before the check-in, on
  // every rank that asks for it (the join tells the others), not midway through
  // connecting; and the connections it accepts inherit it.
  TcpLinks(const std::string& host, int rank, int size, const TransportOptions& options);

  std::string address() const { return address_; }  // "host:port", for the claim

  // This rank's pipe to `peer` (listening at `address`, "host:port") takes `count` links,
  // and so does its pipe from `peer`.
  void addSend(int peer, const std::string& address, int count);
  void addRecv(int peer, int count);

  // Forms every link of this communicator (`key`: authKey of the job's secret), or throws
  // naming the ranks missing at `deadline`; closes the listener unless `keepListener`
  // (GYRE_CONNECT=lazy: later pipes are dialed there, ring/lazy_connector.h). Once.
  void connect(uint64_t commId, const Key& key, Clock::time_point deadline,
               bool keepListener = false);
  // The listener, kept by connect(keepListener).
  Fd takeListener() { return std::move(listener_); }
  bool connected() const { return connected_; }

  // The links of this rank's pipes to and from `peer`, by channel (once).
  PeerLinks take(int peer);

 private:
  Fd listener_;
  std::string address_;
  TcpPipeEndpoints ep_;
  TcpConnections conns_;
  bool connected_ = false;
};

}  // namespace gyre
