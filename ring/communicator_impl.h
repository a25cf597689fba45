// Communicator::Impl: a communicator's state (internal to ring/communicator*.cc; users
// include ring/communicator.h). The bodies are in ring/communicator_impl.cc (running,
// failing, aborting, splitting) and ring/communicator_calls.cc (argument checks and the
// public operations); creation from the environment or a store is ring/communicator.cc.
//
// Contract: one Impl per Communicator. It owns the pipes (from ring/bootstrap: to the
// default schedules' peers, collectives/eager_peers.h, and to the others once an
// operation first needs them, ring/lazy_connector.h; GYRE_CONNECT=eager: to every rank), the operation queue (ring/op_queue: issue order, inline when idle),
// the sequence numbers (collectives: one per communicator; send/recv: one per ordered pair),
// the stall inspector, the flight recorder (collectives/flight_recorder.h: every operation
// is recorded when issued, started and finished; dumped on a failure, a stall report,
// SIGUSR1 or dumpTrace()) and the abort state. run()/runSend()/runRecv()/runSendRecv() execute
// one operation on the calling thread (the queue's), through the schedule of its row in
// collectives/collective_table.h; failures are named, the communicator is aborted and its
// peers told (failCollective). abort() may come from any other thread: what both touch is
// atomic or under abortMu_. The public entry points validate arguments on the issuing
// thread (checkCall), then hand a closure to issue().
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "collectives/collective.h"
#include "collectives/collective_table.h"
#include "collectives/flight_recorder.h"
#include "collectives/host_topology.h"
#include "collectives/primitives.h"
#include "collectives/stall_inspector.h"
#include "collectives/topology_choice.h"
#include "ring/bootstrap.h"
#include "ring/communicator.h"
#include "ring/failure_propagation.h"
#include "ring/join.h"
#include "ring/lazy_connector.h"
#include "ring/op_queue.h"
#include "store/store.h"

namespace gyre {
namespace communicator_detail {

std::string randomToken();

}  // namespace communicator_detail

class Communicator::Impl {
 public:
  // prefix: the store keys of this communicator ("" = the next top-level one). Connects
  // the eager peers (every other rank with GYRE_CONNECT=eager; collective: returns once
  // all are connected).
  // `goneKeys`: store keys, by rank of the new communicator, that exist once that rank's
  // process is gone (a shrink's survivors: their parent's drop keys); creation fails
  // naming it instead of waiting for it.
  Impl(std::shared_ptr<Store> store, int rank, int size, const Options& options,
       const std::string& listenHost, const std::string& prefix = "",
       const std::map<int, std::string>& goneKeys = {});
  // Finishes what was issued, then lets the last slices reach the peers.
  ~Impl();

  // Executing thread (the queue's). A collective; numbered on the communicator's sequence.
  // `record`: its flight recorder entry (issue() made it).
  // `blocks`: alltoallv's layout (null for every other kind).
  void run(CollectiveCall call, const void* sendbuf, void* recvbuf, uint64_t record,
           const PeerBlocks* blocks = nullptr);
  // The all-reduce algorithm a call of `bytes` runs with (the same on every rank).
  AllReduceAlgo chooseAlgorithm(size_t bytes) const;
  size_t slotBytes() const { return pipes_.slotBytes; }  // Communicator::slotBytes
  // Point to point: numbered per ordered pair of ranks, not on the communicator's sequence.
  void runSend(CollectiveCall call, int peer, const void* buf, uint64_t record);
  void runRecv(CollectiveCall call, int peer, void* buf, uint64_t record);
  void runSendRecv(CollectiveCall send, int sendPeer, const void* sendbuf, CollectiveCall recv,
                   int recvPeer, void* recvbuf, uint64_t record);

  // Runs op now (blocking: inline when nothing is pending) or queues it (async).
  template <typename F>
  Work issue(bool async, F&& op) {
    if (async) return queue_->submit(OpQueue::Op(std::forward<F>(op)));
    queue_->run(std::forward<F>(op));
    return Work();
  }
  // The same for an operation the flight recorder records: op(record) gets its entry.
  // (`peer`: send/recv's peer, else -1.)
  // The entry carries the name nameNextCall() gave, which this consumes.
  template <typename F>
  Work issueRecorded(bool async, const CollectiveCall& call, int peer, F&& op) {
    const uint64_t record =
        recorder_->issued(call, peer, std::string_view(nextName_.data(), nextNameSize_));
    nextNameSize_ = 0;
    return issue(async, [record, op = std::forward<F>(op)]() mutable { op(record); });
  }
  // Issuing thread: the caller's name for the next recorded operation (printable ASCII
  // kept, the rest '?'; cut to FlightRecorder::kNameBytes).
  void nameNextCall(std::string_view name);

  // Any thread: writes the flight recorder to `dir` (GYRE_TRACE_DIR when empty) and
  // returns the file's path; kInvalidArgument when the recorder is off or no directory
  // is known.
  std::string dumpTrace(const std::string& dir);

  // Issuing thread: kInvalidArgument naming this rank and `row`'s collective for
  // arguments its buffer shape does not allow (nothing is sent). A reduce's recvbuf is
  // only checked on the root.
  void checkCall(const CollectiveRow& row, const void* sendbuf, const void* recvbuf,
                 size_t count, DataType dtype, ReduceOp op, int root) const;
  // The checks every operation shares: dtype, op, null buffers, count.
  void validate(const char* what, const void* sendbuf, const void* recvbuf, size_t count,
                DataType dtype, ReduceOp op) const;
  void checkPeer(const char* what, int peer) const;
  // alltoallv's arrays (one entry per rank; null displacements: packed) as PeerBlocks,
  // after the checks Communicator::allToAllv names; kInvalidArgument otherwise.
  PeerBlocks checkBlocks(const void* sendbuf, const size_t* sendCounts, const size_t* sendDispls,
                         const void* recvbuf, const size_t* recvCounts, const size_t* recvDispls,
                         DataType dtype) const;

  // The new communicator of this rank's color, or null for a negative color (collective
  // over this one; ring/communicator_impl.cc says how the ranks agree).
  std::unique_ptr<Impl> split(int color, int key);

  // Any thread: ends pending and later operations with kAborted and tells the peers;
  // `revoke`: the errors say the communicator was revoked (ErrorCause::kRevoked).
  void abortFromUser(bool revoke);
  int failedRank() const { return failedRank_.load(); }

  // The survivors' communicator (collective over the ranks not in `excluded`; ring/
  // communicator_impl.cc says how they agree). `abortFirst`: revoke this one first.
  std::unique_ptr<Impl> shrink(const std::vector<int>& excluded, bool abortFirst);
  // grow(): the existing ranks' side and the newcomers' (ring/communicator_impl.cc says
  // how they meet).
  std::unique_ptr<Impl> grow(int newSize);
  static std::unique_ptr<Impl> joinGrow(std::shared_ptr<Store> store, const Options& options,
                                        const std::string& listenHost);
  // How many newcomers this rank sees waiting in joinGrow() for the next grow (not
  // collective: Communicator::waitingNewcomers agrees on it).
  int64_t newcomersSeen();

  Options options_;
  const int rank_;
  const int size_;

 private:
  // Creation after the pipes are connected, up to the join's last barrier.
  void finishCreation(Join& join);
  void tellPeersCreationFailed(const Error& e);  // on the pipes made so far
  template <typename Body>
  void execute(const CollectiveCall& call, uint64_t record, Body&& body);
  void runSingle(const CollectiveCall& call, const void* sendbuf, void* recvbuf,
                 const PeerBlocks* blocks);
  [[noreturn]] void failAborted(CollectiveCall call, uint32_t seq);
  // The cause an operation's failure carries: kRevoked once revoke() was called.
  ErrorCause abortCause() const {
    return revoked_.load() ? ErrorCause::kRevoked : ErrorCause::kUnspecified;
  }
  // Names the failure, aborts (telling the neighbours) and throws the named error.
  [[noreturn]] void failCollective(const CollectiveCall& call, const Error& e);
  // Aborts: every later call fails, and every neighbour learns why (its pending waits
  // fail at once, naming the culprit). Idempotent; any thread.
  void abortAll(const PeerStatus& notice, const std::string& message);

  void checkRoot(const char* what, int root) const;
  void checkDistinctOrSame(const char* what, const void* sendbuf, const void* recvbuf,
                           size_t count, DataType dtype) const;
  void checkPerRankCount(const char* what, size_t count, DataType dtype) const;
  void checkShares(const char* what, const void* whole, const void* share, size_t count,
                   DataType dtype) const;

  std::shared_ptr<Store> store_;
  std::string listenHost_;
  std::string prefix_;   // this communicator's store keys
  int splits_ = 0;       // split() calls so far (the same on every rank)
  int shrinks_ = 0;      // shrink() calls so far (the same on every survivor)
  int grows_ = 0;        // grow() calls so far (the same on every rank)
  PipeSet pipes_;
  std::unique_ptr<LazyConnector> lazy_;  // GYRE_CONNECT=lazy: pairs connected on first use
  // The operation a connection on first use is for, for its errors (executing thread).
  CollectiveCall connectFor_;
  bool connectForProbe_ = false;  // creation's link probe
  PrimitiveContext ctx_;  // every schedule's base: ring neighbours' pipes, timeouts, abort flag
  PeerPipes peerPipes_;
  HostTopology topology_;  // from pipes_.hostIds: the same on every rank
  TwoLevelCost cost_;      // the two-level model's constants (probed at creation)
  std::unique_ptr<FlightRecorder> recorder_;  // made once the prefix (its name) is known
  std::array<char, FlightRecorder::kNameBytes> nextName_{};  // issuing thread only
  size_t nextNameSize_ = 0;
  std::atomic<bool> dumpedFailure_{false};    // the first failure's dump is written
  StallInspector inspector_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> revoked_{false};   // revoke() was called: errors say so
  std::atomic<int> failedRank_{-1};    // the first failure's culprit (another rank)
  std::atomic<uint32_t> seq_{0};  // written by the collective thread, read by abort()
  std::mutex abortMu_;            // serializes aborts; guards the three below
  std::string firstError_;
  std::string localAbortReason_;
  bool pipesClosed_ = false;
  std::map<int, uint32_t> sendSeq_;  // point to point, per peer (executing thread only)
  std::map<int, uint32_t> recvSeq_;
  // Last: destroyed (drained) first, while everything its operations use exists.
  std::unique_ptr<OpQueue> queue_ = std::make_unique<OpQueue>();
};

}  // namespace gyre
