#include "collectives/ring_reduce.h"

#include <algorithm>

#include "collectives/schedule_math.h"

namespace gyre {

void chainReduce(const PrimitiveContext& ctx, int pos, int size, const CollectiveCall& call,
                 const void* sendbuf, void* recvbuf) {
  Primitives prims(ctx, call, static_cast<uint32_t>(size));
  const size_t elem = dtypeSize(call.dtype);
  const size_t slice = prims.sliceElems();
  auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);  // null except on the root
  const bool isRoot = pos == 0;
  const bool isFirst = pos == 1 % size;

  // The closing slice (root -> first) is sent before anything is received, and the first
  // rank takes it right after its first data slice. So every rank's first blocking wait
  // is a receive, and every rank whose role starts the chain (the root, the first) has
  // already put a slice with its tag on its outgoing pipe: when the ranks disagree on the
  // root or the call, the first slice across a disagreeing pipe is a kMismatch, instead
  // of a cycle of ranks each waiting for its right neighbour to drain its sends.
  if (isRoot) prims.send(nullptr, 0);
  forEachSlice(call.count, slice, [&](size_t offset, size_t len) {
    const std::byte* src = in + offset * elem;
    if (isFirst) {
      prims.send(src, len);
      if (offset == 0) prims.recv(nullptr, 0);
    } else if (isRoot) {
      // The chain's partial result goes first, the root's own value last: for the root's
      // elements, the same order as ringAllReduce's chunk `root`. In place (src == dst)
      // is safe: the root sends nothing from its buffers but the empty closing slice.
      prims.recvReduce(src, out + offset * elem, len, /*receivedIsLower=*/true,
                       /*finalStep=*/true);
    } else {
      prims.recvReduceSend(src, len);
    }
  });
  prims.flush();
}

void ringReduce(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                const void* sendbuf, void* recvbuf) {
  chainReduce(ctx, (rank - call.root + size) % size, size, call, sendbuf, recvbuf);
}

}  // namespace gyre
