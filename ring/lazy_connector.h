// LazyConnector: the pipes a communicator connects after creation, the first time an
// operation needs them (GYRE_CONNECT=lazy, the default; docs/DESIGN.md, "Connecting on
// first use").
//
// Creation connects only collectives/eager_peers.h's peers. Any other pair connects when
// an operation's schedule first asks for its pipe (collectives/primitives.h PeerPipes):
// the rank that needs it dials the peer's listening socket, the one its claim published
// (kept open for the communicator's life), over the authenticated handshake of every link
// (transport/handshake.h, the job's secret, GYRE_ENCRYPT). Both ends then run the pair
// through the same transport steps as creation (transport/transport_setup.h: the plan
// from the claims every rank keeps, prepare, an exchange of what each published over
// this control connection, the links over a listener of the pair's own, connect, a
// "connected" barrier, finish): same host -> shm, else rdma or tcp, as creation decides.
// No store is used after creation.
//
// Each communicator has one acceptor thread that answers every dial, whatever its own
// operations are doing; dialing is done by the thread that runs the operation. So a
// dialer waits only for the peer's acceptor, and an acceptor only for the dialer it is
// serving, which is running: no cycle of waits, whatever order the ranks' operations
// need their pairs in (point-to-point patterns included). Two ranks dialing each other
// at once: the lower rank's dial wins; the higher rank's is refused as crossed and it
// waits for its acceptor to finish the pair the lower one dialed.
//
// A crossed dial is repeated every 500 ms while its pair is not under way, so a peer that
// failed before its own dial arrived is still learned of: an aborted communicator answers
// every dial with its abort notice, which the dialer relays as a pipe relays one.
//
// Errors name this rank, the peer and the operation: a listener that refuses (the
// peer's process is gone), a peer that does not answer within GYRE_TIMEOUT, a failed
// handshake. abort() (the communicator's aborted flag) interrupts a pending connect at
// its next poll (100 ms).
//
// Threads: ensure() from the thread that runs operations; the acceptor thread; forEach()
// from any thread (abort). State and the pipes it owns are under one mutex; a pipe is
// handed to the operations' thread once, and outlives it (destroyed with this object).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ring/bootstrap.h"
#include "ring/options.h"
#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/transport_setup.h"

namespace gyre {

class PairControl;  // a pair's control connection (lazy_connector.cc)

class LazyConnector {
 public:
  // `set`: creation's pipes; its listener, claims and setup environment are moved here.
  // `aborted`: the communicator's flag. Starts the acceptor thread.
  LazyConnector(PipeSet& set, const Options& options, std::string listenHost,
                const std::atomic<bool>* aborted);
  ~LazyConnector();  // stops the acceptor; then the pipes go
  LazyConnector(const LazyConnector&) = delete;
  LazyConnector& operator=(const LazyConnector&) = delete;

  // Operations' thread: the pipes to `peer`, connected now if they are not yet. `what`
  // names the operation that needs them ("alltoall"), for errors.
  std::pair<SendPipe*, RecvPipe*> ensure(int peer, const std::string& what);

  // Any thread: every pipe connected after creation.
  void forEach(const std::function<void(SendPipe*)>& send,
               const std::function<void(RecvPipe*)>& recv);
  // Pairs connected after creation (tests, the INFO line).
  size_t connectedPairs() const;
  // Any thread: the communicator aborted; a dial from now on is answered with `notice`,
  // so the dialer names the failure's origin as a pipe would.
  void abort(const PeerStatus& notice);

 private:
  struct Pair;
  enum class Answer : uint8_t { kGo = 0, kCrossed = 1, kAlready = 2, kAborted = 3 };

  void acceptLoop();
  void serve(Fd fd);
  // Dials `peer`; kGo: the pair is connected and installed.
  Answer dial(int peer, const std::string& what, Clock::time_point deadline);
  // Both ends' steps once the control connection is up; returns the pair's pipes.
  std::unique_ptr<Pair> connectPair(int fd, int peer, Clock::time_point deadline);
  void install(int peer, std::unique_ptr<Pair> pair);
  // After a pair's setup failed: tells the peer our abort notice, or relays theirs
  // (throws PeerAbortError) when they sent one; else returns.
  void explainFailure(PairControl& control, bool swapped);

  const int rank_;
  const int size_;
  const Options options_;
  const std::string listenHost_;
  const std::atomic<bool>* aborted_;
  std::vector<Claim> claims_;
  SetupEnv env_;  // creation's, without its exchange
  Key key_{};
  Fd listener_;
  Fd wake_;  // eventfd: the destructor wakes the acceptor's poll instead of waiting it out

  mutable std::mutex mu_;
  std::condition_variable changed_;
  struct State {
    bool dialing = false;    // this rank's operations' thread dials it
    bool accepting = false;  // the acceptor serves the peer's dial
    bool awaiting = false;   // our dial was crossed: the peer's is coming
    Clock::time_point redialAt;  // while awaiting: dial again then (the peer may have failed)
    int waiters = 0;
    std::string error;       // the acceptor's failure, for a waiter
  };
  std::map<int, State> state_;
  std::map<int, std::unique_ptr<Pair>> pairs_;
  std::optional<PeerStatus> notice_;  // set by abort()
  std::atomic<bool> stop_{false};
  long refusals_ = 0;  // the acceptor's (its thread only)
  std::thread acceptor_;
};

}  // namespace gyre
