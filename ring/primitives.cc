#include "ring/primitives.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "ring/reduce.h"

namespace gyre {

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
  return w;
}

Slice Primitives::receive(size_t n) {
  Slice s = ctx_.left->wait(waitContext());
  if (s.tag != tag_) {
    fail(ErrorCode::kMismatch, "peer rank {} is running {} while this rank runs {}",
         ctx_.left->peer(), describe(s.tag), describe(call_));
  }
  if (s.bytes != n * elemBytes_) {
    fail(ErrorCode::kMismatch, "peer rank {} sent a slice of {} bytes where {} expects {}",
         ctx_.left->peer(), s.bytes, describe(call_), n * elemBytes_);
  }
  return s;
}

std::byte* Primitives::acquire() { return ctx_.right->acquire(waitContext()); }

void Primitives::post(size_t n) { ctx_.right->post(n * elemBytes_, tag_); }

void Primitives::send(const void* src, size_t n) {
  std::byte* slot = acquire();
  if (n) std::memcpy(slot, src, n * elemBytes_);
  post(n);
}

void Primitives::recvReduceSend(const void* src, size_t n) {
  Slice in = receive(n);
  std::byte* slot = acquire();
  // Intermediate steps of avg are sums; only the final step divides.
  reduceCopy(slot, nullptr, in.data, src, n, call_.dtype, call_.op, 0);
  ctx_.left->release();
  post(n);
}

void Primitives::recvReduceCopySend(const void* src, void* dst, size_t n) {
  Slice in = receive(n);
  std::byte* slot = acquire();
  reduceCopy(dst, slot, in.data, src, n, call_.dtype, call_.op, avgDivisor_);
  ctx_.left->release();
  post(n);
}

void Primitives::recvCopySend(void* dst, size_t n) {
  Slice in = receive(n);
  std::byte* slot = acquire();
  copy2(dst, slot, in.data, n * elemBytes_);
  ctx_.left->release();
  post(n);
}

void Primitives::recv(void* dst, size_t n) {
  Slice in = receive(n);
  if (n) std::memcpy(dst, in.data, n * elemBytes_);
  ctx_.left->release();
}

void Primitives::flush() {
  if (ctx_.right) ctx_.right->flush(waitContext());
}

}  // namespace gyre
