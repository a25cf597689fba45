#include "collectives/ring_broadcast.h"

#include <algorithm>

#include "collectives/schedule_math.h"

namespace gyre {

void chainBroadcast(const PrimitiveContext& ctx, int pos, int size, const CollectiveCall& call,
                    void* buffer) {
  Primitives prims(ctx, call, static_cast<uint32_t>(size));
  const size_t elem = dtypeSize(call.dtype);
  const size_t slice = prims.sliceElems();
  auto* data = static_cast<std::byte*>(buffer);
  const bool isRoot = pos == 0;
  const bool isLast = pos == size - 1;
  // The ring is closed by an empty slice from the last rank back to the root, so every
  // rank receives exactly one stream carrying its own tag: ranks that disagree on the
  // root (or the call) then see each other's tags and fail, where a one-way chain would
  // leave the stray slices unread and deliver the wrong data without an error. The last
  // rank sends it before receiving anything and the root takes it right after its first
  // data slice, so every rank's first blocking wait is a receive and each rank that
  // starts a chain has already put a slice with its tag on its outgoing pipe: with
  // disagreeing roots the first slice across a disagreeing pipe is a kMismatch, not a
  // cycle of ranks each waiting for its neighbour (as ring_reduce.cc).
  if (isLast) prims.send(nullptr, 0);
  forEachSlice(call.count, slice, [&](size_t offset, size_t len) {
    std::byte* p = data + offset * elem;
    if (isRoot) {
      prims.send(p, len);
      if (offset == 0) prims.recv(nullptr, 0);
    } else if (isLast) {
      prims.recv(p, len);
    } else {
      prims.recvCopySend(p, len);
    }
  });
  prims.flush();
}

void ringBroadcast(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                   void* buffer) {
  chainBroadcast(ctx, (rank - call.root + size) % size, size, call, buffer);
}

}  // namespace gyre
