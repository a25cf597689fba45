// RDMA pipes: the pipe of slots (transport/pipe.h) over one RC queue pair per directed pipe.
//
// Memory: the receiver's K slots are registered memory the sender may write into; each
// slot is a 32-byte SlotHeader (Tag, byte count, sequence number) followed by B payload
// bytes. The sender has K registered staging slots of the same shape: acquire() hands
// out the next one, post() fills in its header and posts one RDMA WRITE WITH IMMEDIATE
// of header + payload into the receiver's slot of the same index (imm = the slice's
// sequence number, so a lost or reordered write is caught). The receiver pre-posts K
// zero-length receives; each write's immediate consumes one and raises a completion,
// which is what wakes a sleeping receiver. One copy per hop, as with tcp: into staging
// (or the fused reduce writing there); the NIC then reads it. (Writing the user's
// buffer directly would need a registration per call, and there is no registration
// cache, so postDirect/waitInto are the copying defaults of pipe.cc.)
//
// Credits: release() writes the receiver's consumed counter (8 bytes) into the
// sender's registered credit word with RDMA WRITE WITH IMMEDIATE. The counter is
// cumulative, so credit writes may coalesce or be skipped when the send queue is full
// (the next one carries the later count; a pending one goes out at the next wait());
// the immediate (not a plain write) gives the sender a completion, so a sender out of
// credits sleeps on its completion channel instead of polling memory.
//
// Status, abort and liveness go over a TCP connection beside the QP (ControlLink),
// opened by the bootstrap like a tcp pipe's: a QP tells nobody when the process at the
// other end dies until a write to it times out, and a receiver that only waits writes
// nothing, whereas the socket reports EOF or a reset at once. Ordering of "slices first,
// then the abort" holds because publish(kAborted) waits (at most kAbortSendBudget) for
// the completions of the writes posted before (an RC completion means the peer acked,
// and a responder generates its receive completion before the ack), and a receiver
// that sees the abort or EOF reaps its CQ once more before it fails.
//
// Waiting: polls the CQ (and the socket) for ctx.spin, yielding the core between polls,
// then arms the CQ and sleeps in poll(2) on the completion channel, the socket and the
// device's async event fd, at most 10 ms a slice, calling ctx.observer each slice.
// Errors name the peer rank: a completion with an error status (the QP went to the error
// state: peer gone, retries exhausted, device removed), a fatal async event (this port
// down, the device failed, the QP or CQ broke: kSystemError), the peer's abort
// (PeerAbortError), EOF on the socket, a malformed slot or immediate, kTimeout and
// kAborted; the caller adds the collective.
//
// Threads: as pipe.h. publish() may come from any thread; the CQ is polled under mu_.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "transport/pipe.h"
#include "transport/rdma/control_link.h"
#include "transport/rdma/queue_pair.h"
#include "transport/spin_pause.h"
#include "transport/rdma/verbs_device.h"

namespace gyre {

struct RdmaSlotHeader {
  Tag tag;
  uint32_t bytes = 0;
  uint32_t seq = 0;  // low 32 bits of the slice's number
};
static_assert(sizeof(RdmaSlotHeader) == 32);

// Distance between two slots: header + B, rounded to a cache line.
size_t rdmaSlotStride(size_t slotBytes);

// How one end is laid out. The two ends mirror each other: each exposes registered
// memory the peer writes into (the receiver its slots, the sender its credit word), has
// registered memory its own writes read from (the sender its staging slots, the
// receiver its credit counter), and pre-posts one receive per write with immediate the
// peer may have in flight.
struct RdmaEndLayout {
  size_t exposedBytes = 0;
  std::string exposedWhat;  // names it in registration errors
  size_t sourceBytes = 0;
  std::string sourceWhat;
  int sendDepth = 0;        // this end's writes in flight at most
  int recvDepth = 0;        // receives pre-posted (and kept posted)
  uint64_t recvWrId = 0;    // their wr_id
};

// What both ends share: the memory, the QP, the control link, failure state, the wait loop.
class RdmaPipeEnd {
 public:
  virtual ~RdmaPipeEnd() = default;

  // This end's endpoint for the peer (QP, exposed memory), published through the store.
  QpEndpoint endpoint() const;
  // Brings the QP to RTS with the peer's endpoint and takes the control connection.
  void connect(const std::string& remoteEndpoint, Fd control);
  // Tests: forces the QP into the error state.
  void forceError() { qp_.forceError(); }

 protected:
  RdmaPipeEnd(std::shared_ptr<RdmaDevice> device, int peer, size_t slots, size_t slotBytes,
              int worldSize, const RdmaEndLayout& layout);

  // One completion, under mu_.
  virtual void onCompletion(const ibv_wc& wc) = 0;
  // Reaps completions and reads the control link; records failures (does not throw).
  void progress();
  void progressLocked();
  // Records the first failure; `closeLink` also shuts the control link's write side, so
  // the peer learns at once that this end is gone.
  void recordFailure(ErrorCode code, std::string message, bool closeLink = true);
  // Throws the recorded failure, if any.
  void throwIfFailed();
  // Waits until ready() (called under mu_) holds.
  template <typename Ready>
  void waitFor(Ready ready, const WaitContext& ctx, const char* what);
  // An abort first waits (bounded) until drained(): the slices posted before it arrive first.
  void publishStatus(const PeerStatus& status);
  virtual bool drained() const { return true; }  // under mu_: nothing posted is in flight
  std::string completionError(const ibv_wc& wc, const char* what) const;
  // Posts one write with immediate of [local, local + bytes) from source_ to the peer's
  // exposed memory at `remoteOffset`; records the failure and returns false if it fails.
  bool postWrite(const void* local, size_t bytes, uint64_t remoteOffset, uint32_t imm,
                 uint64_t wrId, const char* what);

  std::shared_ptr<RdmaDevice> device_;
  const int peer_;
  const size_t slots_;
  const size_t slotBytes_;
  const size_t stride_;
  const int worldSize_;
  const int sendDepth_;
  MemoryRegion exposed_;  // the peer writes here
  MemoryRegion source_;   // this end's writes read from here
  QueuePair qp_;
  std::unique_ptr<ControlLink> link_;
  QpEndpoint remote_{};
  std::mutex mu_;
  bool failed_ = false;  // under mu_
  ErrorCode failCode_ = ErrorCode::kRemoteError;
  std::string failMessage_;
  std::optional<PeerStatus> failStatus_;
  std::atomic<bool> localAbort_{false};
};

// The SendPipe or RecvPipe getters and publish(), alike for both ends.
template <typename Interface>
class RdmaPipe : public Interface, public RdmaPipeEnd {
 public:
  void publish(const PeerStatus& status) override { publishStatus(status); }
  size_t slotBytes() const override { return slotBytes_; }
  int peer() const override { return peer_; }

 protected:
  using RdmaPipeEnd::RdmaPipeEnd;
};

class RdmaSendPipe final : public RdmaPipe<SendPipe> {
 public:
  RdmaSendPipe(std::shared_ptr<RdmaDevice> device, int peer, size_t slots, size_t slotBytes,
               int worldSize = 0);

  std::byte* acquire(const WaitContext& ctx) override;
  void post(size_t bytes, const Tag& tag) override;
  void flush(const WaitContext& ctx) override;

 private:
  void onCompletion(const ibv_wc& wc) override;
  bool drained() const override { return outstanding_ == 0; }
  uint64_t credits() const;  // what the receiver wrote into the exposed credit word
  std::byte* slot(uint64_t n) const { return source_.data() + (n % slots_) * stride_; }

  uint64_t posted_ = 0;
  int outstanding_ = 0;  // data writes not completed yet; under mu_
  bool acquired_ = false;
};

class RdmaRecvPipe final : public RdmaPipe<RecvPipe> {
 public:
  RdmaRecvPipe(std::shared_ptr<RdmaDevice> device, int peer, size_t slots, size_t slotBytes,
               int worldSize = 0);

  Slice wait(const WaitContext& ctx) override;
  void release() override;

 private:
  void onCompletion(const ibv_wc& wc) override;
  void postCreditLocked();  // requires mu_

  uint64_t received_ = 0;      // under mu_
  uint64_t released_ = 0;
  int outstanding_ = 0;        // credit writes not completed; under mu_
  bool creditPending_ = false;  // under mu_: a credit still to write
  bool holding_ = false;
  Slice held_;
};

}  // namespace gyre

// ---- the wait loop both ends share (spin, then sleep on the completion channel) ----------
namespace gyre {

[[noreturn]] void throwRdmaWaitFailure(const WaitContext& ctx, int peer, const char* what);

template <typename Ready>
void RdmaPipeEnd::waitFor(Ready ready, const WaitContext& ctx, const char* what) {
  const auto since = Clock::now();
  const auto spinUntil = since + ctx.spin;
  for (;;) {
    progress();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ready()) return;
    }
    throwIfFailed();
    if (Clock::now() < spinUntil && spinPause(spinUntil)) continue;
    if (expired(ctx)) throwRdmaWaitFailure(ctx, peer_, what);
    if (ctx.observer) {
      const auto& w = link_->waiting();
      ctx.observer->waiting(peer_, what, since, w ? &*w : nullptr);
    }
    qp_.sleep(link_->fd(), ctx.deadline);
  }
}

}  // namespace gyre
