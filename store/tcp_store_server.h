// TcpStoreServer: the bootstrap store's server, owned by the TcpStore that serves.
//
// One thread polls the listening socket, every client and a stop eventfd; sockets are
// non-blocking with an input and an output buffer per client, and a get or wait whose
// keys are missing is held until a set or add of the key answers it. A client that
// breaks the protocol (store/store_protocol.h) is closed with a warning; the others are
// not affected. With a secret, a client is served only after it proved it holds it
// (store/store_auth.h); one that fails is closed and logged (rate-limited), and the rank
// it claimed is counted under "gyre/store/refused/<rank>", a key only the store writes. The constructor starts the thread; the destructor stops it and closes
// every connection at once, so clients fail promptly rather than at their timeouts.
#pragma once

#include <memory>
#include <string>

#include "transport/socket.h"

namespace gyre {

class TcpStoreServer {
 public:
  // `listening` must be a listening socket (kInvalidArgument otherwise).
  // `secret` empty: an open store (anyone who reaches the port is served).
  TcpStoreServer(Fd listening, const std::string& secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  const std::string& name() const;  // "host:port" of the listener, for messages

 private:
  class Loop;  // the thread and its state (store/tcp_store_server.cc)
  std::unique_ptr<Loop> loop_;
};

}  // namespace gyre
