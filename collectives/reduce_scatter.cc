#include "collectives/reduce_scatter.h"

#include <algorithm>

#include "collectives/schedule_math.h"

namespace gyre {

void ringReduceScatter(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                       const void* sendbuf, void* recvbuf) {
  Primitives prims(ctx, call, static_cast<uint32_t>(size));
  const size_t elem = dtypeSize(call.dtype);
  const size_t slice = prims.sliceElems();
  auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  // Element `offset` of rank c's share in sendbuf.
  auto share = [&](int c, size_t offset) {
    return in + (static_cast<size_t>(c) * call.count + offset) * elem;
  };
  auto left = [&](int k) { return (rank - k + size) % size; };  // the k-th rank to our left

  // Share c starts at rank c + 1 and travels right, each rank adding its own value
  // after the received partial result, and ends at rank c, which adds its value last:
  // the chunk assignment and operand order of ringAllReduce on size * count elements.
  // The only direct send reads the share of our left neighbour, never this rank's own
  // share, which is the one written in place.
  forEachSlice(call.count, slice, [&](size_t offset, size_t len) {
    prims.send(share(left(1), offset), len);
    for (int j = 2; j < size; ++j) prims.recvReduceSend(share(left(j), offset), len);
    prims.recvReduce(share(rank, offset), out + offset * elem, len, /*receivedIsLower=*/true,
                     /*finalStep=*/true);
  });
  prims.flush();
}

}  // namespace gyre
