// RdmaPipeEnd: what both ends of an rdma pipe share (see rdma_pipe.h).
#include <arpa/inet.h>

#include <cstring>

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
                         size_t slotBytes, int worldSize, const RdmaEndLayout& layout)
    : device_(std::move(device)),
      peer_(peer),
      slots_(slots),
      slotBytes_(slotBytes),
      stride_(rdmaSlotStride(slotBytes)),
      worldSize_(worldSize),
      sendDepth_(layout.sendDepth),
      exposed_(device_, layout.exposedBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
               layout.exposedWhat),
      source_(device_, layout.sourceBytes, IBV_ACCESS_LOCAL_WRITE, layout.sourceWhat),
      qp_(device_, peer, layout.sendDepth, layout.recvDepth) {
  // After INIT (the QueuePair's constructor), as rxe requires.
  for (int i = 0; i < layout.recvDepth; ++i) qp_.postRecv(layout.recvWrId);
}

QpEndpoint RdmaPipeEnd::endpoint() const {
  QpEndpoint e = qp_.endpoint();
  e.addr = exposed_.address();
  e.rkey = exposed_.rkey();
  e.slots = static_cast<uint32_t>(slots_);
  e.slotBytes = slotBytes_;
  return e;
}

bool RdmaPipeEnd::postWrite(const void* local, size_t bytes, uint64_t remoteOffset, uint32_t imm,
                            uint64_t wrId, const char* what) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(local);
  sge.length = static_cast<uint32_t>(bytes);
  sge.lkey = source_.lkey();
  ibv_send_wr wr{};
  wr.wr_id = wrId;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_.addr + remoteOffset;
  wr.wr.rdma.rkey = remote_.rkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_.qp(), &wr, &bad)) {
    recordFailure(ErrorCode::kRemoteError,
                  fmt::format("ibv_post_send of {} peer rank {} failed: {} (the queue pair is in "
                              "the error state)",
                              what, peer_, std::strerror(rc)));
    return false;
  }
  return true;
}

void RdmaPipeEnd::connect(const std::string& remoteEndpoint, Fd control) {
  remote_ = QpEndpoint::decode(remoteEndpoint, peer_);
  if (remote_.slots != slots_ || remote_.slotBytes != slotBytes_) {
    fail(ErrorCode::kInvalidArgument,
         "peer rank {} has rdma pipes of {} slots of {} bytes, this rank {} of {} (give every "
         "rank the same GYRE_SLOTS and GYRE_SLOT_BYTES)",
         peer_, remote_.slots, remote_.slotBytes, slots_, slotBytes_);
  }
  qp_.connect(remote_);
  link_ = std::make_unique<ControlLink>(std::move(control), peer_, worldSize_);
}

void RdmaPipeEnd::recordFailure(ErrorCode code, std::string message, bool closeLink) {
  if (failed_) return;
  failed_ = true;
  failCode_ = code;
  failMessage_ = std::move(message);
  // This end is dead for good (its QP may be in the error state, where the peer would
  // learn of it only after its retries run out): say so on the control link at once.
  if (link_ && closeLink) link_->shutdownWrite();
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
  if (failed_) return;
  std::string why = qp_.failure();
  if (!why.empty()) {
    // This rank's own device failed: the peer hears it with the reason in the abort that
    // the communicator sends next (a closed link would tell it only "closed").
    recordFailure(ErrorCode::kSystemError,
                  fmt::format("the rdma pipe with peer rank {} cannot go on: {}", peer_, why),
                  false);
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

void RdmaPipeEnd::publishStatus(const PeerStatus& status) {
  if (!link_) return;
  if (status.state == PeerStatus::State::kAborted) {
    localAbort_.store(true, std::memory_order_release);
    {
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
