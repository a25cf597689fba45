#include "collectives/hierarchical_broadcast.h"

#include <algorithm>
#include <vector>

#include "collectives/ring_broadcast.h"
#include "collectives/ring_reduce.h"

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
  chainBroadcast(c.ctx, c.pos, c.size, call, buffer);
}

void hierarchicalReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                        const HostTopology& topology, int rank, const CollectiveCall& call,
                        const void* sendbuf, void* recvbuf) {
  const Chain c = chainFromRoot(base, pipes, topology, rank, call.root);
  chainReduce(c.ctx, c.pos, c.size, call, sendbuf, recvbuf);
}

}  // namespace gyre
