// TcpStore: the Store that rank 0 serves at MASTER_ADDR:MASTER_PORT and every rank
// reaches over TCP (torch's TCPStore, speaking store/store_protocol.h).
//
// - connect(): a client. The connection is retried until the timeout, so ranks may
//   start before rank 0 listens.
// - serve()/serveOn(): binds (or takes a listening socket), runs the server on one
//   thread of this process and returns a client of it. The returned object owns the
//   server: destroying it stops the thread and closes every connection at once, so
//   that other ranks' pending calls fail promptly instead of waiting out their timeout.
//   The server holds a get or wait until its key is set, so waiting costs no polling.
// - Every call is bounded by timeout(). A call that times out drops its connection
//   (the reply may still come) and the next call reconnects; when the store itself
//   closed the connection, this and every later call fails with kRemoteError.
// - addOnClose() registers on the current connection; a reconnection (after a timeout)
//   fires what was registered, as the server saw the old connection close.
// - serve() on a port that is taken says whether a gyre store answers there (another
//   gyre job) or another program holds it.
// - `secret` (the job's, Options::token): when set, the server serves only clients that
//   prove they hold it, and a client talks only to a server that proves the same
//   (store/store_auth.h); a client that lacks it, holds another, or meets a store in the
//   other mode fails at connect() with an error that says which (never the secret).
//   `rank` is the rank the client claims (-1: not a rank); the server records it when it
//   refuses the client. An open store (no secret) logs once per process, at INFO, that
//   anyone who reaches its port can use it.
// Thread-safe: calls from several threads are serialized on the one connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/crypto.h"
#include "base/export.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "transport/socket.h"

namespace gyre {

class TcpStoreServer;  // store/tcp_store_server.h

class GYRE_API TcpStore : public Store {
 public:
  // A failure throws "could not reach the bootstrap store at HOST:PORT in S s: REASON";
  // `reason`, when given, receives REASON alone (for a caller that frames it itself).
  static std::shared_ptr<TcpStore> connect(const std::string& host, uint16_t port,
                                           std::chrono::milliseconds timeout,
                                           const std::string& secret = {}, int rank = -1,
                                           std::string* reason = nullptr);
  // port 0 picks a free port (see port()).
  static std::shared_ptr<TcpStore> serve(const std::string& host, uint16_t port,
                                         std::chrono::milliseconds timeout,
                                         const std::string& secret = {});
  // `listening` is a socket on which listen() was called (e.g. by gyre::spawn before
  // fork); the server takes it over.
  static std::shared_ptr<TcpStore> serveOn(Fd listening, std::chrono::milliseconds timeout,
                                           const std::string& secret = {});

  ~TcpStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys) override;
  bool check(const std::vector<std::string>& keys) override;
  bool addOnClose(const std::string& key, int64_t delta) override;

  // The store's port (the bound one for a serving store).
  uint16_t port() const { return address_.port(); }
  // "host:port" as it appears in error messages.
  const std::string& address() const { return name_; }
  bool serving() const { return server_ != nullptr; }

 private:
  TcpStore(SocketAddress address, std::string name, std::chrono::milliseconds timeout,
           std::unique_ptr<TcpStoreServer> server, const std::string& secret, int rank);
  // The authentication exchange on a fresh connection (after the hellos).
  void authenticate(int fd, Clock::time_point deadline);

  // Sends `request` and returns the reply, which must be of type `expected`.
  // `what` describes the call for error messages ("get('rank3/addr')").
  StoreReply exchange(const StoreRequest& request, StoreReplyType expected,
                      const std::string& what);
  void connectLocked(Clock::time_point deadline, std::string* reason = nullptr);

  const SocketAddress address_;  // where the client connects
  const std::string name_;
  std::unique_ptr<TcpStoreServer> server_;  // only in the store that serves
  const bool secret_;                       // a secret was given
  const Key key_;                           // authKey(secret)
  const int rank_;                          // claimed in every authentication

  std::mutex mu_;     // one request/reply exchange at a time; guards fd_ and lost_
  Fd fd_;             // empty until connected, and after a timeout until the next call
  std::string lost_;  // why the store closed the connection; non-empty = unusable
};

}  // namespace gyre
