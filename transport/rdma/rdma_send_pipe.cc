// RdmaSendPipe (see rdma_pipe.h).
#include <arpa/inet.h>

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
    : RdmaPipeEnd(device, peer, slots, slotBytes, worldSize, sendDepthFor(slots),
                  sendDepthFor(slots)),
      sendDepth_(sendDepthFor(slots)),
      staging_(device, slots * rdmaSlotStride(slotBytes), IBV_ACCESS_LOCAL_WRITE,
               fmt::format("rdma send slots to peer rank {}", peer)),
      creditWord_(device, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                  fmt::format("rdma credit word for peer rank {}", peer)) {
  // One receive per credit write the receiver may have in flight (each takes one).
  for (int i = 0; i < sendDepth_; ++i) qp_.postRecv(kCreditRecv);
}

QpEndpoint RdmaSendPipe::endpoint() const {
  QpEndpoint e = qp_.endpoint();
  e.addr = creditWord_.address();
  e.rkey = creditWord_.rkey();
  e.slots = static_cast<uint32_t>(slots_);
  e.slotBytes = slotBytes_;
  return e;
}

void RdmaSendPipe::checkRemote(const QpEndpoint&) {}

uint64_t RdmaSendPipe::credits() const {
  // Written by the NIC on the receiver's behalf; an aligned 8-byte word.
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(creditWord_.data()), __ATOMIC_ACQUIRE);
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
  if (acquired_) return staging_.data() + (posted_ % slots_) * stride_ + sizeof(RdmaSlotHeader);
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
  return staging_.data() + (posted_ % slots_) * stride_ + sizeof(RdmaSlotHeader);
}

void RdmaSendPipe::post(size_t bytes, const Tag& tag) {
  if (!acquired_) fail(ErrorCode::kInternal, "post() without acquire() (peer rank {})", peer_);
  if (bytes > slotBytes_) {
    fail(ErrorCode::kInternal, "post of {} bytes into a {}-byte slot (peer rank {})", bytes,
         slotBytes_, peer_);
  }
  acquired_ = false;
  const size_t index = posted_ % slots_;
  std::byte* slot = staging_.data() + index * stride_;
  RdmaSlotHeader h;
  h.tag = tag;
  h.bytes = static_cast<uint32_t>(bytes);
  h.seq = static_cast<uint32_t>(posted_);
  std::memcpy(slot, &h, sizeof(h));

  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(slot);
  sge.length = static_cast<uint32_t>(sizeof(h) + bytes);
  sge.lkey = staging_.lkey();
  ibv_send_wr wr{};
  wr.wr_id = kDataWrite;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(static_cast<uint32_t>(posted_));
  wr.wr.rdma.remote_addr = remote_.addr + index * stride_;
  wr.wr.rdma.rkey = remote_.rkey;
  ibv_send_wr* bad = nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (int rc = ibv_post_send(qp_.qp(), &wr, &bad)) {
    recordFailure(ErrorCode::kRemoteError,
                  fmt::format("ibv_post_send to peer rank {} failed: {} (the queue pair is in "
                              "the error state)",
                              peer_, std::strerror(rc)));
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

void RdmaSendPipe::publish(const PeerStatus& status) { publishStatus(status, true); }

}  // namespace gyre
