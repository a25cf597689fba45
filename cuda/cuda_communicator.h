// gyre::CudaCommunicator: collectives on device (GPU) buffers, enqueued on a CUDA stream
// as NCCL's are: the call returns at once, the stream waits for the result.
//
// What it is: a host Communicator that it owns alone, and one of two paths, chosen at
// creation, the same on every rank (docs/gpu.md, "How the path is chosen"):
// - On the device, through CUDA IPC, when every rank is on one host (and GYRE_CUDA_IPC is
//   not 0, and stream memory operations work): cuda/ipc_peers.h maps the ranks' staging
//   regions into each other, and cuda/ipc_collectives.h enqueues each collective on
//   `stream` itself (copies, the reduction kernels, and flag writes and waits between the
//   processes' streams). The call only enqueues; no host thread waits for the device
//   (all-to-allv first shares the ranks' counts over the host communicator). Every
//   collective.
// - Staged through the host otherwise: a worker thread of its own, a few pinned host
//   slots and a copy stream. allReduce(..., stream) records an event on `stream`, makes
//   `stream` wait for a release (on the GPU: cuStreamWaitValue32 on a device flag; where
//   stream memory operations are missing, a host function that blocks until the worker
//   releases it), hands the call to the worker and returns. The worker, after the event,
//   copies the input device to host slice by slice into the pinned slots, runs the host
//   ring all-reduce on each slice as soon as it has landed, copies each result back while
//   the next slice is reduced, and at the end writes the flag from its copy stream, so
//   `stream` goes on with the result in place. The reduction runs on the CPU and every
//   byte crosses the host link twice, the least any reduction on the host can move.
//   The other collectives take the same way, in rounds of one pinned slot pipelined
//   through the slots, each round run by the host Communicator's collective.
// A one-rank communicator runs its collectives as copies (or avg's scaling) on `stream`.
//
// Contract:
// - Creation is collective: every rank creates it, in the same order as its other
//   communicators. It uses the device current in the creating thread, or
//   CudaOptions::device. Several ranks (processes) may share one GPU.
// - Collectives are called in the same order on every rank, from one thread at a time;
//   on the device path they also run in call order whatever their streams. `stream`
//   must belong to the communicator's device (nullptr: the legacy default stream).
//   Buffers are device memory of that device (or managed, or pinned host memory);
//   sendbuf must not change, and recvbuf must not be read, until `stream` has passed the
//   call. In place when sendbuf == recvbuf (all-reduce; the others say theirs).
//   Point-to-point calls pair as Communicator's (docs/gpu.md, "Point to point").
// - Results: identical bits on every rank. Staged: the host allReduce's bits for each
//   slice. On the device: each element reduced in rank order by one rank. Floating-point
//   sums may therefore differ from a host allReduce of the whole buffer in the last bits
//   (NCCL's results depend on its chunking too); exactly representable results are
//   always equal.
// - Errors: a wrong argument throws gyre::Error(kInvalidArgument) from the call, naming
//   the rank and the collective. A failure after the call returned (a peer lost, an
//   abort on any rank of the device path, a timeout, a CUDA error) aborts the
//   communicator, still releases every waiting stream (whose recvbuf then holds
//   unspecified data), and the next call or synchronize() throws it, naming the rank and
//   the collective. On the device path a peer that lives but never makes the call is
//   waited for, until abort().
// - synchronize() blocks the calling thread until every collective enqueued so far is
//   done (the caller's streams may still hold work before or after them: synchronise
//   those to read results); it throws the first asynchronous error.
// - Destruction finishes the queued collectives, then waits until the device is idle
//   (a stream may still be about to read the flag it frees). On the device path it is
//   collective: the ranks meet over the host communicator before freeing the memory the
//   others map (bounded by the host communicator's timeout when a peer is gone).
// - Threads: the collectives and synchronize from one thread at a time; abort() from any.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/types.h"
#include "ring/options.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*: callers pass theirs as it is

namespace gyre {

class Communicator;
class Store;

struct CudaOptions {
  int device = -1;                      // -1: the creating thread's current device
  size_t sliceBytes = size_t{4} << 20;  // the largest slice staged at once
  // Slices are at least this large (a smaller message is one slice): each slice is one
  // host all-reduce and pays its latency.
  size_t minSliceBytes = size_t{1} << 20;
  size_t stagingSlots = 4;   // pinned slots of sliceBytes: reduce one, copy the others
  bool streamMemOps = true;  // false: always the host-function release (for tests)
  size_t maxPending = 64;    // enqueued collectives the worker has not started; beyond
                             // that, allReduce waits for the worker (as NCCL's FIFO)
  // The collectives on the device through CUDA IPC when every rank is on one host (and
  // GYRE_CUDA_IPC is not 0): each rank's staging region holds three slots of ipcSlotBytes
  // (rounded up to 4 KiB; two for the rounds, one for point to point); larger buffers go
  // through them round by round (docs/gpu.md).
  bool ipc = true;
  size_t ipcSlotBytes = size_t{4} << 20;
};

class CudaCommunicator {
 public:
  // Takes over `host`, which nobody else may use from now on.
  static std::unique_ptr<CudaCommunicator> create(std::unique_ptr<Communicator> host,
                                                  const CudaOptions& cuda = {});
  // Joins the ranks that share `store` with a new host Communicator of its own.
  static std::unique_ptr<CudaCommunicator> create(std::shared_ptr<Store> store, int rank,
                                                  int size, const Options& options,
                                                  const CudaOptions& cuda = {});
  // For programs that already hold a host communicator (from the environment, or
  // gyre::spawn): runs one allReduce on `bootstrap` to share a fresh store that rank 0
  // serves at MASTER_ADDR (default 127.0.0.1), and joins through it with bootstrap's
  // options. Collective on `bootstrap`; bootstrap stays the caller's.
  static std::unique_ptr<CudaCommunicator> createBeside(Communicator& bootstrap,
                                                        const CudaOptions& cuda = {});

  ~CudaCommunicator();
  CudaCommunicator(const CudaCommunicator&) = delete;
  CudaCommunicator& operator=(const CudaCommunicator&) = delete;

  int rank() const;
  int size() const;
  int device() const;
  // True when streams wait on the GPU (cuStreamWaitValue32), false with the fallback.
  bool usesStreamMemOps() const;
  // True when the collectives run on the device between the ranks through CUDA IPC;
  // false when they are staged through host memory (the reason is in the log).
  bool usesDeviceIpc() const;

  // recvbuf[i] = op over ranks of sendbuf[i], for i < count, when `stream` reaches this
  // point. Enqueues only. count may be 0 (nothing is enqueued).
  void allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                 CUstream_st* stream);

  // The other collectives, as Communicator's on host buffers, enqueued on `stream` in the
  // same call order as allReduce, on either path (docs/gpu.md). With one rank they are
  // copies on `stream`.
  // recvbuf (size * count elements) gets rank r's sendbuf at offset r * count; in place
  // when sendbuf == recvbuf + rank * count elements.
  void allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                 CUstream_st* stream);
  // recvbuf (count) = op over ranks of sendbuf[rank * count + i] (sendbuf holds size *
  // count); in place when recvbuf == sendbuf + rank * count elements.
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                     ReduceOp op, CUstream_st* stream);
  // buffer (count elements) on every rank becomes root's.
  void broadcast(void* buffer, size_t count, DataType dtype, int root, CUstream_st* stream);
  // Block p of sendbuf (count elements, size blocks) goes to rank p; block p of recvbuf
  // comes from rank p. sendbuf and recvbuf must not overlap.
  void allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                CUstream_st* stream);
  // As Communicator::allToAllv (counts and displacements in elements, size() entries each,
  // null displacements: packed in rank order; copied before the call returns). On the
  // device path the call first shares every rank's counts over the host communicator: it
  // returns once every rank has called it (never waiting for the device), and a count
  // that differs from its peer's throws gyre::Error(kMismatch) on every rank, naming both.
  void allToAllv(const void* sendbuf, const size_t* sendCounts, const size_t* sendDispls,
                 void* recvbuf, const size_t* recvCounts, const size_t* recvDispls, DataType dtype,
                 CUstream_st* stream);
  // Point to point with `peer` (not this rank). The receiver's count and dtype must match
  // the sender's: on the device path this is not checked (a larger recv count leaves the
  // rest of buf unwritten, and the two ranks' later point-to-point calls pair wrongly).
  // On the device path a send of up to one slot (ipcSlotBytes) lets `stream` go on
  // before the receiver takes it; a larger one holds `stream` until the receiver's stream
  // has taken all but the last slot (staged: Communicator::send's rule, in pieces of
  // sliceBytes / 2). Two ranks that send large messages to each other before receiving
  // wait for each other (until abort() on the device path); use sendRecv.
  void send(const void* buf, size_t count, DataType dtype, int peer, CUstream_st* stream);
  void recv(void* buf, size_t count, DataType dtype, int peer, CUstream_st* stream);
  // Sends to sendPeer and receives from recvPeer at once, slot by slot: deadlock-free for
  // any pattern every rank follows (rings, pairwise exchanges). In place when sendbuf ==
  // recvbuf; other overlaps throw.
  void sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                size_t recvCount, int recvPeer, DataType dtype, CUstream_st* stream);
  // `stream` goes past the barrier once every rank's stream has reached it.
  void barrier(CUstream_st* stream);

  void synchronize();

  // Fails the pending and later collectives with kAborted (their streams are still
  // released). Any thread, any time; idempotent.
  void abort();

  class Impl;

 private:
  explicit CudaCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre
