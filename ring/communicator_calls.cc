#include "ring/communicator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "base/error.h"
#include "collectives/schedule_math.h"
#include "ring/communicator_impl.h"

// The public operations of a Communicator: each validates its arguments on the issuing
// thread (kInvalidArgument, nothing sent; a collective by the buffer shape of its row in
// collectives/collective_table.h), builds the CollectiveCall and hands its run to the
// operation queue, blocking (the form without Async) or not.
namespace gyre {

namespace {

CollectiveCall makeCall(CollectiveKind kind, size_t count, DataType dtype,
                        ReduceOp op = ReduceOp::kSum, int root = -1) {
  CollectiveCall call;
  call.kind = kind;
  call.dtype = dtype;
  call.op = op;
  call.count = count;
  call.root = root;
  return call;
}

}  // namespace

void Communicator::Impl::checkRoot(const char* what, int root) const {
  if (root < 0 || root >= size_) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: root {} is outside [0, {})", rank_, what,
         root, size_);
  }
}

void Communicator::Impl::checkDistinctOrSame(const char* what, const void* sendbuf,
                                             const void* recvbuf, size_t count,
                                             DataType dtype) const {
  const size_t bytes = count * dtypeSize(dtype);
  if (sendbuf != recvbuf && overlaps(sendbuf, bytes, recvbuf, bytes)) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: {}: sendbuf and recvbuf overlap without being equal (in place means "
         "sendbuf == recvbuf)",
         rank_, what);
  }
}

void Communicator::Impl::checkPeer(const char* what, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: peer {} is {}", rank_, what, peer,
         peer == rank_ ? "this rank itself" : fmt::format("outside [0, {})", size_));
  }
}

// A buffer of `size` shares of `count` elements each, and one share of it (the in-place
// position) that the other buffer may be, or must not touch.
void Communicator::Impl::checkPerRankCount(const char* what, size_t count,
                                           DataType dtype) const {
  if (count > std::numeric_limits<size_t>::max() / 2 / dtypeSize(dtype) / size_) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: count {} x {} ranks is too large", rank_,
         what, count, size_);
  }
}

void Communicator::Impl::checkShares(const char* what, const void* whole, const void* share,
                                     size_t count, DataType dtype) const {
  checkPerRankCount(what, count, dtype);
  const size_t shareBytes = count * dtypeSize(dtype);
  const void* inPlace = static_cast<const std::byte*>(whole) + rank_ * shareBytes;
  if (share != inPlace && overlaps(whole, shareBytes * size_, share, shareBytes)) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: {}: the buffers overlap but not in place (in place means the {} share "
         "is at offset rank * count = {} elements of the full buffer)",
         rank_, what, what, static_cast<size_t>(rank_) * count);
  }
}

void Communicator::Impl::validate(const char* what, const void* sendbuf, const void* recvbuf,
                                  size_t count, DataType dtype, ReduceOp op) const {
  if (!isValid(dtype)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: unknown dtype {}", rank_, what,
         static_cast<int>(dtype));
  }
  if (!isValid(op)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: unknown reduce op {}", rank_, what,
         static_cast<int>(op));
  }
  if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {} with count {}", rank_, what,
         sendbuf == nullptr ? "sendbuf" : "recvbuf", count);
  }
  if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: count {} is too large", rank_, what, count);
  }
}

void Communicator::Impl::checkCall(const CollectiveRow& row, const void* sendbuf,
                                   const void* recvbuf, size_t count, DataType dtype,
                                   ReduceOp op, int root) const {
  const char* what = row.name;
  if (rooted(row.shape)) checkRoot(what, root);
  switch (row.shape) {
    case BufferShape::kNone:
    case BufferShape::kPointToPoint:
    case BufferShape::kPerPeerSized:
      return;  // alltoallv: checkBlocks
    case BufferShape::kOneBuffer: return validate(what, recvbuf, recvbuf, count, dtype, op);
    case BufferShape::kWhole:
      validate(what, sendbuf, recvbuf, count, dtype, op);
      return checkDistinctOrSame(what, sendbuf, recvbuf, count, dtype);
    case BufferShape::kToRoot:
      // Only the root's recvbuf is used; elsewhere it may be null.
      if (rank_ != root) return validate(what, sendbuf, sendbuf, count, dtype, op);
      validate(what, sendbuf, recvbuf, count, dtype, op);
      return checkDistinctOrSame(what, sendbuf, recvbuf, count, dtype);
    case BufferShape::kGather:
      validate(what, sendbuf, recvbuf, count, dtype, op);
      return checkShares(what, recvbuf, sendbuf, count, dtype);
    case BufferShape::kScatter:
      validate(what, sendbuf, recvbuf, count, dtype, op);
      return checkShares(what, sendbuf, recvbuf, count, dtype);
    case BufferShape::kPerPeer: {
      validate(what, sendbuf, recvbuf, count, dtype, op);
      checkPerRankCount(what, count, dtype);
      const size_t bytes = count * dtypeSize(dtype) * static_cast<size_t>(size_);
      if (overlaps(sendbuf, bytes, recvbuf, bytes)) {
        fail(ErrorCode::kInvalidArgument, "rank {}: {}: sendbuf and recvbuf overlap", rank_,
             what);
      }
      return;
    }
  }
}

// Every collective: checked on this thread against its row, then run in issue order.
Work Communicator::issue(bool async, CollectiveKind kind, const void* sendbuf, void* recvbuf,
                         size_t count, DataType dtype, ReduceOp op, int root) {
  const CollectiveRow& row = collectiveRow(kind);
  impl_->checkCall(row, sendbuf, recvbuf, count, dtype, op, root);
  if (row.shape == BufferShape::kToRoot && rank() != root) recvbuf = nullptr;
  CollectiveCall call = makeCall(kind, count, dtype, op, rooted(row.shape) ? root : -1);
  Impl* impl = impl_.get();
  return impl->issueRecorded(async, call, -1,
                             [=](uint64_t record) { impl->run(call, sendbuf, recvbuf, record); });
}

void Communicator::allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                             ReduceOp op) {
  issue(false, CollectiveKind::kAllReduce, sendbuf, recvbuf, count, dtype, op);
}

Work Communicator::allReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                  DataType dtype, ReduceOp op) {
  return issue(true, CollectiveKind::kAllReduce, sendbuf, recvbuf, count, dtype, op);
}

void Communicator::broadcast(void* buffer, size_t count, DataType dtype, int root) {
  issue(false, CollectiveKind::kBroadcast, buffer, buffer, count, dtype, ReduceOp::kSum, root);
}

Work Communicator::broadcastAsync(void* buffer, size_t count, DataType dtype, int root) {
  return issue(true, CollectiveKind::kBroadcast, buffer, buffer, count, dtype, ReduceOp::kSum,
               root);
}

void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          ReduceOp op, int root) {
  issue(false, CollectiveKind::kReduce, sendbuf, recvbuf, count, dtype, op, root);
}

Work Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                               ReduceOp op, int root) {
  return issue(true, CollectiveKind::kReduce, sendbuf, recvbuf, count, dtype, op, root);
}

void Communicator::allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  issue(false, CollectiveKind::kAllGather, sendbuf, recvbuf, count, dtype);
}

Work Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t count,
                                  DataType dtype) {
  return issue(true, CollectiveKind::kAllGather, sendbuf, recvbuf, count, dtype);
}

void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t count,
                                 DataType dtype, ReduceOp op) {
  issue(false, CollectiveKind::kReduceScatter, sendbuf, recvbuf, count, dtype, op);
}

Work Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t count,
                                      DataType dtype, ReduceOp op) {
  return issue(true, CollectiveKind::kReduceScatter, sendbuf, recvbuf, count, dtype, op);
}

void Communicator::allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype) {
  issue(false, CollectiveKind::kAllToAll, sendbuf, recvbuf, count, dtype);
}

Work Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                 DataType dtype) {
  return issue(true, CollectiveKind::kAllToAll, sendbuf, recvbuf, count, dtype);
}

PeerBlocks Communicator::Impl::checkBlocks(const void* sendbuf, const size_t* sendCounts,
                                           const size_t* sendDispls, const void* recvbuf,
                                           const size_t* recvCounts, const size_t* recvDispls,
                                           DataType dtype) const {
  const char* what = "alltoallv";
  validate(what, sendbuf, recvbuf, 0, dtype, ReduceOp::kSum);
  if (sendCounts == nullptr || recvCounts == nullptr) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {} (one count per rank is needed)", rank_,
         what, sendCounts ? "recvCounts" : "sendCounts");
  }
  const size_t elem = dtypeSize(dtype);
  const size_t limit = (std::numeric_limits<size_t>::max() / 2) / elem;
  const auto n = static_cast<size_t>(size_);
  PeerBlocks b;
  // One side's arrays as blocks; returns the elements it spans ([lo, hi), lo > hi when
  // every count is 0).
  auto take = [&](const char* side, const size_t* counts, const size_t* displs,
                  std::vector<size_t>& c, std::vector<size_t>& d, const void* buf) {
    c.assign(counts, counts + n);
    d.resize(n);
    size_t at = 0, lo = limit, hi = 0;
    for (size_t p = 0; p < n; ++p) {
      d[p] = displs ? displs[p] : at;
      if (c[p] > limit || d[p] > limit - c[p]) {
        fail(ErrorCode::kInvalidArgument,
             "rank {}: {}: {} block for rank {} (count {}, displacement {}) is too large", rank_,
             what, side, p, c[p], d[p]);
      }
      at = d[p] + c[p];
      if (c[p] == 0) continue;
      lo = std::min(lo, d[p]);
      hi = std::max(hi, d[p] + c[p]);
    }
    if (hi > 0 && buf == nullptr) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {}buf with {} elements to move", rank_,
           what, side, hi - lo);
    }
    return std::pair<size_t, size_t>(lo, hi);
  };
  const auto [sendLo, sendHi] =
      take("send", sendCounts, sendDispls, b.sendCounts, b.sendDispls, sendbuf);
  const auto [recvLo, recvHi] =
      take("recv", recvCounts, recvDispls, b.recvCounts, b.recvDispls, recvbuf);
  if (b.sendCounts[rank_] != b.recvCounts[rank_]) {
    fail(ErrorCode::kInvalidArgument,
         "rank {}: {}: this rank sends itself {} elements but receives {} from itself (the "
         "two counts for rank {} must be equal)",
         rank_, what, b.sendCounts[rank_], b.recvCounts[rank_], rank_);
  }
  // Receive blocks may not share an element: sorted by offset, each ends before the next.
  std::vector<size_t> order;
  for (size_t p = 0; p < n; ++p) {
    if (b.recvCounts[p] > 0) order.push_back(p);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return b.recvDispls[x] < b.recvDispls[y]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const size_t p = order[i - 1], q = order[i];
    if (b.recvDispls[p] + b.recvCounts[p] > b.recvDispls[q]) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: {}: the receive blocks from ranks {} and {} overlap (elements [{}, {}) "
           "and [{}, {}))",
           rank_, what, p, q, b.recvDispls[p], b.recvDispls[p] + b.recvCounts[p], b.recvDispls[q],
           b.recvDispls[q] + b.recvCounts[q]);
    }
  }
  if (sendHi > sendLo && recvHi > recvLo) {
    const auto* s = static_cast<const std::byte*>(sendbuf) + sendLo * elem;
    const auto* r = static_cast<const std::byte*>(recvbuf) + recvLo * elem;
    if (overlaps(s, (sendHi - sendLo) * elem, r, (recvHi - recvLo) * elem)) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: {}: the bytes the send blocks span overlap those the receive blocks span "
           "(no in-place form)",
           rank_, what);
    }
  }
  return b;
}

void Communicator::allToAllv(const void* sendbuf, const size_t* sendCounts,
                             const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                             const size_t* recvDispls, DataType dtype) {
  allToAllvIssue(false, sendbuf, sendCounts, sendDispls, recvbuf, recvCounts, recvDispls, dtype);
}

Work Communicator::allToAllvAsync(const void* sendbuf, const size_t* sendCounts,
                                  const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                                  const size_t* recvDispls, DataType dtype) {
  return allToAllvIssue(true, sendbuf, sendCounts, sendDispls, recvbuf, recvCounts, recvDispls,
                        dtype);
}

Work Communicator::allToAllvIssue(bool async, const void* sendbuf, const size_t* sendCounts,
                                  const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                                  const size_t* recvDispls, DataType dtype) {
  auto blocks = std::make_shared<const PeerBlocks>(
      impl_->checkBlocks(sendbuf, sendCounts, sendDispls, recvbuf, recvCounts, recvDispls, dtype));
  size_t total = 0;  // what the flight recorder and timeline name (saturating)
  for (size_t c : blocks->sendCounts) {
    total = c > std::numeric_limits<size_t>::max() - total ? std::numeric_limits<size_t>::max()
                                                           : total + c;
  }
  CollectiveCall call = makeCall(CollectiveKind::kAllToAllv, total, dtype);
  Impl* impl = impl_.get();
  return impl->issueRecorded(async, call, -1, [=](uint64_t record) {
    impl->run(call, sendbuf, recvbuf, record, blocks.get());
  });
}

void Communicator::send(const void* buf, size_t count, DataType dtype, int peer) {
  sendIssue(false, buf, count, dtype, peer);
}

Work Communicator::sendAsync(const void* buf, size_t count, DataType dtype, int peer) {
  return sendIssue(true, buf, count, dtype, peer);
}

Work Communicator::sendIssue(bool async, const void* buf, size_t count, DataType dtype,
                             int peer) {
  impl_->validate("send", buf, buf, count, dtype, ReduceOp::kSum);
  impl_->checkPeer("send", peer);
  CollectiveCall call = makeCall(CollectiveKind::kSendRecv, count, dtype);
  Impl* impl = impl_.get();
  return impl->issueRecorded(async, call, peer,
                             [=](uint64_t record) { impl->runSend(call, peer, buf, record); });
}

void Communicator::recv(void* buf, size_t count, DataType dtype, int peer) {
  recvIssue(false, buf, count, dtype, peer);
}

Work Communicator::recvAsync(void* buf, size_t count, DataType dtype, int peer) {
  return recvIssue(true, buf, count, dtype, peer);
}

Work Communicator::recvIssue(bool async, void* buf, size_t count, DataType dtype, int peer) {
  impl_->validate("recv", buf, buf, count, dtype, ReduceOp::kSum);
  impl_->checkPeer("recv", peer);
  CollectiveCall call = makeCall(CollectiveKind::kSendRecv, count, dtype);
  Impl* impl = impl_.get();
  return impl->issueRecorded(async, call, peer,
                             [=](uint64_t record) { impl->runRecv(call, peer, buf, record); });
}

void Communicator::sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                            size_t recvCount, int recvPeer, DataType dtype) {
  impl_->validate("sendrecv", sendbuf, sendbuf, sendCount, dtype, ReduceOp::kSum);
  impl_->validate("sendrecv", recvbuf, recvbuf, recvCount, dtype, ReduceOp::kSum);
  impl_->checkPeer("sendrecv", sendPeer);
  impl_->checkPeer("sendrecv", recvPeer);
  CollectiveCall send = makeCall(CollectiveKind::kSendRecv, sendCount, dtype);
  CollectiveCall recv = makeCall(CollectiveKind::kSendRecv, recvCount, dtype);
  Impl* impl = impl_.get();
  impl->issueRecorded(false, send, sendPeer, [=](uint64_t record) {
    impl->runSendRecv(send, sendPeer, sendbuf, recv, recvPeer, recvbuf, record);
  });
}

void Communicator::barrier() { barrierIssue(false); }

Work Communicator::barrierAsync() { return barrierIssue(true); }

Work Communicator::barrierIssue(bool async) {
  // The barrier row's schedule is a one-byte max all-reduce of this byte.
  CollectiveCall call = makeCall(CollectiveKind::kBarrier, 1, DataType::kUint8, ReduceOp::kMax);
  Impl* impl = impl_.get();
  return impl->issueRecorded(async, call, -1, [=](uint64_t record) {
    uint8_t byte = 0;
    impl->run(call, &byte, &byte, record);
  });
}

std::string Communicator::dumpTrace(const std::string& dir) { return impl_->dumpTrace(dir); }

void Communicator::nameNextCall(std::string_view name) { impl_->nameNextCall(name); }

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  std::unique_ptr<Communicator> child;
  Impl* impl = impl_.get();
  // In issue order with the other operations, so every rank splits at the same point.
  impl->issue(false, [&] {
    if (auto made = impl->split(color, key)) child.reset(new Communicator(std::move(made)));
  });
  return child;
}

}  // namespace gyre
