// Bootstrap: how the ranks of a new communicator find each other and connect pipes.
//
// Every rank listens on one socket for its links (transport/tcp/tcp_links.h), checks in
// through the join (ring/join.h) with its address, host identity, pid, the settings that
// must agree and what each transport offers, learns its peers', plans a transport per
// peer from the claims alone (ring/transport_plan.h), and runs every registered transport
// (transport/transport_setup.h, transport/transports.cc) through the same steps: prepare
// and publish, a "segments" barrier, connect (first the transports whose pipes take no
// links, then the links form, then the others), a "connected" barrier, finish. The pipes are the ones the algorithms
// need (for the ring: a send pipe to rank+1 and a receive pipe from rank-1). Collective
// like communicator creation: every rank must call it with the same arguments. Every
// wait is the join's: bounded by GYRE_JOIN_TIMEOUT, reporting progress, ending at once on
// every rank when one fails or dies.
//
// It ends at the "connected" barrier: the caller (Communicator::Impl) ends creation with
// the join's "done" barrier once it has finished with the store (the link probe).
//
// Ownership: the returned PipeSet owns its pipes and the transports' setup objects,
// which hold what pipes share (the tcp progress thread); pipes are destroyed first.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ring/join.h"
#include "ring/options.h"
#include "transport/pipe.h"
#include "transport/transport_setup.h"

namespace gyre {

class Store;

class Join;

// Bumped when what ranks exchange at creation changes: ranks of different builds fail
// the join naming it, instead of misreading each other.
inline constexpr int kJoinProtocolVersion = 3;

struct BootstrapParams {
  int rank = 0;
  int size = 1;
  uint64_t commId = 0;  // set by connectPeers from the job's tag, the prefix and rank 0
  std::string token;    // the job's secret (Options::token), or empty: none
  std::string listenHost;  // numeric address to listen on
  std::vector<int> sendTo;
  std::vector<int> recvFrom;
  // When set, the peers (send and receive alike) chosen once every rank's host is known
  // (by rank; GYRE_CONNECT=lazy: collectives/eager_peers.h), replacing sendTo/recvFrom.
  std::function<std::vector<int>(const std::vector<std::string>& hostIds)> choosePeers;
  // Keep the listener, the claims and the setup environment in the PipeSet, for pipes
  // connected after creation (ring/lazy_connector.h).
  bool keepListener = false;
};

struct PipeSet {
  // Declared first: destroyed after the pipes, which may use what they hold.
  std::vector<std::unique_ptr<TransportSetup>> transports;
  std::map<int, std::unique_ptr<SendPipe>> send;
  std::map<int, std::unique_ptr<RecvPipe>> recv;
  std::vector<std::string> hostIds;  // by rank
  int localRanks = 1;                // ranks sharing this rank's host, itself included
  bool allShm = false;               // every pipe is shared memory (the cost model's input)
  size_t slotBytes = 0;              // every pipe's slot (slotBytesFor, transport_options.h)
  // With BootstrapParams::keepListener: what later pipes are made from.
  std::vector<Claim> claims;         // by rank
  SetupEnv env;                      // creation's, its exchange cleared
  Fd listener;                       // the address in this rank's claim
};

// `store` is the communicator's (prefixed) store; `join` has its prefix.
PipeSet connectPeers(Store& store, Join& join, BootstrapParams params, const Options& options);

uint64_t fnv1a64(const std::string& s);

}  // namespace gyre
