#include "collectives/recursive_doubling.h"

#include <cstring>

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

}  // namespace gyre
