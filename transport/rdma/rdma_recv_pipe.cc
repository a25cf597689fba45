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
    : RdmaPipeEnd(device, peer, slots, slotBytes, worldSize, creditDepthFor(slots),
                  static_cast<int>(slots)),
      sendDepth_(creditDepthFor(slots)),
      slotMemory_(device, slots * rdmaSlotStride(slotBytes),
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                  fmt::format("rdma receive slots from peer rank {}", peer)),
      creditSource_(device, 64, IBV_ACCESS_LOCAL_WRITE,
                    fmt::format("rdma credit counter for peer rank {}", peer)) {
  // After INIT (the QueuePair's constructor), as rxe requires: one per slot.
  for (size_t i = 0; i < slots; ++i) qp_.postRecv(kDataRecv);
}

QpEndpoint RdmaRecvPipe::endpoint() const {
  QpEndpoint e = qp_.endpoint();
  e.addr = slotMemory_.address();
  e.rkey = slotMemory_.rkey();
  e.slots = static_cast<uint32_t>(slots_);
  e.slotBytes = slotBytes_;
  return e;
}

void RdmaRecvPipe::checkRemote(const QpEndpoint&) {}

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
  __atomic_store_n(reinterpret_cast<uint64_t*>(creditSource_.data()), released_, __ATOMIC_RELEASE);
  ibv_sge sge{};
  sge.addr = creditSource_.address();
  sge.length = sizeof(uint64_t);
  sge.lkey = creditSource_.lkey();
  ibv_send_wr wr{};
  wr.wr_id = kCreditWrite;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(static_cast<uint32_t>(released_));
  wr.wr.rdma.remote_addr = remote_.addr;
  wr.wr.rdma.rkey = remote_.rkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_.qp(), &wr, &bad)) {
    recordFailure(ErrorCode::kRemoteError,
                  fmt::format("ibv_post_send of a credit to peer rank {} failed: {} (the queue "
                              "pair is in the error state)",
                              peer_, std::strerror(rc)));
    return;
  }
  ++outstanding_;
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
  const std::byte* slot = slotMemory_.data() + index * stride_;
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

void RdmaRecvPipe::publish(const PeerStatus& status) { publishStatus(status, false); }

}  // namespace gyre
