// gyre::Communicator: a group of `size` ranks that run collectives together.
//
// Made from the environment (torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or from an explicit Store, rank and size.
// Creation is collective: every rank must create it, and it returns once every
// rank's pipes are connected. One process may hold several communicators.
//
// Collectives are called in the same order on every rank (as with NCCL and Gloo).
// Each call blocks until this rank's part is complete; buffers are host memory and
// belong to the caller. Every call carries a fingerprint (sequence number, collective,
// dtype, op, count, root) that each receiving rank checks: ranks that call different
// things fail with kMismatch naming both calls, before a byte is written.
//
// Failures (ring/failure_propagation.h): a dead peer is found at once (EOF or reset on
// tcp, its process gone on shm), a stalled one after GYRE_TIMEOUT without progress (the
// rank at the end of the chain of waits is named: ring/stall_inspector.h, which also
// logs a stall report after GYRE_STALL_WARN). The error names this rank, the rank at
// fault, the collective with its sequence number and the bytes it had moved; the
// communicator is then aborted and tells its neighbours, so every rank fails within
// milliseconds naming the same rank, and every later call fails at once with kAborted.
//
// Threads: collectives on one communicator must not be called concurrently from
// several threads. abort() may be called from any thread at any time: the pending call
// ends with kAborted, the peers learn it, and destruction does not wait for anyone.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

#include "base/options.h"
#include "base/types.h"

namespace gyre {

class Store;

class Communicator {
 public:
  // Reads RANK, WORLD_SIZE, MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default
  // 29500); rank 0 serves the bootstrap store there.
  static std::unique_ptr<Communicator> fromEnvironment();
  static std::unique_ptr<Communicator> fromEnvironment(const Options& options);

  // Joins the ranks that share `store`. `store` must outlive nothing: the communicator
  // keeps a reference while it exists.
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size);
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              const Options& options);

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const Options& options() const;

  // recvbuf[i] = op over ranks of sendbuf[i], for i < count, identical bits on every
  // rank. In place when sendbuf == recvbuf. count may be 0.
  void allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op);

  // buffer on every rank becomes root's buffer (count elements). The root's buffer is
  // only read.
  void broadcast(void* buffer, size_t count, DataType dtype, int root);

  // Returns once every rank has entered the barrier.
  void barrier();

  // Ends pending and later operations with kAborted and tells the other ranks (their
  // pending and later calls fail naming this abort). Any thread, any time; idempotent.
  void abort();

  class Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre
