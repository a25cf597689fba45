#include "collectives/all_gather.h"

#include <algorithm>
#include <cstring>

#include "collectives/schedule_math.h"

namespace gyre {

void ringAllGather(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                   const void* sendbuf, void* recvbuf) {
  Primitives prims(ctx, call, static_cast<uint32_t>(size));
  const size_t elem = dtypeSize(call.dtype);
  const size_t slice = prims.sliceElems();
  auto* mine = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  const bool inPlace = mine == out + static_cast<size_t>(rank) * call.count * elem;
  // Element `offset` of rank c's share in recvbuf.
  auto share = [&](int c, size_t offset) {
    return out + (static_cast<size_t>(c) * call.count + offset) * elem;
  };
  auto left = [&](int k) { return (rank - k + size) % size; };  // the k-th rank to our left

  // One pass moves one slice of every share one hop: step j forwards the share of the
  // rank j to our left. The own share goes straight from sendbuf; each received share
  // is written once into recvbuf, then forwarded from there. Nothing is written after
  // it was sent (no rank receives its own share, and only the own share may overlap
  // sendbuf), so the direct sends may read user memory until flush().
  forEachSlice(call.count, slice, [&](size_t offset, size_t len) {
    prims.send(mine + offset * elem, len);
    if (ctx.moveBytes && !inPlace && len > 0) {
      std::memcpy(share(rank, offset), mine + offset * elem, len * elem);
    }
    for (int j = 1; j < size - 1; ++j) prims.recvCopySend(share(left(j), offset), len);
    prims.recv(share(left(size - 1), offset), len);
  });
  prims.flush();
}

}  // namespace gyre
