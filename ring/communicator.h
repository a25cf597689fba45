// gyre::Communicator: a group of `size` ranks that run collectives together.
//
// Made from the environment (torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or from an explicit Store, rank and size.
// Creation is collective: every rank must create it, and it returns once every
// rank's pipes are connected (to every other rank: the ring's neighbours, the trees'
// and the partners of send/recv and all-to-all). One process may hold several
// communicators, and split() makes sub-communicators that work beside their parent.
//
// Operations. Collectives are called in the same order on every rank (as with NCCL and
// Gloo); send/recv only by the two ranks involved, in the same order between them.
// Buffers are host memory and belong to the caller. Every operation has a blocking
// form and an *Async form returning a Work (ring/work.h); the blocking form is the
// async one plus wait(). Operations run one at a time in issue order: an async call
// returns at once and a worker thread runs it after those issued before it, and a
// blocking call with nothing pending runs on the caller's thread. Counts may be 0.
// In-place rules are NCCL's (see each call).
//
// Every call carries a fingerprint (sequence number, collective, dtype, op, count,
// root) that each receiving rank checks: ranks that call different things fail with
// kMismatch naming both calls, before a byte is written.
//
// Failures (ring/failure_propagation.h): a dead peer is found at once (EOF or reset on
// tcp, its process gone on shm), a stalled one after GYRE_TIMEOUT without progress (the
// rank at the end of the chain of waits is named: collectives/stall_inspector.h, which also
// logs a stall report after GYRE_STALL_WARN). The error names this rank, the rank at
// fault, the collective with its sequence number and the bytes it had moved; the
// communicator is then aborted and tells its peers, so every rank fails within
// milliseconds naming the same rank, and every later call fails at once with kAborted.
// An async operation's failure is its Work's exception().
//
// Threads: operations on one communicator are issued from one thread at a time (Works
// may be waited on anywhere). abort() may be called from any thread at any time: the
// pending operations end with kAborted, the peers learn it, and destruction does not
// wait for anyone. Destroying a communicator first finishes the operations issued on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/export.h"
#include "base/types.h"
#include "ring/options.h"
#include "ring/work.h"

namespace gyre {

class Store;
enum class CollectiveKind : uint8_t;

class GYRE_API Communicator {
 public:
  // Reads RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default
  // 29500); rank 0 serves the bootstrap store there. A rank that gyrerun --elastic
  // restarted (GYRE_ELASTIC_NEWCOMER=1) instead joins the running ranks' next grow
  // (joinGrow() on gyrerun's store): its rank is the grow's, size() the grown world's.
  static std::unique_ptr<Communicator> fromEnvironment();
  static std::unique_ptr<Communicator> fromEnvironment(const Options& options);
  // Options::fromEnvironment() for a program that adjusts the options before
  // fromEnvironment(options): a bad GYRE_* value is also published to the other ranks
  // (through the store at MASTER_ADDR:MASTER_PORT, if it is reached within 10 s) before
  // it is thrown, so that they fail naming it instead of waiting for this rank.
  static Options optionsFromEnvironment();

  // Joins the ranks that share `store`. The communicator keeps a reference to the store
  // while it exists.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size);
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              const Options& options);
  // As above, listening on the interface whose route leads to `routeHost` (the store's
  // host, say) instead of MASTER_ADDR's; GYRE_SOCKET_IFNAME still wins when set.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              const Options& options,
                                              const std::string& routeHost);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const Options& options() const;
  // The bytes of every pipe slot: GYRE_SLOT_BYTES, or the default for the pipes this
  // communicator built (transport/transport_options.h slotBytesFor); on a single rank,
  // which has no pipes, the default for pipes that are not all tcp.
  size_t slotBytes() const;
  // The all-reduce algorithm ("ring", "tree", "rd", "hier") a call of `bytes` runs with
  // (collectives/topology_choice.h, the same on every rank), for benchmarks and logs.
  const char* allReduceAlgorithm(size_t bytes) const;

  // recvbuf[i] = op over ranks of sendbuf[i], for i < count, identical bits on every
  // rank. In place when sendbuf == recvbuf.
  void allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op);
  Work allReduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                      ReduceOp op);

  // buffer on every rank becomes root's buffer (count elements). The root's buffer is
  // only read.
  void broadcast(void* buffer, size_t count, DataType dtype, int root);
  Work broadcastAsync(void* buffer, size_t count, DataType dtype, int root);

  // On root: recvbuf[i] = op over ranks of sendbuf[i]. recvbuf is not touched (and may
  // be null) on other ranks. In place when sendbuf == recvbuf on the root.
  void reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
              int root);
  Work reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                   int root);

  // recvbuf (size * count elements) gets rank r's sendbuf (count elements) at offset
  // r * count, on every rank. In place when sendbuf == recvbuf + rank * count elements.
  void allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  Work allGatherAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);

  // recvbuf (count elements) on rank r gets op over ranks of sendbuf[r * count + i]
  // (sendbuf holds size * count). In place when recvbuf == sendbuf + rank * count elements.
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                     ReduceOp op);
  Work reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          ReduceOp op);

  // Block p of sendbuf (count elements each, size blocks) goes to rank p, and block p
  // of recvbuf comes from rank p. sendbuf and recvbuf must not overlap.
  void allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  Work allToAllAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);

  // All-to-all with a size per peer (MPI_Alltoallv; what torch's all_to_all with uneven
  // splits is): sendCounts[p] elements at element offset sendDispls[p] of sendbuf go to
  // rank p, and recvCounts[p] elements from rank p land at recvDispls[p] of recvbuf.
  // Each array has size() entries; a null displacement array means the blocks are packed
  // in rank order (offsets are the running sums of the counts). The arrays are copied
  // before the call returns. recvCounts[p] must equal what rank p sends here (kMismatch
  // naming both otherwise, never a truncated block); sendCounts[rank] must equal
  // recvCounts[rank]; the receive blocks must not overlap each other, nor the bytes the
  // send blocks span overlap those the receive blocks span (kInvalidArgument).
  void allToAllv(const void* sendbuf, const size_t* sendCounts, const size_t* sendDispls,
                 void* recvbuf, const size_t* recvCounts, const size_t* recvDispls, DataType dtype);
  Work allToAllvAsync(const void* sendbuf, const size_t* sendCounts, const size_t* sendDispls,
                      void* recvbuf, const size_t* recvCounts, const size_t* recvDispls,
                      DataType dtype);

  // Point to point with `peer` (not this rank): the receiver's count and dtype must match
  // the sender's (kMismatch otherwise). A send of more than the pipe holds (GYRE_SLOTS x
  // GYRE_SLOT_BYTES) finishes only once the receiver has called recv. Operations run one
  // at a time in issue order (async ones too), so two ranks that both send a large
  // message to each other before receiving wait for each other until GYRE_TIMEOUT (an
  // error naming the peer): exchange with sendRecv, or issue send and recv in opposite
  // orders on the two ranks.
  void send(const void* buf, size_t count, DataType dtype, int peer);
  Work sendAsync(const void* buf, size_t count, DataType dtype, int peer);
  void recv(void* buf, size_t count, DataType dtype, int peer);
  Work recvAsync(void* buf, size_t count, DataType dtype, int peer);
  // Sends to sendPeer and receives from recvPeer at once (MPI_Sendrecv), slice by slice:
  // deadlock-free for any pattern in which every rank does the same (shifts, exchanges).
  // The buffers may overlap (the outgoing data is set aside first).
  void sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                size_t recvCount, int recvPeer, DataType dtype);

  // Returns once every rank has entered the barrier.
  void barrier();
  Work barrierAsync();

  // ncclCommSplit: collective over this communicator. Ranks passing the same color form
  // one new communicator, ordered by key (ties by rank here); a negative color
  // (kNoColor) joins none and gets nullptr. The result is independent of this one:
  // its own pipes and sequence, usable concurrently with it (from another thread too).
  static constexpr int kNoColor = -1;
  std::unique_ptr<Communicator> split(int color, int key);

  // Writes this rank's flight recorder (the last GYRE_TRACE_BUFFER operations: what,
  // when, how far; docs/observability.md) to `dir`, or GYRE_TRACE_DIR when empty, as
  // gyre-trace-<communicator>-rank<R>.json, and returns the path; tools/gyre_trace.py
  // reads every rank's. Any thread, any time, also while an operation hangs.
  // kInvalidArgument when the recorder is off (GYRE_TRACE_BUFFER=0) or no directory is
  // known; kSystemError when the file cannot be written.
  std::string dumpTrace(const std::string& dir = "");
  // Names the next operation this thread issues, in the flight recorder and its dumps
  // ("call"): a framework's own name for what gyre runs (gyre_torch passes torch's, such
  // as "all_gather_into_tensor" for an all-gather of bytes). At most 24 bytes are kept;
  // bytes outside printable ASCII become '?'. Applies to the next operation issued (a call
  // its checks refuse issues none); unnamed ones have none.
  void nameNextCall(std::string_view name);

  // Ends pending and later operations with kAborted and tells the other ranks: a peer's
  // pending operation fails naming this abort when it waits on a pipe from this rank (one
  // waiting only on others ends as those do), and its later ones fail at once. Any
  // thread, any time; idempotent.
  void abort();

  // ncclCommRevoke: as abort(), and the errors say so (Error::cause() is kRevoked): every
  // pending and later operation on this communicator ends at once with kAborted, on this
  // rank, without waiting for anyone. The peers are told as by abort(): a peer's pending
  // operation fails naming it when it waits on a pipe from this rank (one waiting only on
  // others ends as those do), its later ones at once. How a survivor stops a parent that
  // may be mid-operation before shrink(). Any thread, any time; idempotent.
  void revoke();

  // The rank that the first failure on this communicator named as its cause (a peer that
  // died, closed, stalled or aborted), or -1: no failure yet, or this rank's own (a
  // mismatch, abort() or revoke() here). Survivors of one failure all name the same rank
  // (failures are propagated), so it is what they pass to shrink(). Any thread.
  int failedRank() const;

  // ncclCommShrink: the ranks not in `excluded` make a new communicator among
  // themselves, numbered 0.. in the order of their ranks here. Needs nothing from the
  // excluded ranks (dead, stopped or cut off) and nothing from this communicator but its
  // store: it may have failed, be revoked or have an operation pending on another thread
  // (ShrinkMode::kAbort revokes it first, ending such operations; kDefault leaves it as
  // it is). Collective over the survivors, who call shrink the same number of times on
  // this communicator. The survivors must agree on `excluded`: the first proposal to
  // reach the store is the decision, and a rank whose set differs fails with kMismatch
  // naming both sets, so two survivors that saw different sets never both go on
  // (Communicator::Impl::shrink has the argument). A survivor that is gone before the
  // new communicator exists fails it on every rank, naming it (exclude it too).
  // kInvalidArgument for a rank outside [0, size()), or this rank in `excluded`. The
  // bootstrap store must outlive the excluded ranks: a store served by an excluded
  // rank's process (rank 0 under a plain launch) is gone with it (gyrerun and torchrun
  // serve it from the launcher).
  enum class ShrinkMode { kDefault, kAbort };
  std::unique_ptr<Communicator> shrink(const std::vector<int>& excluded,
                                       ShrinkMode mode = ShrinkMode::kDefault);

  // ncclCommGrow: this communicator's ranks and newSize - size() newcomers (processes
  // calling joinGrow() on the same store) make a communicator of newSize ranks; the
  // existing ranks keep their numbers, the newcomers get size()..newSize-1 in the order
  // they arrive. Collective over this communicator (which stays usable and is not
  // touched: its store only); bounded by GYRE_JOIN_TIMEOUT like creation. One grow at a
  // time per store: the newcomers meet the ranks under the store's "gyre/grow/" keys.
  std::unique_ptr<Communicator> grow(int newSize);
  // A newcomer's side of grow(): waits (up to GYRE_JOIN_TIMEOUT) for a grow on `store`
  // with room for it and joins it; a grow that fills up with others before it arrives is
  // not its own (it waits for the next). kTimeout when none takes it in time.
  static std::unique_ptr<Communicator> joinGrow(std::shared_ptr<Store> store,
                                                const Options& options,
                                                const std::string& routeHost);
  // Collective (one small all-reduce): how many processes wait in joinGrow() for this
  // store's next grow, the same number on every rank (the smallest any rank saw). An
  // elastic loop calls it between steps and grows by that many when it is not 0.
  int waitingNewcomers();

  // Private to the library: not exported from libgyre.so (base/export.h).
  class GYRE_HIDDEN Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  // Every collective but the barrier: checked against its row of
  // collectives/collective_table.h, then run in issue order (ring/communicator_calls.cc).
  Work issue(bool async, CollectiveKind kind, const void* sendbuf, void* recvbuf, size_t count,
             DataType dtype, ReduceOp op = ReduceOp::kSum, int root = -1);
  Work sendIssue(bool async, const void* buf, size_t count, DataType dtype, int peer);
  Work recvIssue(bool async, void* buf, size_t count, DataType dtype, int peer);
  Work barrierIssue(bool async);
  Work allToAllvIssue(bool async, const void* sendbuf, const size_t* sendCounts,
                      const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                      const size_t* recvDispls, DataType dtype);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre
