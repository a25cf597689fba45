// RdmaPipeEnd: what both ends of an rdma pipe share (see rdma_pipe.h).
#include <fmt/format.h>

#include "base/error.h"
#include "transport/rdma/rdma_pipe.h"

namespace gyre {

size_t rdmaSlotStride(size_t slotBytes) {
  return (sizeof(RdmaSlotHeader) + slotBytes + 63) / 64 * 64;
}

void throwRdmaWaitFailure(const WaitContext& ctx, int peer, const char* what) {
  if (ctx.aborted && ctx.aborted->load()) {
    fail(ErrorCode::kAborted, "aborted while waiting for {} (peer rank {}, rdma)", what, peer);
  }
  fail(ErrorCode::kTimeout, "timed out waiting for {} from peer rank {} (rdma)", what, peer);
}

RdmaPipeEnd::RdmaPipeEnd(std::shared_ptr<RdmaDevice> device, int peer, size_t slots,
                         size_t slotBytes, int worldSize, int sendDepth, int recvDepth)
    : device_(device),
      peer_(peer),
      slots_(slots),
      slotBytes_(slotBytes),
      stride_(rdmaSlotStride(slotBytes)),
      worldSize_(worldSize),
      qp_(std::move(device), peer, sendDepth, recvDepth) {}

void RdmaPipeEnd::connect(const std::string& remoteEndpoint, Fd control) {
  remote_ = QpEndpoint::decode(remoteEndpoint, peer_);
  if (remote_.slots != slots_ || remote_.slotBytes != slotBytes_) {
    fail(ErrorCode::kInvalidArgument,
         "peer rank {} has rdma pipes of {} slots of {} bytes, this rank {} of {} (give every "
         "rank the same GYRE_SLOTS and GYRE_SLOT_BYTES)",
         peer_, remote_.slots, remote_.slotBytes, slots_, slotBytes_);
  }
  checkRemote(remote_);
  qp_.connect(remote_);
  link_ = std::make_unique<ControlLink>(std::move(control), peer_, worldSize_);
}

void RdmaPipeEnd::recordFailure(ErrorCode code, std::string message) {
  if (failed_) return;
  failed_ = true;
  failCode_ = code;
  failMessage_ = std::move(message);
  // This end is dead for good (its QP may be in the error state, where the peer would
  // learn of it only after its retries run out): say so on the control link at once.
  if (link_) link_->shutdownWrite();
}

std::string RdmaPipeEnd::completionError(const ibv_wc& wc, const char* what) const {
  return fmt::format(
      "rdma {} with peer rank {} failed: completion status '{}' (vendor error {:#x}) on {}; the "
      "queue pair is in the error state (the peer exited, the link or device went away, or "
      "retries ran out)",
      what, peer_, ibv_wc_status_str(wc.status), wc.vendor_err, device_->description());
}

void RdmaPipeEnd::progressLocked() {
  ibv_wc wc[16];
  for (;;) {
    int n = qp_.poll(wc, 16);
    for (int i = 0; i < n; ++i) onCompletion(wc[i]);
    if (n < 16) break;
  }
}

void RdmaPipeEnd::progress() {
  std::lock_guard<std::mutex> lock(mu_);
  progressLocked();
  if (failed_) return;
  try {
    link_->poll();
  } catch (const Error& e) {
    recordFailure(e.code(), e.what());
    return;
  }
  if (link_->aborted() || link_->closed()) {
    progressLocked();  // what the peer sent before its abort or exit is delivered first
    if (link_->aborted()) {
      failStatus_ = *link_->aborted();
      recordFailure(ErrorCode::kRemoteError, describePeerAbort(peer_, *failStatus_));
    } else {
      recordFailure(ErrorCode::kRemoteError,
                    fmt::format("peer rank {} {} the rdma pipe's control connection (it exited "
                                "or failed)",
                                peer_, link_->reset() ? "reset" : "closed"));
    }
  }
}

void RdmaPipeEnd::throwIfFailed() {
  if (localAbort_.load(std::memory_order_acquire)) {
    fail(ErrorCode::kAborted, "this rank aborted: the rdma pipe with peer rank {} is closed", peer_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!failed_) return;
  if (failStatus_) throw PeerAbortError(failMessage_, *failStatus_);
  throw Error(failCode_, failMessage_);
}

void RdmaPipeEnd::publishStatus(const PeerStatus& status, bool drainFirst) {
  if (!link_) return;
  if (status.state == PeerStatus::State::kAborted) {
    localAbort_.store(true, std::memory_order_release);
    if (drainFirst) {
      const auto until = Clock::now() + kAbortSendBudget;
      std::unique_lock<std::mutex> lock(mu_);
      while (!failed_ && !drained() && Clock::now() < until) {
        progressLocked();
        lock.unlock();
        sched_yield();
        lock.lock();
      }
    }
    link_->send(status);
    link_->shutdownWrite();
    return;
  }
  link_->send(status);
}

}  // namespace gyre
