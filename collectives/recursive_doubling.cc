#include "collectives/recursive_doubling.h"

#include <algorithm>
#include <cstring>

#include "collectives/collective_table.h"
#include "collectives/cost_model.h"
#include "collectives/schedule_math.h"
#include "host_kernels/reduce.h"

namespace gyre {
namespace {

Primitives with(const PrimitiveContext& base, const PeerPipes& pipes, int peer,
                const CollectiveCall& call, uint32_t avgDivisor) {
  return Primitives(linked(base, pipes, peer, peer), call, avgDivisor);
}

}  // namespace

std::vector<int> recursiveDoublingPeers(int rank, int size) {
  std::vector<int> peers;
  const int p = lowerPowerOfTwo(size);
  if (rank >= p) return {rank - p};
  if (rank + p < size) peers.push_back(rank + p);
  for (int mask = 1; mask < p; mask <<= 1) peers.push_back(rank ^ mask);
  return peers;
}

bool recursiveDoublingFits(size_t bytes, size_t slotBytes) { return bytes <= slotBytes; }

void recursiveDoublingAllReduce(const PrimitiveContext& base, const PeerPipes& pipes, int rank,
                                int size, const CollectiveCall& call, const void* sendbuf,
                                void* recvbuf) {
  const size_t n = call.count;
  const int p = lowerPowerOfTwo(size);
  const uint32_t divisor = static_cast<uint32_t>(size);
  if (base.moveBytes && sendbuf != recvbuf && n) {
    copy2(recvbuf, nullptr, sendbuf, n * dtypeSize(call.dtype));
  }

  if (rank >= p) {
    // Folded rank: give the data to rank - p, take the result back.
    Primitives prims = with(base, pipes, rank - p, call, divisor);
    prims.send(recvbuf, n);
    prims.recv(recvbuf, n);
    prims.flush();
    return;
  }
  if (rank + p < size) {
    Primitives prims = with(base, pipes, rank + p, call, divisor);
    prims.recvReduce(recvbuf, recvbuf, n, /*receivedIsLower=*/false, /*finalStep=*/false);
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    const int partner = rank ^ mask;
    Primitives prims = with(base, pipes, partner, call, divisor);
    // The send reads recvbuf directly (tcp), so it must have left before the
    // reduction overwrites recvbuf: flush first (a small slice is in the kernel at once).
    prims.send(recvbuf, n);
    prims.flush();
    prims.recvReduce(recvbuf, recvbuf, n, partner < rank, mask * 2 == p);
  }
  if (rank + p < size) {
    Primitives prims = with(base, pipes, rank + p, call, divisor);
    prims.send(recvbuf, n);
    prims.flush();
  }
}

namespace {

// log2(p) exchanges of the whole buffer, +2 (the fold in and out) when n is not a power
// of two p.
double rdOneHost(size_t bytes, int size, const LinkCost& cost) {
  const double s = static_cast<double>(bytes) / cost.bytesPerUs;
  const double steps = floorLog2(size) + (lowerPowerOfTwo(size) != size ? 2 : 0);
  return cost.alphaUs * steps + steps * s;
}

// Every exchange carries S each way.
double rdHostLinkBytes(size_t bytes, const HostTopology& t, int nicsPerHost) {
  const int n = t.size();
  const double s = static_cast<double>(bytes);
  HostLoad load(t, nicsPerHost);
  for (int r = 0; r < n; ++r) {
    for (int peer : recursiveDoublingPeers(r, n)) load.edge(r, peer, s);
  }
  return load.busiest();
}

// The exchanges as rank 0 makes them (every rank's partners sit alike on equal hosts):
// the fold partner twice (in and out), then each xor partner.
double rdChainAlpha(const HostTopology& t, const TwoLevelCost& c) {
  const int n = t.size();
  const int p = lowerPowerOfTwo(n);
  double sum = p < n ? 2 * hopAlpha(t, c, 0, p) : 0;
  for (int mask = 1; mask < p; mask <<= 1) sum += hopAlpha(t, c, 0, mask);
  return sum;
}

double rdPredict(size_t bytes, const HostTopology& t, const TwoLevelCost& cost) {
  const double s = static_cast<double>(bytes);
  const double link = rdHostLinkBytes(bytes, t, cost.nicsPerHost) / cost.inter.bytesPerUs;
  const int lg = floorLog2(t.size());
  const double steps = lg + ((1 << lg) != t.size() ? 2 : 0);
  return rdChainAlpha(t, cost) + std::max(link, steps * s / cost.intra.bytesPerUs);
}

}  // namespace

constinit const AllReduceRow kRecursiveDoublingAllReduce = {
    AllReduceAlgo::kRecursiveDoubling,
    [](const ScheduleArgs& a) {
      recursiveDoublingAllReduce(a.ctx, a.pipes, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
    },
    // The whole buffer travels in one slice.
    [](const AllReducePlace& p) { return recursiveDoublingFits(p.bytes, p.slotBytes); },
    rdOneHost,
    rdPredict,
    rdHostLinkBytes,
};

}  // namespace gyre
