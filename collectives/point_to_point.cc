#include "collectives/point_to_point.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "collectives/schedule_math.h"
#include "host_kernels/reduce.h"

namespace gyre {
namespace {

// One message is cut into slices of at most `slice` elements; a message of 0 elements
// still takes one (empty) slice, so the receiver's matching call consumes exactly one
// slice and checks its tag: a mismatch on count 0 is found like any other.
size_t slicesOf(size_t count, size_t slice) { return count == 0 ? 1 : (count + slice - 1) / slice; }

// Elements [first, first + n) of slice i of a `count`-element message.
struct Span {
  size_t first = 0;
  size_t n = 0;
};
Span sliceAt(size_t i, size_t count, size_t slice) {
  const size_t first = std::min(count, i * slice);
  return {first, std::min(slice, count - first)};
}

void checkSliceable(const Primitives& prims, const PrimitiveContext& ctx,
                    const CollectiveCall& call, int peer) {
  if (prims.sliceElems() == 0) {
    fail(ErrorCode::kInternal, "rank {}: {} with rank {}: a slot holds no whole element", ctx.rank,
         describe(call), peer);
  }
}

}  // namespace

void sendTo(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& call,
            int peer, const void* buf) {
  Primitives prims(linked(base, pipes, -1, peer), call, 1);
  checkSliceable(prims, base, call, peer);
  const size_t elem = dtypeSize(call.dtype);
  const size_t slice = prims.sliceElems();
  const auto* data = static_cast<const std::byte*>(buf);
  forEachSlice(call.count, slice,
               [&](size_t offset, size_t len) { prims.send(data + offset * elem, len); });
  // The slices went out straight from the caller's buffer, which is the caller's again
  // once this returns.
  prims.flush();
}

void recvFrom(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& call,
              int peer, void* buf) {
  Primitives prims(linked(base, pipes, peer, -1), call, 1);
  checkSliceable(prims, base, call, peer);
  const size_t elem = dtypeSize(call.dtype);
  const size_t slice = prims.sliceElems();
  auto* data = static_cast<std::byte*>(buf);
  // Each slice must carry the sender's Tag for exactly this call (count, dtype, sender,
  // per-pair sequence) and this slice's length, or recv() throws kMismatch before a byte
  // is written: a sender of a different count is found at the first slice, never as a
  // truncated or overlong message.
  forEachSlice(call.count, slice,
               [&](size_t offset, size_t len) { prims.recv(data + offset * elem, len); });
}

void sendRecv(const PrimitiveContext& base, const PeerPipes& pipes, const CollectiveCall& send,
              int sendPeer, const void* sendbuf, const CollectiveCall& recv, int recvPeer,
              void* recvbuf) {
  // One Primitives per direction: each carries its own call's Tag and slices like the
  // plain send or recv it pairs with on the other rank.
  Primitives out(linked(base, pipes, -1, sendPeer), send, 1);
  Primitives in(linked(base, pipes, recvPeer, -1), recv, 1);
  checkSliceable(out, base, send, sendPeer);
  checkSliceable(in, base, recv, recvPeer);
  const size_t sendElem = dtypeSize(send.dtype);
  const size_t recvElem = dtypeSize(recv.dtype);
  // The slices go out straight from sendbuf and may still be read after a later slice
  // has been received; when the buffers share bytes, send from a private copy instead.
  std::vector<std::byte> staged;
  if (base.moveBytes && overlaps(sendbuf, send.count * sendElem, recvbuf, recv.count * recvElem)) {
    staged.resize(send.count * sendElem);
    copy2(staged.data(), nullptr, sendbuf, staged.size());
    sendbuf = staged.data();
  }
  const auto* src = static_cast<const std::byte*>(sendbuf);
  auto* dst = static_cast<std::byte*>(recvbuf);
  const size_t sendSlices = slicesOf(send.count, out.sliceElems());
  const size_t recvSlices = slicesOf(recv.count, in.sliceElems());
  // Slice i is sent before slice i is received. In a cycle of ranks doing the same,
  // a send of slice i needs a credit freed by the receiver's slice i - slots (earlier),
  // and a receive of slice i needs the sender's send of slice i (which comes before its
  // own receive of slice i): every wait is on an earlier step, so none is circular,
  // whatever the message sizes and the pipes' capacity.
  for (size_t i = 0; i < std::max(sendSlices, recvSlices); ++i) {
    if (i < sendSlices) {
      const Span s = sliceAt(i, send.count, out.sliceElems());
      out.send(src + s.first * sendElem, s.n);
    }
    if (i < recvSlices) {
      const Span s = sliceAt(i, recv.count, in.sliceElems());
      in.recv(dst + s.first * recvElem, s.n);
    }
  }
  out.flush();
}

}  // namespace gyre
