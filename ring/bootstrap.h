// Bootstrap: how the ranks of a new communicator find each other and connect pipes.
//
// Every rank listens on one socket, publishes "addr/<rank>", its host identity and
// pid through the store, reads its peers', and connects the pipes the algorithms need
// (for the ring: a send pipe to rank+1 and a receive pipe from rank-1). Collective
// like communicator creation: every rank must call it with the same arguments.
//
// Ownership: the returned PipeSet owns its pipes and the tcp progress thread; pipes
// are destroyed before the thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/options.h"
#include "transport/pipe.h"
#include "transport/tcp/tcp_progress.h"

namespace gyre {

class Store;

struct BootstrapParams {
  int rank = 0;
  int size = 1;
  uint64_t commId = 0;
  std::string token;
  std::string listenHost;  // numeric address to listen on
  std::vector<int> sendTo;
  std::vector<int> recvFrom;
};

struct PipeSet {
  std::unique_ptr<TcpProgress> progress;  // declared first: destroyed after the pipes
  std::map<int, std::unique_ptr<SendPipe>> send;
  std::map<int, std::unique_ptr<RecvPipe>> recv;
  std::vector<std::string> hostIds;  // by rank
  int localRanks = 1;                // ranks sharing this rank's host, itself included
  bool allShm = false;               // every pipe is shared memory (the cost model's input)
};

PipeSet connectPeers(Store& store, const BootstrapParams& params, const Options& options);

}  // namespace gyre
