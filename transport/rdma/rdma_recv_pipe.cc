// RdmaRecvPipe (see rdma_pipe.h).
#include <arpa/inet.h>

#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
#include "transport/rdma/rdma_pipe.h"

namespace gyre {
namespace {

enum WrKind : uint64_t { kDataRecv = 1, kCreditWrite = 2 };

int creditDepthFor(size_t slots) { return static_cast<int>(slots + 2); }

}  // namespace

RdmaRecvPipe::RdmaRecvPipe(std::shared_ptr<RdmaDevice> device, int peer, size_t slots,
                           size_t slotBytes, int worldSize)
    : RdmaPipe(std::move(device), peer, slots, slotBytes, worldSize,
               RdmaEndLayout{
                   .exposedBytes = slots * rdmaSlotStride(slotBytes),
                   .exposedWhat = fmt::format("rdma receive slots from peer rank {}", peer),
                   .sourceBytes = 64,
                   .sourceWhat = fmt::format("rdma credit counter for peer rank {}", peer),
                   .sendDepth = creditDepthFor(slots),
                   .recvDepth = static_cast<int>(slots),  // one per slot: one per credit
                   .recvWrId = kDataRecv,
               }) {}

void RdmaRecvPipe::onCompletion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    recordFailure(ErrorCode::kRemoteError,
                  completionError(wc, wc.wr_id == kCreditWrite ? "credit write to" : "receive from"));
    return;
  }
  if (wc.wr_id == kCreditWrite) {
    --outstanding_;
    return;
  }
  if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc.wc_flags & IBV_WC_WITH_IMM)) {
    recordFailure(ErrorCode::kRemoteError,
                  fmt::format("peer rank {} sent an rdma message without an immediate", peer_));
    return;
  }
  const uint32_t seq = ntohl(wc.imm_data);
  if (seq != static_cast<uint32_t>(received_)) {
    recordFailure(ErrorCode::kRemoteError,
                  fmt::format("rdma write from peer rank {} out of order: slice {} arrived, {} "
                              "expected",
                              peer_, seq, static_cast<uint32_t>(received_)));
    return;
  }
  if (received_ - released_ >= slots_) {
    recordFailure(ErrorCode::kRemoteError,
                  fmt::format("peer rank {} wrote into a slot it had no credit for", peer_));
    return;
  }
  ++received_;
  try {
    qp_.postRecv(kDataRecv);
  } catch (const Error& e) {
    recordFailure(ErrorCode::kRemoteError, e.what());
  }
}

void RdmaRecvPipe::postCreditLocked() {
  if (failed_) return;
  if (outstanding_ >= sendDepth_) {
    creditPending_ = true;  // the counter is cumulative: the next write carries this one
    return;
  }
  creditPending_ = false;
  auto* counter = reinterpret_cast<uint64_t*>(source_.data());
  __atomic_store_n(counter, released_, __ATOMIC_RELEASE);
  if (postWrite(counter, sizeof(uint64_t), 0, static_cast<uint32_t>(released_), kCreditWrite,
                "a credit to")) {
    ++outstanding_;
  }
}

Slice RdmaRecvPipe::wait(const WaitContext& ctx) {
  if (holding_) return held_;
  waitFor(
      [&] {
        if (creditPending_) postCreditLocked();
        return received_ > released_;
      },
      ctx, "a slice");
  const size_t index = released_ % slots_;
  const std::byte* slot = exposed_.data() + index * stride_;
  RdmaSlotHeader h;
  std::memcpy(&h, slot, sizeof(h));
  if (h.bytes > slotBytes_ || h.seq != static_cast<uint32_t>(released_)) {
    fail(ErrorCode::kRemoteError,
         "bad rdma slot from peer rank {}: {} bytes (slot holds {}), sequence {} (expected {})",
         peer_, h.bytes, slotBytes_, h.seq, static_cast<uint32_t>(released_));
  }
  held_ = Slice{slot + sizeof(RdmaSlotHeader), h.bytes, h.tag};
  holding_ = true;
  return held_;
}

void RdmaRecvPipe::release() {
  if (!holding_) fail(ErrorCode::kInternal, "release() without wait() (peer rank {})", peer_);
  holding_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  ++released_;
  postCreditLocked();
}

}  // namespace gyre
