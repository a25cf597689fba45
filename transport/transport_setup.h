// TransportSetup: how one transport (shm, rdma, tcp) takes part in a communicator's
// creation, as NCCL's ncclTransport (canConnect/setup/connect). ring/bootstrap.cc runs
// every registered transport (transport/transports.cc, in preference order) through the
// same steps and never branches on which one it is:
//
//   offer()      before check-in: what this rank offers in its claim (room for shm
//                segments, an RDMA device); it may open what the offer needs
//   canConnect() pure: whether this transport carries the pipes between two ranks, from
//                their claims alone, so both ends of a pipe decide alike
//                (ring/transport_plan.h runs it)
//   prepare()    after the plan, before the "segments" barrier: makes what the peers
//                will open and publishes where it is (the store, through SetupExchange)
//   connect()    after the barrier: this rank's pipes to one peer, over the links
//                (authenticated TCP connections, transport/tcp/tcp_links.h) the
//                transport asked for with linksPerPipe()
//   finish()     after every rank connected: what no pipe needs any more goes
//   abandon()    creation failed: leave nothing behind (names in /dev/shm)
//
// The object lives as long as its communicator's pipes (ring/bootstrap.h PipeSet holds
// it), so it may own what they share (the tcp progress thread). One thread (creation's).
//
// Layering: transport/ is below store/ and ring/, so the store and the join reach a
// transport only through SetupExchange, which ring/bootstrap.cc implements.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transport/handshake.h"
#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/transport_options.h"

namespace gyre {

// What a transport says about a rank at check-in: `what` it offers ("rxe0 port 1 GID 1
// (RoCE)", "room"), empty when nothing, and then `whyNot` (for messages).
struct TransportOffer {
  std::string what;
  std::string whyNot;
  bool offered() const { return !what.empty(); }
};

// A rank's check-in as the transports read it (ring/join.h Claim, translated by
// ring/transport_plan.h peerClaimOf()).
struct PeerClaim {
  int rank = -1;
  long pid = 0;
  std::string hostId;   // equal ids share memory
  std::string where;    // "host h (10.0.0.2), pid 12" (for messages)
  std::map<std::string, TransportOffer> offers;  // by transport name

  const TransportOffer& offer(const std::string& transport) const;
};

// A transport's answer for one pair of ranks. kPass: not this transport's kind of pair,
// ask the next one; kNo: the pair falls back to the last transport (tcp) for `reason`;
// kYes: this transport carries it. Throws kInvalidArgument where GYRE_TRANSPORT forces
// this transport on a pair it cannot carry.
struct PeerFit {
  enum Verdict { kPass, kNo, kYes };
  Verdict verdict = kPass;
  std::string reason;  // "same host", "peer rank 3 has no RDMA device"
};

// The store and the join, as a transport's setup may use them (ring/bootstrap.cc).
class SetupExchange {
 public:
  virtual ~SetupExchange() = default;
  // Sets `key` in the communicator's key space, for the peers to read after the barrier.
  virtual void publish(const std::string& key, const std::string& value) = 0;
  // A key a peer published before the barrier.
  virtual std::string read(const std::string& key) = 0;
  // Throws the failure another rank published (or names a rank that died); returns when
  // there is none. For waits on a peer outside the join's own.
  virtual void checkAlarms() = 0;
};

// What every transport's setup knows of its communicator; the fields below the line are
// set once the claims are in.
struct SetupEnv {
  int rank = 0;
  int size = 1;
  const TransportOptions* options = nullptr;
  Clock::time_point deadline;   // creation's (GYRE_JOIN_TIMEOUT)
  size_t receivePipes = 0;      // pipes this rank receives on, whatever their transport
  // ---
  uint64_t commId = 0;
  std::string tag;              // the job's name tag: names carry it (shm segments)
  size_t slotBytes = 0;         // every pipe's slot (transport_options.h slotBytesFor)
  std::vector<PeerClaim> claims;  // by rank
  SetupExchange* exchange = nullptr;
};

// The links of one pipe pair, as transport/tcp/tcp_links.h hands them out: by channel,
// with each connection's record keys under GYRE_ENCRYPT (else empty).
struct PeerLinks {
  std::vector<Fd> out;  // to the peer (this rank's send pipe)
  std::vector<Fd> in;   // from the peer (this rank's receive pipe)
  std::vector<ConnectionKeys> outKeys;
  std::vector<ConnectionKeys> inKeys;
};

// This rank's pipes to one peer; either may be null (no pipe that way).
struct PipePair {
  std::unique_ptr<SendPipe> send;
  std::unique_ptr<RecvPipe> recv;
};

class TransportSetup {
 public:
  virtual ~TransportSetup() = default;

  // "shm", "tcp", "rdma": as GYRE_TRANSPORT names it and as the INFO lines print it.
  virtual const char* name() const = 0;

  virtual TransportOffer offer(const SetupEnv& env) = 0;

  // `forced`: GYRE_TRANSPORT names this transport. Whether (not why) must depend only
  // on both ranks' host identity and offers: the plan groups ranks by them.
  virtual PeerFit canConnect(const PeerClaim& mine, const PeerClaim& peer, bool forced) const = 0;

  // Authenticated TCP connections each pipe of this transport takes (0: none).
  virtual int linksPerPipe(const TransportOptions& options) const = 0;

  // `sendTo`, `recvFrom`: the peers whose pipes this transport carries, ascending.
  virtual void prepare(SetupEnv& env, const std::vector<int>& sendTo,
                       const std::vector<int>& recvFrom) = 0;

  // Called once per peer of prepare(), after the barrier (and after the links formed,
  // for a transport that takes links); `links` holds linksPerPipe() connections a way.
  virtual PipePair connect(SetupEnv& env, int peer, PeerLinks links) = 0;

  virtual void finish() {}
  virtual void abandon() noexcept {}

  // What the "pipes: ..." INFO line adds after this transport's count (tcp: its
  // connections and congestion control); empty for most.
  virtual std::string detail(const TransportOptions&) const { return {}; }
};

// The transports in preference order (transport/transports.cc): for each pair the first
// whose canConnect() says yes carries it; the last connects any pair (the fallback).
std::vector<std::unique_ptr<TransportSetup>> registeredTransports();

}  // namespace gyre
