#include "collectives/primitives.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "host_kernels/reduce.h"
#include "collectives/stall_inspector.h"

namespace gyre {

PrimitiveContext linked(const PrimitiveContext& base, const PeerPipes& pipes, int recvFrom,
                        int sendTo) {
  PrimitiveContext ctx = base;
  ctx.left = nullptr;
  ctx.right = nullptr;
  if (recvFrom >= 0) {
    auto it = pipes.recv.find(recvFrom);
    if (it == pipes.recv.end()) fail(ErrorCode::kInternal, "rank {}: no pipe from rank {}", base.rank, recvFrom);
    ctx.left = it->second;
  }
  if (sendTo >= 0) {
    auto it = pipes.send.find(sendTo);
    if (it == pipes.send.end()) fail(ErrorCode::kInternal, "rank {}: no pipe to rank {}", base.rank, sendTo);
    ctx.right = it->second;
  }
  return ctx;
}

Primitives::Primitives(const PrimitiveContext& ctx, const CollectiveCall& call,
                       uint32_t avgDivisor)
    : ctx_(ctx),
      call_(call),
      tag_(call.tag()),
      elemBytes_(dtypeSize(call.dtype)),
      sliceElems_(0),
      avgDivisor_(avgDivisor) {
  size_t slot = ctx.right ? ctx.right->slotBytes() : ctx.left ? ctx.left->slotBytes() : 0;
  if (ctx.left && ctx.right) slot = std::min(ctx.left->slotBytes(), ctx.right->slotBytes());
  sliceElems_ = slot / elemBytes_;
}

WaitContext Primitives::waitContext() const {
  WaitContext w;
  w.deadline = std::chrono::steady_clock::now() + ctx_.timeout;
  w.aborted = ctx_.aborted;
  w.spin = ctx_.spin;
  w.observer = ctx_.inspector;
  return w;
}

void Primitives::throwMismatch(const Slice& got, size_t n) const {
  if (got.tag != tag_) {
    fail(ErrorCode::kMismatch, "rank {} runs {} but its peer rank {} runs {}", ctx_.rank,
         describe(call_), ctx_.left->peer(), describe(got.tag));
  }
  fail(ErrorCode::kMismatch, "peer rank {} sent a slice of {} bytes where {} on rank {} expects {}",
       ctx_.left->peer(), got.bytes, describe(call_), ctx_.rank, n * elemBytes_);
}

Slice Primitives::receive(size_t n) {
  if (ctx_.inspector) ctx_.inspector->at(ctx_.left->peer());
  Slice s = ctx_.left->wait(waitContext());
  if (s.tag != tag_ || s.bytes != n * elemBytes_) throwMismatch(s, n);
  return s;
}

void Primitives::receiveInto(void* dst, size_t n) {
  if (ctx_.inspector) ctx_.inspector->at(ctx_.left->peer());
  Slice s = ctx_.left->waitInto(dst, n * elemBytes_, tag_, waitContext());
  if (s.data != dst || s.tag != tag_ || s.bytes != n * elemBytes_) throwMismatch(s, n);
  if (ctx_.inspector) ctx_.inspector->received(n * elemBytes_);
}

void Primitives::released(size_t n) {
  ctx_.left->release();
  if (ctx_.inspector) ctx_.inspector->received(n * elemBytes_);
}

std::byte* Primitives::acquire() {
  if (ctx_.inspector) ctx_.inspector->at(ctx_.right->peer());
  return ctx_.right->acquire(waitContext());
}

void Primitives::post(size_t n) {
  ctx_.right->post(n * elemBytes_, tag_);
  if (ctx_.inspector) ctx_.inspector->sent(n * elemBytes_);
}

void Primitives::postDirect(const void* src, size_t n) {
  if (ctx_.inspector) ctx_.inspector->at(ctx_.right->peer());
  ctx_.right->postDirect(src, n * elemBytes_, tag_, waitContext());
  if (ctx_.inspector) ctx_.inspector->sent(n * elemBytes_);
}

// The direct sends below read user memory after the call returns. The schedules keep
// it valid: a rank overwrites an element it sent only after receiving that element's
// final value, which the peer could only produce after our slice reached it.

void Primitives::send(const void* src, size_t n) { postDirect(src, n); }

void Primitives::recvReduceSend(const void* src, size_t n) {
  Slice in = receive(n);
  std::byte* slot = acquire();
  // Intermediate steps of avg are sums; only the final step divides.
  reduceCopy(slot, nullptr, in.data, src, n, call_.dtype, call_.op, 0);
  released(n);
  post(n);
}

void Primitives::recvReduceCopySend(const void* src, void* dst, size_t n) {
  Slice in = receive(n);
  reduceCopy(dst, nullptr, in.data, src, n, call_.dtype, call_.op, avgDivisor_);
  released(n);
  postDirect(dst, n);
}

void Primitives::recvCopySend(void* dst, size_t n) {
  receiveInto(dst, n);
  postDirect(dst, n);
}

void Primitives::recv(void* dst, size_t n) { receiveInto(dst, n); }

void Primitives::recvReduce(const void* src, void* dst, size_t n, bool receivedIsLower,
                            bool finalStep) {
  Slice in = receive(n);
  const void* first = receivedIsLower ? static_cast<const void*>(in.data) : src;
  const void* second = receivedIsLower ? src : static_cast<const void*>(in.data);
  reduceCopy(dst, nullptr, first, second, n, call_.dtype, call_.op, finalStep ? avgDivisor_ : 0);
  released(n);
}

void Primitives::flush() {
  if (!ctx_.right) return;
  if (ctx_.inspector) ctx_.inspector->at(ctx_.right->peer());
  ctx_.right->flush(waitContext());
}

}  // namespace gyre
