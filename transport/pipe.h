// The pipe of slots: the one abstraction every transport offers to the algorithms.
//
// A pipe is one-directional, from this rank to one neighbour (SendPipe) or from one
// neighbour to this rank (RecvPipe). It holds K slots of B bytes (a bounded FIFO with
// credits, as NCCL's steps): the sender acquires a free slot, fills up to B bytes and
// posts it with the Tag of the collective it belongs to; the receiver waits for the
// oldest posted slot, reads it, and releases it, which returns the credit. A sender
// never overruns a receiver, and memory is K*B per pipe whatever the message size.
//
// Threads: one SendPipe and one RecvPipe are each used by one thread at a time (the
// communicator's executing thread); transports may run their own progress threads
// behind them. At most one slot is acquired-but-not-posted and at most one slice is
// waited-but-not-released at any time.
//
// Errors: every wait is bounded by WaitContext (deadline, abort flag) and throws
// gyre::Error (kTimeout, kAborted, kRemoteError naming the peer rank). The caller adds
// the collective's name and sequence number.
//
// Status, out of band of the slots: each end can publish a PeerStatus to the other end
// (this rank waits and for whom, resumed, or aborted and why). Transports carry it and
// hand the latest one to the WaitObserver of a sleeping wait; only the communicator
// interprets it (ring/failure_propagation.h, collectives/stall_inspector.h). publish(kAborted)
// also closes the end: the other end fails at once with PeerAbortError naming the cause,
// after it has received whatever was sent before.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "base/error.h"

namespace gyre {

// What a slice belongs to. It travels with every slice, so a receiver checks that its
// neighbour is running the same collective (mismatch detection, always on). 24 bytes,
// fixed layout (it is on the wire).
struct Tag {
  uint64_t count = 0;   // elements in the collective
  uint32_t seq = 0;     // collective sequence number on the communicator
  int32_t root = -1;    // root rank, -1 for rootless collectives
  uint8_t coll = 0;     // collective kind (collectives/collective.h)
  uint8_t dtype = 0;    // gyre::DataType
  uint8_t op = 0;       // gyre::ReduceOp
  uint8_t algo = 0;     // the all-reduce algorithm (collectives/algorithm_choice.h), 0: none
  uint32_t pad = 0;

  bool operator==(const Tag&) const = default;
};
static_assert(sizeof(Tag) == 24, "Tag is part of the wire format");

// What one end of a pipe tells the other about its rank (see the file comment).
struct PeerStatus {
  enum class State : uint8_t { kWaiting = 1, kResumed = 2, kAborted = 3 };
  State state = State::kWaiting;
  ErrorCode code = ErrorCode::kRemoteError;  // kAborted: the code of the failure
  int writer = -1;     // the rank that published it
  int suspect = -1;    // kWaiting: where its chain of waits ends; kAborted: the rank at fault
  int reporter = -1;   // kAborted: the rank that detected the failure
  uint32_t seq = 0;    // the writer's collective sequence number
  uint8_t hops = 0;    // kWaiting: waits in the chain from the writer to the suspect
  std::string reason;  // kAborted: what the reporter saw (at most kMaxReasonBytes)

  static constexpr size_t kMaxReasonBytes = 224;
};

// Thrown by a pipe whose other end published kAborted, once nothing it sent before that
// is left to deliver. Carries the status so the communicator can name the origin.
class PeerAbortError : public Error {
 public:
  PeerAbortError(const std::string& message, PeerStatus status)
      : Error(ErrorCode::kRemoteError, message), status_(std::move(status)) {}
  const PeerStatus& status() const { return status_; }

 private:
  PeerStatus status_;
};

// "peer rank P aborted: rank R reported <reason>": how a pipe names a peer's abort.
std::string describePeerAbort(int peer, const PeerStatus& status);

// Told about every wait that sleeps: called on the waiting thread about every 10 ms
// while the wait sleeps (never while it spins) and never with a pipe lock held. `since`
// is when the wait began; `status` the latest the other end published (nullptr: none,
// or it resumed since). May publish on any pipe, this one included, and may throw.
class WaitObserver {
 public:
  virtual void waiting(int peer, const char* what, std::chrono::steady_clock::time_point since,
                       const PeerStatus* status) = 0;

 protected:
  ~WaitObserver() = default;
};

struct WaitContext {
  std::chrono::steady_clock::time_point deadline;
  const std::atomic<bool>* aborted = nullptr;  // set by Communicator::abort()
  std::chrono::microseconds spin{50};          // spin this long before sleeping
  WaitObserver* observer = nullptr;            // stall reports and blame (optional)
};

struct Slice {
  const std::byte* data = nullptr;
  size_t bytes = 0;
  Tag tag;
};

class SendPipe {
 public:
  virtual ~SendPipe() = default;
  // A free slot of slotBytes() bytes; waits for a credit, bounded by ctx.
  virtual std::byte* acquire(const WaitContext& ctx) = 0;
  // Publishes the slot from the last acquire() holding `bytes` bytes (<= slotBytes()).
  virtual void post(size_t bytes, const Tag& tag) = 0;
  // Waits until every posted slot has left this rank (sent or consumed), bounded by ctx.
  virtual void flush(const WaitContext& ctx) = 0;
  virtual size_t slotBytes() const = 0;
  virtual int peer() const = 0;

  // NCCL's "direct" send: `bytes` (<= slotBytes()) go straight from `src`, without a
  // copy into a slot, where the transport can (tcp: writev from the user's buffer).
  // It takes one credit like a slot. The caller keeps src unchanged until the slice
  // has left this rank: until flush(), or until the schedule proves the peer has it.
  virtual void postDirect(const void* src, size_t bytes, const Tag& tag, const WaitContext& ctx);

  // Whether a schedule that produces a slice anyway (a reduction, a received copy)
  // should write it straight into acquire()'s slot in the same pass, rather than
  // producing it elsewhere and postDirect()-ing it: true where a slot is where the
  // bytes must land and postDirect would only copy them there (shm, one pass saved);
  // false where postDirect sends from the caller's memory without a copy (tcp).
  virtual bool fillSlotsInPlace() const { return false; }

  // Tells the receiving end this rank's status (best effort; never waits on the peer for
  // long). kAborted also closes this end for good: later calls throw kAborted, and the
  // receiver fails with PeerAbortError after the slices posted before. Any thread, also
  // concurrently with the pipe's user thread.
  virtual void publish(const PeerStatus& status) = 0;
};

class RecvPipe {
 public:
  virtual ~RecvPipe() = default;
  // The oldest posted slice; waits for one, bounded by ctx. Valid until release().
  virtual Slice wait(const WaitContext& ctx) = 0;
  // Returns the slice from the last wait() to the sender (its credit).
  virtual void release() = 0;
  virtual size_t slotBytes() const = 0;
  virtual int peer() const = 0;

  // NCCL's "direct" receive: waits for the next slice and, when it carries `expect`
  // and exactly `bytes` bytes, places it in `dst` (tcp reads it straight from the
  // socket) and consumes it; the returned Slice then has data == dst. Otherwise
  // nothing is written or consumed and the Slice describes what did arrive (its data
  // points into the slot), so the caller can report the mismatch.
  virtual Slice waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx);

  // Whether wait()'s slice may be read in place by a schedule that copies it on to
  // several destinations in one pass (shm: the slot already is in this rank's memory),
  // rather than waitInto() it first; false where waitInto avoids a copy (tcp reads the
  // socket straight into dst).
  virtual bool readSlotsInPlace() const { return false; }

  // Tells the sending end this rank's status, as SendPipe::publish (a sender waiting for
  // credits fails with PeerAbortError once this end published kAborted).
  virtual void publish(const PeerStatus& status) = 0;
};

}  // namespace gyre
