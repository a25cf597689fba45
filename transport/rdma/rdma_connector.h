// RdmaConnector: how the bootstrap makes rdma pipes, compiled whether or not libibverbs is
// (without it, open() always says why not: rdma_connector_none.cc).
//
// Use (ring/bootstrap.cc): open() once per communicator; for each rdma peer addSend() /
// addRecv() (memory registered, QP in INIT) and publish the returned endpoint text
// through the store; once the control TCP connections exist, connectSend() /
// connectRecv() with the peer's endpoint text bring the QPs to RTS and hand out the pipes.
// Ownership: the pipes share the device with the connector; the connector may be
// destroyed once every pipe is handed out. Threads: one thread (the bootstrap).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/transport_options.h"

namespace gyre {

class RdmaConnector {
 public:
  // nullptr, with *whyNot, when this build or this host has no usable RDMA port.
  static std::unique_ptr<RdmaConnector> open(const TransportOptions& options, std::string* whyNot);
  ~RdmaConnector();

  // "rxe0 port 1 GID 1 (RoCE)".
  std::string description() const;
  std::string addSend(int peer, size_t slots, size_t slotBytes, int worldSize);
  std::string addRecv(int peer, size_t slots, size_t slotBytes, int worldSize);
  std::unique_ptr<SendPipe> connectSend(int peer, const std::string& remote, Fd control);
  std::unique_ptr<RecvPipe> connectRecv(int peer, const std::string& remote, Fd control);

  struct Impl;

 private:
  explicit RdmaConnector(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre
