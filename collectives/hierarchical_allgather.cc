#include "collectives/hierarchical_allgather.h"

#include <cstring>
#include <vector>

#include "base/error.h"
#include "collectives/schedule_math.h"

namespace gyre {

void hierarchicalAllGather(const PrimitiveContext& base, const PeerPipes& pipes,
                           const HostTopology& topology, int rank, const CollectiveCall& call,
                           const void* sendbuf, void* recvbuf) {
  if (!topology.evenHierarchical()) {
    fail(ErrorCode::kInternal, "rank {}: hierarchical all-gather on {}", rank, topology.describe());
  }
  const int hosts = topology.hostCount();
  const int perHost = topology.ranksPerHost();
  const int host = topology.hostOf[rank];
  const int local = topology.localIndexOf[rank];
  const std::vector<int>& localRanks = topology.hosts[host];
  const uint32_t total = static_cast<uint32_t>(topology.size());
  const size_t elem = dtypeSize(call.dtype);
  auto* mine = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  auto share = [&](int r, size_t offset) {
    return out + (static_cast<size_t>(r) * call.count + offset) * elem;
  };
  const bool inPlace = mine == share(rank, 0);

  // Phase 1: the ring of local index `local` across hosts (this rank at place `host`).
  {
    const std::vector<int> cross = topology.crossHostGroup(local);
    auto member = [&](int k) { return cross[static_cast<size_t>((host - k + hosts) % hosts)]; };
    Primitives prims(linked(base, pipes, member(1), member(hosts - 1)), call, total);
    forEachSlice(call.count, prims.sliceElems(), [&](size_t offset, size_t len) {
      prims.send(mine + offset * elem, len);
      if (base.moveBytes && !inPlace && len > 0) {
        std::memcpy(share(rank, offset), mine + offset * elem, len * elem);
      }
      for (int j = 1; j < hosts - 1; ++j) prims.recvCopySend(share(member(j), offset), len);
      prims.recv(share(member(hosts - 1), offset), len);
    });
    prims.flush();
  }
  // Phase 2: the host's ring; member i's block is the H shares of local index i.
  {
    auto member = [&](int k) { return (local - k + perHost) % perHost; };  // a local index
    auto rankAt = [&](int localIndex, int h) {
      return topology.hosts[static_cast<size_t>(h)][static_cast<size_t>(localIndex)];
    };
    Primitives prims(linked(base, pipes, localRanks[static_cast<size_t>(member(1))],
                            localRanks[static_cast<size_t>(member(perHost - 1))]),
                     call, total);
    forEachSlice(call.count, prims.sliceElems(), [&](size_t offset, size_t len) {
      for (int h = 0; h < hosts; ++h) {
        prims.send(share(rankAt(local, h), offset), len);
        for (int j = 1; j < perHost - 1; ++j) {
          prims.recvCopySend(share(rankAt(member(j), h), offset), len);
        }
        prims.recv(share(rankAt(member(perHost - 1), h), offset), len);
      }
    });
    prims.flush();
  }
}

}  // namespace gyre
