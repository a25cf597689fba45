#include "collectives/hierarchical_broadcast.h"

#include <algorithm>
#include <vector>

#include "collectives/schedule_math.h"

namespace gyre {
namespace {

// This rank's place on the host-ordered chain from the root, and the context whose
// left and right are its chain neighbours.
struct Chain {
  int pos = 0;
  int size = 0;
  PrimitiveContext ctx;
};

Chain chainFromRoot(const PrimitiveContext& base, const PeerPipes& pipes,
                    const HostTopology& topology, int rank, int root) {
  const std::vector<int> order = topology.hostOrderFrom(root);
  Chain c;
  c.size = static_cast<int>(order.size());
  c.pos = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
  c.ctx = linked(base, pipes, order[static_cast<size_t>((c.pos + c.size - 1) % c.size)],
                 order[static_cast<size_t>((c.pos + 1) % c.size)]);
  return c;
}

}  // namespace

void hierarchicalBroadcast(const PrimitiveContext& base, const PeerPipes& pipes,
                           const HostTopology& topology, int rank, const CollectiveCall& call,
                           void* buffer) {
  const Chain c = chainFromRoot(base, pipes, topology, rank, call.root);
  Primitives prims(c.ctx, call, static_cast<uint32_t>(c.size));
  const size_t elem = dtypeSize(call.dtype);
  auto* data = static_cast<std::byte*>(buffer);
  const bool isRoot = c.pos == 0;
  const bool isLast = c.pos == c.size - 1;
  // As ringBroadcast: the last rank closes the chain with an empty slice to the root
  // before it receives, and the root takes it after its first data slice.
  if (isLast) prims.send(nullptr, 0);
  forEachSlice(call.count, prims.sliceElems(), [&](size_t offset, size_t len) {
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

void hierarchicalReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                        const HostTopology& topology, int rank, const CollectiveCall& call,
                        const void* sendbuf, void* recvbuf) {
  const Chain c = chainFromRoot(base, pipes, topology, rank, call.root);
  Primitives prims(c.ctx, call, static_cast<uint32_t>(c.size));
  const size_t elem = dtypeSize(call.dtype);
  auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  const bool isRoot = c.pos == 0;
  const bool isFirst = c.pos == 1;
  // As ringReduce: the data flows order[1] -> ... -> order[n-1] -> root; the root's
  // empty closing slice goes to order[1] first.
  if (isRoot) prims.send(nullptr, 0);
  forEachSlice(call.count, prims.sliceElems(), [&](size_t offset, size_t len) {
    const std::byte* src = in + offset * elem;
    if (isFirst) {
      prims.send(src, len);
      if (offset == 0) prims.recv(nullptr, 0);
    } else if (isRoot) {
      prims.recvReduce(src, out + offset * elem, len, /*receivedIsLower=*/true,
                       /*finalStep=*/true);
    } else {
      prims.recvReduceSend(src, len);
    }
  });
  prims.flush();
}

}  // namespace gyre
