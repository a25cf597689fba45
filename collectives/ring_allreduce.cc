#include "collectives/ring_allreduce.h"

#include <algorithm>

#include "collectives/schedule_math.h"

namespace gyre {

void ringAllReduce(const PrimitiveContext& ctx, int rank, int size, const CollectiveCall& call,
                   const void* sendbuf, void* recvbuf) {
  const size_t elem = dtypeSize(call.dtype);
  const size_t n = static_cast<size_t>(size);
  const size_t chunkElems = (call.count + n - 1) / n;
  Primitives prims(ctx, call, static_cast<uint32_t>(size));
  const size_t slice = prims.sliceElems();

  auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  // Chunk c of this pass: elements [begin, begin + len) of the buffer.
  auto chunkAt = [&](int c, size_t offset, size_t* begin) {
    size_t chunkBegin = std::min(call.count, static_cast<size_t>(c) * chunkElems);
    size_t chunkEnd = std::min(call.count, chunkBegin + chunkElems);
    *begin = std::min(chunkEnd, chunkBegin + offset);
    return std::min(slice, chunkEnd - *begin);
  };
  auto chunk = [&](int k) { return (rank + k) % size; };  // the k-th rank to our right

  forEachSlice(chunkElems, slice, [&](size_t offset, size_t) {
    size_t b;
    prims.phase("reduce-scatter");
    size_t len = chunkAt(chunk(size - 1), offset, &b);
    prims.send(in + b * elem, len);
    for (int j = 2; j < size; ++j) {
      len = chunkAt(chunk(size - j), offset, &b);
      prims.recvReduceSend(in + b * elem, len);
    }
    len = chunkAt(rank, offset, &b);
    prims.recvReduceCopySend(in + b * elem, out + b * elem, len);
    prims.phase("all-gather");
    for (int j = 1; j < size - 1; ++j) {
      len = chunkAt(chunk(size - j), offset, &b);
      prims.recvCopySend(out + b * elem, len);
    }
    len = chunkAt(chunk(1), offset, &b);
    prims.recv(out + b * elem, len);
  });
  prims.flush();
}

}  // namespace gyre
