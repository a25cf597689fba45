#include "collectives/primitives.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "host_kernels/reduce.h"
#include "host_kernels/stream_copy.h"
#include "collectives/stall_inspector.h"

namespace gyre {

namespace {

RecvPipe* recvPipe(const PrimitiveContext& base, const PeerPipes& pipes, int peer) {
  if (peer < 0) return nullptr;
  auto it = pipes.recv.find(peer);
  if (it == pipes.recv.end() && pipes.connect) {
    pipes.connect(peer);
    it = pipes.recv.find(peer);
  }
  if (it == pipes.recv.end()) fail(ErrorCode::kInternal, "rank {}: no pipe from rank {}", base.rank, peer);
  return it->second;
}

SendPipe* sendPipe(const PrimitiveContext& base, const PeerPipes& pipes, int peer) {
  if (peer < 0) return nullptr;
  auto it = pipes.send.find(peer);
  if (it == pipes.send.end() && pipes.connect) {
    pipes.connect(peer);
    it = pipes.send.find(peer);
  }
  if (it == pipes.send.end()) fail(ErrorCode::kInternal, "rank {}: no pipe to rank {}", base.rank, peer);
  return it->second;
}

}  // namespace

PrimitiveContext linked(const PrimitiveContext& base, const PeerPipes& pipes, int recvFrom,
                        int sendTo, int recvFrom2, int sendTo2) {
  PrimitiveContext ctx = base;
  ctx.left = recvPipe(base, pipes, recvFrom);
  ctx.right = sendPipe(base, pipes, sendTo);
  ctx.left2 = recvPipe(base, pipes, recvFrom2);
  ctx.right2 = sendPipe(base, pipes, sendTo2);
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
  // The smallest slot of all the pipes: every slice fits each of them.
  size_t slot = 0;
  auto fit = [&](size_t bytes) { slot = slot ? std::min(slot, bytes) : bytes; };
  for (RecvPipe* p : {ctx.left, ctx.left2}) {
    if (p) fit(p->slotBytes());
  }
  for (SendPipe* p : {ctx.right, ctx.right2}) {
    if (p) fit(p->slotBytes());
  }
  sliceElems_ = slot / elemBytes_;
  fillSlots_ = ctx.right && ctx.right->fillSlotsInPlace() &&
               (!ctx.right2 || ctx.right2->fillSlotsInPlace());
  readSlots_ = ctx.left && ctx.left->readSlotsInPlace();
  streamOut_ = call.count * elemBytes_ >= kStreamOutMinBytes;
  moveBytes_ = ctx.moveBytes;
}

void Primitives::writeOut(void* dst, const void* src, size_t n) {
  if (!moveBytes_) return;
  if (streamOut_) {
    streamCopy(dst, src, n * elemBytes_);
  } else if (n) {
    std::memcpy(dst, src, n * elemBytes_);
  }
}

WaitContext Primitives::waitContext() const {
  WaitContext w;
  w.deadline = std::chrono::steady_clock::now() + ctx_.timeout;
  w.aborted = ctx_.aborted;
  w.spin = ctx_.spin;
  w.observer = ctx_.inspector;
  return w;
}

void Primitives::throwMismatch(const RecvPipe* from, const Slice& got, size_t n) const {
  if (got.tag != tag_) {
    fail(ErrorCode::kMismatch, "rank {} runs {} but its peer rank {} runs {}", ctx_.rank,
         describe(call_), from->peer(), describe(got.tag));
  }
  fail(ErrorCode::kMismatch, "peer rank {} sent a slice of {} bytes where {} on rank {} expects {}",
       from->peer(), got.bytes, describe(call_), ctx_.rank, n * elemBytes_);
}

Slice Primitives::receive(RecvPipe* from, size_t n) {
  if (ctx_.inspector) ctx_.inspector->at(from->peer());
  Slice s = from->wait(waitContext());
  if (s.tag != tag_ || s.bytes != n * elemBytes_) throwMismatch(from, s, n);
  return s;
}

void Primitives::receiveInto(RecvPipe* from, void* dst, size_t n) {
  if (ctx_.inspector) ctx_.inspector->at(from->peer());
  Slice s = from->waitInto(dst, n * elemBytes_, tag_, waitContext());
  if (s.data != dst || s.tag != tag_ || s.bytes != n * elemBytes_) throwMismatch(from, s, n);
  if (ctx_.inspector) ctx_.inspector->received(n * elemBytes_);
}

void Primitives::released(RecvPipe* from, size_t n) {
  from->release();
  if (ctx_.inspector) ctx_.inspector->received(n * elemBytes_);
}

std::byte* Primitives::acquire(SendPipe* to) {
  if (ctx_.inspector) ctx_.inspector->at(to->peer());
  return to->acquire(waitContext());
}

void Primitives::post(SendPipe* to, size_t n) {
  to->post(n * elemBytes_, tag_);
  if (ctx_.inspector) ctx_.inspector->sent(n * elemBytes_);
}

void Primitives::postDirect(SendPipe* to, const void* src, size_t n) {
  if (ctx_.inspector) ctx_.inspector->at(to->peer());
  to->postDirect(src, n * elemBytes_, tag_, waitContext());
  if (ctx_.inspector) ctx_.inspector->sent(n * elemBytes_);
}

// The direct sends below read user memory after the call returns. The schedules keep
// it valid: a rank overwrites an element it sent only after receiving that element's
// final value, which the peer could only produce after our slice reached it.

void Primitives::sendDirect(const void* src, size_t n) {
  postDirect(ctx_.right, src, n);
  if (ctx_.right2) postDirect(ctx_.right2, src, n);
}

void Primitives::send(const void* src, size_t n) { sendDirect(src, n); }

void Primitives::recvReduceSend(const void* src, size_t n) {
  Slice in = receive(ctx_.left, n);
  Slice in2 = ctx_.left2 ? receive(ctx_.left2, n) : Slice{};
  std::byte* slot = acquire(ctx_.right);
  std::byte* slot2 = ctx_.right2 ? acquire(ctx_.right2) : nullptr;
  // Intermediate steps of avg are sums; only the final step divides. Straight into the
  // send slots: the partial result never touches the user's buffers.
  if (ctx_.left2) {
    if (moveBytes_) {
      reduceCopy(slot, nullptr, in.data, src, n, call_.dtype, call_.op, 0);
      reduceCopy(slot, slot2, slot, in2.data, n, call_.dtype, call_.op, 0);
    }
    released(ctx_.left2, n);
  } else if (moveBytes_) {
    reduceCopy(slot, slot2, in.data, src, n, call_.dtype, call_.op, 0);
  }
  released(ctx_.left, n);
  post(ctx_.right, n);
  if (ctx_.right2) post(ctx_.right2, n);
}

void Primitives::recvReduceCopySend(const void* src, void* dst, size_t n) {
  Slice in = receive(ctx_.left, n);
  if (fillSlots_) {
    // The final values go to dst and the send slot in the same pass (shm): one pass
    // over the slice fewer than reducing into dst and copying dst on.
    Slice in2 = ctx_.left2 ? receive(ctx_.left2, n) : Slice{};
    std::byte* slot = acquire(ctx_.right);
    // Streaming: reduce into the (cached) slot, then stream it to dst around the cache.
    void* out = streamOut_ ? static_cast<void*>(slot) : dst;
    void* out2 = streamOut_ ? nullptr : slot;
    if (ctx_.left2) {
      if (moveBytes_) {
        reduceCopy(out, nullptr, in.data, src, n, call_.dtype, call_.op, 0);
        reduceCopy(out, out2, out, in2.data, n, call_.dtype, call_.op, avgDivisor_);
      }
      released(ctx_.left2, n);
    } else if (moveBytes_) {
      reduceCopy(out, out2, in.data, src, n, call_.dtype, call_.op, avgDivisor_);
    }
    if (streamOut_) writeOut(dst, slot, n);
    released(ctx_.left, n);
    postCopies(slot, n);
    return;
  }
  if (ctx_.left2) {
    Slice in2 = receive(ctx_.left2, n);
    if (moveBytes_) {
      reduceCopy(dst, nullptr, in.data, src, n, call_.dtype, call_.op, 0);
      reduceCopy(dst, nullptr, dst, in2.data, n, call_.dtype, call_.op, avgDivisor_);
    }
    released(ctx_.left2, n);
  } else if (moveBytes_) {
    reduceCopy(dst, nullptr, in.data, src, n, call_.dtype, call_.op, avgDivisor_);
  }
  released(ctx_.left, n);
  sendDirect(dst, n);
}

void Primitives::recvCopySend(void* dst, size_t n) {
  if (fillSlots_ && readSlots_) {
    // The slot is read once, into dst and into the next send slot (shm both ways).
    Slice in = receive(ctx_.left, n);
    std::byte* slot = acquire(ctx_.right);
    if (!moveBytes_) {
      // payload-free: the slice's size and tag only
    } else if (streamOut_) {
      if (n) std::memcpy(slot, in.data, n * elemBytes_);
      writeOut(dst, in.data, n);
    } else {
      copy2(slot, dst, in.data, n * elemBytes_);
    }
    released(ctx_.left, n);
    postCopies(slot, n);
    return;
  }
  receiveInto(ctx_.left, dst, n);
  sendDirect(dst, n);
}

void Primitives::postCopies(const std::byte* slot, size_t n) {
  if (ctx_.right2) {
    std::byte* slot2 = acquire(ctx_.right2);
    if (n && moveBytes_) std::memcpy(slot2, slot, n * elemBytes_);
  }
  post(ctx_.right, n);
  if (ctx_.right2) post(ctx_.right2, n);
}

void Primitives::recv(void* dst, size_t n) {
  if (streamOut_ && readSlots_) {
    Slice in = receive(ctx_.left, n);
    writeOut(dst, in.data, n);
    released(ctx_.left, n);
    return;
  }
  receiveInto(ctx_.left, dst, n);
}

void Primitives::recvReduce(const void* src, void* dst, size_t n, bool receivedIsLower,
                            bool finalStep) {
  Slice in = receive(ctx_.left, n);
  const void* first = receivedIsLower ? static_cast<const void*>(in.data) : src;
  const void* second = receivedIsLower ? src : static_cast<const void*>(in.data);
  if (moveBytes_) {
    reduceCopy(dst, nullptr, first, second, n, call_.dtype, call_.op, finalStep ? avgDivisor_ : 0);
  }
  released(ctx_.left, n);
}

void Primitives::flush() {
  for (SendPipe* to : {ctx_.right, ctx_.right2}) {
    if (!to) continue;
    if (ctx_.inspector) ctx_.inspector->at(to->peer());
    to->flush(waitContext());
  }
}

void Primitives::phase(const char* name) {
  if (ctx_.inspector) ctx_.inspector->phase(name);
}

}  // namespace gyre
