// RdmaSendPipe (see rdma_pipe.h).
#include <cstring>

#include <fmt/format.h>

#include "base/error.h"
#include "transport/rdma/rdma_pipe.h"

namespace gyre {
namespace {

enum WrKind : uint64_t { kDataWrite = 1, kCreditRecv = 2 };

// Data writes are bounded by credits (K); the margin covers acks that trail the credit.
int sendDepthFor(size_t slots) { return static_cast<int>(2 * slots + 2); }

}  // namespace

RdmaSendPipe::RdmaSendPipe(std::shared_ptr<RdmaDevice> device, int peer, size_t slots,
                           size_t slotBytes, int worldSize)
    : RdmaPipe(std::move(device), peer, slots, slotBytes, worldSize,
               RdmaEndLayout{
                   .exposedBytes = 64,
                   .exposedWhat = fmt::format("rdma credit word for peer rank {}", peer),
                   .sourceBytes = slots * rdmaSlotStride(slotBytes),
                   .sourceWhat = fmt::format("rdma send slots to peer rank {}", peer),
                   .sendDepth = sendDepthFor(slots),
                   // One receive per credit write the receiver may have in flight.
                   .recvDepth = sendDepthFor(slots),
                   .recvWrId = kCreditRecv,
               }) {}

uint64_t RdmaSendPipe::credits() const {
  // Written by the NIC on the receiver's behalf; an aligned 8-byte word.
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(exposed_.data()), __ATOMIC_ACQUIRE);
}

void RdmaSendPipe::onCompletion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    recordFailure(ErrorCode::kRemoteError,
                  completionError(wc, wc.wr_id == kDataWrite ? "write to" : "credit from"));
    return;
  }
  if (wc.wr_id == kDataWrite) {
    --outstanding_;
  } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    try {
      qp_.postRecv(kCreditRecv);
    } catch (const Error& e) {
      recordFailure(ErrorCode::kRemoteError, e.what());
    }
  }
}

std::byte* RdmaSendPipe::acquire(const WaitContext& ctx) {
  throwIfFailed();
  if (acquired_) return slot(posted_) + sizeof(RdmaSlotHeader);
  waitFor(
      [&] {
        const uint64_t consumed = credits();
        if (consumed > posted_) {
          recordFailure(ErrorCode::kRemoteError,
                        fmt::format("peer rank {} returned credit for {} slices, only {} were "
                                    "sent (corrupt rdma credit)",
                                    peer_, consumed, posted_));
          return false;
        }
        return !failed_ && posted_ - consumed < slots_ && outstanding_ < sendDepth_;
      },
      ctx, "a free slot (credit)");
  acquired_ = true;
  return slot(posted_) + sizeof(RdmaSlotHeader);
}

void RdmaSendPipe::post(size_t bytes, const Tag& tag) {
  if (!acquired_) fail(ErrorCode::kInternal, "post() without acquire() (peer rank {})", peer_);
  if (bytes > slotBytes_) {
    fail(ErrorCode::kInternal, "post of {} bytes into a {}-byte slot (peer rank {})", bytes,
         slotBytes_, peer_);
  }
  acquired_ = false;
  RdmaSlotHeader h;
  h.tag = tag;
  h.bytes = static_cast<uint32_t>(bytes);
  h.seq = static_cast<uint32_t>(posted_);
  std::memcpy(slot(posted_), &h, sizeof(h));
  std::lock_guard<std::mutex> lock(mu_);
  if (!postWrite(slot(posted_), sizeof(h) + bytes, (posted_ % slots_) * stride_,
                 static_cast<uint32_t>(posted_), kDataWrite, "a slice to")) {
    throw Error(failCode_, failMessage_);
  }
  ++outstanding_;
  ++posted_;
}

void RdmaSendPipe::flush(const WaitContext& ctx) {
  // Every write completed means every slice is in the peer's memory (acked): done, even if
  // the peer has exited since, as it may once it has all it needs.
  waitFor([&] { return outstanding_ == 0; }, ctx, "write completions");
}

}  // namespace gyre
