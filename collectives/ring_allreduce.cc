#include "collectives/ring_allreduce.h"

#include <algorithm>

#include "collectives/collective_table.h"
#include "collectives/cost_model.h"
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

namespace {

// 2(n-1) steps; 2(n-1)/n S bytes per rank.
double ringOneHost(size_t bytes, int size, const LinkCost& cost) {
  const double s = static_cast<double>(bytes) / cost.bytesPerUs;
  const double n = size;
  const double ringBytes = 2 * (n - 1) / n * s;
  return cost.alphaUs * 2 * (n - 1) + ringBytes;
}

// Every edge r -> r + 1 carries 2(n-1)/n S.
double ringHostLinkBytes(size_t bytes, const HostTopology& t, int nicsPerHost) {
  const int n = t.size();
  const double s = static_cast<double>(bytes);
  HostLoad load(t, nicsPerHost);
  for (int r = 0; r < n; ++r) load.edge(r, (r + 1) % n, 2.0 * (n - 1) / n * s);
  return load.busiest();
}

// The mean alpha of the ring's hops r -> r + 1.
double ringHopAlpha(const HostTopology& t, const TwoLevelCost& c) {
  const int n = t.size();
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += hopAlpha(t, c, r, (r + 1) % n);
  return sum / n;
}

// 2(n-1) hops; the busiest link's bytes or the busiest rank's, whichever is slower.
double ringPredict(size_t bytes, const HostTopology& t, const TwoLevelCost& cost) {
  const double n = t.size();
  const double s = static_cast<double>(bytes);
  const double link = ringHostLinkBytes(bytes, t, cost.nicsPerHost) / cost.inter.bytesPerUs;
  const double ringRankBytes = 2 * (n - 1) / n * s;
  return ringHopAlpha(t, cost) * 2 * (n - 1) +
         std::max(link, ringRankBytes / cost.intra.bytesPerUs);
}

}  // namespace

constinit const AllReduceRow kRingAllReduce = {
    AllReduceAlgo::kRing,
    [](const ScheduleArgs& a) {
      ringAllReduce(a.ctx, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
    },
    [](const AllReducePlace&) { return true; },  // any ranks, any buffer
    ringOneHost,
    ringPredict,
    ringHostLinkBytes,
};

}  // namespace gyre
