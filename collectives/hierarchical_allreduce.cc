#include "collectives/hierarchical_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "collectives/collective_table.h"
#include "collectives/cost_model.h"
#include "collectives/schedule_math.h"

namespace gyre {
namespace {

// A ring over `members` (this rank is members[me]), on a region of `count` elements cut
// into members.size() chunks as ringAllReduce cuts its buffer.
class GroupRing {
 public:
  GroupRing(const PrimitiveContext& base, const PeerPipes& pipes, const std::vector<int>& members,
            int me, const CollectiveCall& call, uint32_t avgDivisor, size_t count)
      : g_(static_cast<int>(members.size())),
        me_(me),
        count_(count),
        chunkElems_((count + members.size() - 1) / members.size()),
        elem_(dtypeSize(call.dtype)),
        prims_(linked(base, pipes, members[(me + g_ - 1) % g_], members[(me + 1) % g_]), call,
               avgDivisor) {}

  size_t chunkElems() const { return chunkElems_; }
  size_t slice() const { return prims_.sliceElems(); }
  Primitives& prims() { return prims_; }
  int chunk(int k) const { return (me_ + k) % g_; }  // the k-th member to our right
  int size() const { return g_; }
  int me() const { return me_; }

  // Chunk c's slice at `offset` into the chunk: its first element and its length.
  size_t at(int c, size_t offset, size_t* begin) const {
    const size_t chunkBegin = std::min(count_, static_cast<size_t>(c) * chunkElems_);
    const size_t chunkEnd = std::min(count_, chunkBegin + chunkElems_);
    *begin = std::min(chunkEnd, chunkBegin + offset);
    return std::min(slice(), chunkEnd - *begin);
  }
  size_t bytes(size_t elems) const { return elems * elem_; }
  // Chunk c as a whole: its first element and its length.
  size_t chunkRange(int c, size_t* begin) const {
    *begin = std::min(count_, static_cast<size_t>(c) * chunkElems_);
    return std::min(count_, *begin + chunkElems_) - *begin;
  }

 private:
  int g_;
  int me_;
  size_t count_;
  size_t chunkElems_;
  size_t elem_;
  Primitives prims_;
};

// Each phase is a number of passes (one slice of every chunk one hop round the ring,
// as ringAllReduce's loop body), so the pipelined form can interleave them.
size_t passes(const GroupRing& ring) {
  return std::max<size_t>(1, (ring.chunkElems() + ring.slice() - 1) / ring.slice());
}

// Phase 1: chunk me of `out` = the group's sum of chunk me of `in` (avg not divided).
void reduceScatterPass(GroupRing& ring, const std::byte* in, std::byte* out, size_t offset) {
  Primitives& p = ring.prims();
  p.phase("host reduce-scatter");
  const int g = ring.size();
  size_t b;
  size_t len = ring.at(ring.chunk(g - 1), offset, &b);
  p.send(in + ring.bytes(b), len);
  for (int j = 2; j < g; ++j) {
    len = ring.at(ring.chunk(g - j), offset, &b);
    p.recvReduceSend(in + ring.bytes(b), len);
  }
  len = ring.at(ring.me(), offset, &b);
  p.recvReduce(in + ring.bytes(b), out + ring.bytes(b), len, /*receivedIsLower=*/true,
               /*finalStep=*/false);
}

// Phase 2: ringAllReduce's schedule over the group, in place on `buf`; the final
// reduction applies avg's division (by the whole communicator's size). A pass is its
// first send, then the rest (the pipelined form does other work in between, while
// that slice crosses the host link).
void allReduceFirstSend(GroupRing& ring, std::byte* buf, size_t offset) {
  ring.prims().phase("cross-host all-reduce");
  size_t b;
  const size_t len = ring.at(ring.chunk(ring.size() - 1), offset, &b);
  ring.prims().send(buf + ring.bytes(b), len);
}

void allReduceRest(GroupRing& ring, std::byte* buf, size_t offset) {
  Primitives& p = ring.prims();
  p.phase("cross-host all-reduce");
  const int g = ring.size();
  size_t b;
  size_t len;
  for (int j = 2; j < g; ++j) {
    len = ring.at(ring.chunk(g - j), offset, &b);
    p.recvReduceSend(buf + ring.bytes(b), len);
  }
  len = ring.at(ring.me(), offset, &b);
  p.recvReduceCopySend(buf + ring.bytes(b), buf + ring.bytes(b), len);
  for (int j = 1; j < g - 1; ++j) {
    len = ring.at(ring.chunk(g - j), offset, &b);
    p.recvCopySend(buf + ring.bytes(b), len);
  }
  len = ring.at(ring.chunk(1), offset, &b);
  p.recv(buf + ring.bytes(b), len);
}

// Phase 3: every member's final chunk of `out` to every member.
void allGatherPass(GroupRing& ring, std::byte* out, size_t offset) {
  Primitives& p = ring.prims();
  p.phase("host all-gather");
  const int g = ring.size();
  size_t b;
  size_t len = ring.at(ring.me(), offset, &b);
  p.send(out + ring.bytes(b), len);
  for (int j = 1; j < g - 1; ++j) {
    len = ring.at(ring.chunk(g - j), offset, &b);
    p.recvCopySend(out + ring.bytes(b), len);
  }
  len = ring.at(ring.chunk(1), offset, &b);
  p.recv(out + ring.bytes(b), len);
}

void reduceScatter(GroupRing& ring, const std::byte* in, std::byte* out) {
  for (size_t k = 0; k < passes(ring); ++k) reduceScatterPass(ring, in, out, k * ring.slice());
  ring.prims().flush();
}

void allReduceInPlace(GroupRing& ring, std::byte* buf) {
  for (size_t k = 0; k < passes(ring); ++k) {
    allReduceFirstSend(ring, buf, k * ring.slice());
    allReduceRest(ring, buf, k * ring.slice());
  }
  ring.prims().flush();
}

void allGather(GroupRing& ring, std::byte* out) {
  for (size_t k = 0; k < passes(ring); ++k) allGatherPass(ring, out, k * ring.slice());
  ring.prims().flush();
}

// The leaders-only form's phase 1: the host's sum of `in` at member 0's `out`, along the
// chain 1 -> 2 -> ... -> L-1 -> 0 (the ring's direction; pipe 0 -> 1 is phase 3's).
void chainReduceToFirst(GroupRing& ring, const std::byte* in, std::byte* out, size_t count) {
  Primitives& p = ring.prims();
  p.phase("host reduce to leader");
  const int me = ring.me();
  forEachSlice(count, ring.slice(), [&](size_t offset, size_t len) {
    const size_t at = ring.bytes(offset);
    if (me == 1) {
      p.send(in + at, len);
    } else if (me == 0) {
      p.recvReduce(in + at, out + at, len, /*receivedIsLower=*/false, /*finalStep=*/false);
    } else {
      p.recvReduceSend(in + at, len);
    }
  });
  p.flush();
}

// Its phase 3: member 0's `buf` to every member, along 0 -> 1 -> ... -> L-1.
void chainBroadcastFromFirst(GroupRing& ring, std::byte* buf, size_t count) {
  Primitives& p = ring.prims();
  p.phase("host broadcast from leader");
  const int g = ring.size();
  const int me = ring.me();
  forEachSlice(count, ring.slice(), [&](size_t offset, size_t len) {
    std::byte* at = buf + ring.bytes(offset);
    if (me == 0) {
      p.send(at, len);
    } else if (me == g - 1) {
      p.recv(at, len);
    } else {
      p.recvCopySend(at, len);
    }
  });
  p.flush();
}

// Unequal hosts (3 + 1, 3 + 2 + 1): each host's sum at its leader (a chain over shm),
// a ring of the leaders across hosts on the whole buffer (each host link carries
// 2(H-1)/H of it, as the shard-parallel form), the result down each host's chain.
void leadersAllReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                      const HostTopology& topology, int rank, const CollectiveCall& call,
                      const std::byte* in, std::byte* out) {
  const uint32_t total = static_cast<uint32_t>(topology.size());
  const int host = topology.hostOf[rank];
  const int local = topology.localIndexOf[rank];
  const std::vector<int>& localRanks = topology.hosts[host];
  const size_t bytes = call.count * dtypeSize(call.dtype);
  const bool alone = localRanks.size() == 1;
  if (alone) {
    if (base.moveBytes && in != out && bytes > 0) std::memcpy(out, in, bytes);
  } else {
    GroupRing inside(base, pipes, localRanks, local, call, total, call.count);
    chainReduceToFirst(inside, in, out, call.count);
  }
  if (local == 0) {
    GroupRing across(base, pipes, topology.leaders(), host, call, total, call.count);
    allReduceInPlace(across, out);
  }
  if (!alone) {
    GroupRing inside(base, pipes, localRanks, local, call, total, call.count);
    chainBroadcastFromFirst(inside, out, call.count);
  }
}

// Elements per piece of the pipelined form: at least 2 slices per local rank's chunk
// (fewer and the interleaving has nothing to hide behind), at most 8 pieces.
size_t pieceElems(size_t count, size_t perHost, size_t slice) {
  return std::max((count + 7) / 8, 2 * perHost * slice);
}

// The shard-parallel form pipelined over pieces of the buffer: piece c's all-reduce
// across hosts runs interleaved, pass by pass, with the all-gather of piece c - 1 and
// the reduce-scatter of piece c + 1 inside the host, each cross-host pass split after
// its first send so that the shm work runs while that slice crosses the link. Every
// rank runs the same sequence of passes (a rank with a shorter shard skips the cross
// passes it lacks), and each receive matches a send made earlier in that sequence by
// its peer, so the interleaving cannot deadlock, as the flat phases cannot. The host
// pipes' sends are flushed before a piece's all-gather writes where the reduce-scatter
// may still send from (in place), the cross pipes' before returning.
void pipelinedAllReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                        const HostTopology& topology, int rank, const CollectiveCall& call,
                        const std::byte* in, std::byte* out, size_t piece) {
  const uint32_t total = static_cast<uint32_t>(topology.size());
  const int host = topology.hostOf[rank];
  const int local = topology.localIndexOf[rank];
  const std::vector<int>& localRanks = topology.hosts[host];
  const std::vector<int> cross = topology.crossHostGroup(local);
  const size_t elem = dtypeSize(call.dtype);
  const size_t pieces = (call.count + piece - 1) / piece;
  std::vector<GroupRing> inside, across;
  std::vector<size_t> shardAt;  // byte offset of this rank's shard within the buffer
  inside.reserve(pieces);
  across.reserve(pieces);
  for (size_t c = 0; c < pieces; ++c) {
    const size_t len = std::min(piece, call.count - c * piece);
    inside.emplace_back(base, pipes, localRanks, local, call, total, len);
    size_t shardBegin;
    const size_t shardElems = inside.back().chunkRange(local, &shardBegin);
    across.emplace_back(base, pipes, cross, host, call, total, shardElems);
    shardAt.push_back((c * piece + shardBegin) * elem);
  }
  auto at = [&](size_t c) { return c * piece * elem; };
  auto rs = [&](size_t c, size_t k) {
    if (k < passes(inside[c])) {
      reduceScatterPass(inside[c], in + at(c), out + at(c), k * inside[c].slice());
    }
  };
  auto ag = [&](size_t c, size_t k) {
    if (k < passes(inside[c])) allGatherPass(inside[c], out + at(c), k * inside[c].slice());
  };
  for (size_t k = 0; k < passes(inside[0]); ++k) rs(0, k);
  for (size_t c = 0; c < pieces; ++c) {
    inside[0].prims().flush();  // the host pipes: every piece's rings share them
    size_t steps = passes(across[c]);
    if (c > 0) steps = std::max(steps, passes(inside[c - 1]));
    if (c + 1 < pieces) steps = std::max(steps, passes(inside[c + 1]));
    for (size_t k = 0; k < steps; ++k) {
      const bool crossPass = k < passes(across[c]);
      if (crossPass) allReduceFirstSend(across[c], out + shardAt[c], k * across[c].slice());
      if (c > 0) ag(c - 1, k);
      if (c + 1 < pieces) rs(c + 1, k);
      if (crossPass) allReduceRest(across[c], out + shardAt[c], k * across[c].slice());
    }
  }
  inside[0].prims().flush();
  for (size_t k = 0; k < passes(inside[pieces - 1]); ++k) ag(pieces - 1, k);
  inside[0].prims().flush();
  across[0].prims().flush();
}

}  // namespace

void hierarchicalAllReduce(const PrimitiveContext& base, const PeerPipes& pipes,
                           const HostTopology& topology, int rank, const CollectiveCall& call,
                           const void* sendbuf, void* recvbuf) {
  if (!topology.hierarchical() || rank < 0 || rank >= topology.size()) {
    fail(ErrorCode::kInternal, "rank {}: hierarchical all-reduce on a topology that has none ({})",
         rank, topology.describe());
  }
  auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  if (!topology.even()) return leadersAllReduce(base, pipes, topology, rank, call, in, out);
  const uint32_t total = static_cast<uint32_t>(topology.size());
  const int host = topology.hostOf[rank];
  const int local = topology.localIndexOf[rank];
  const std::vector<int>& localRanks = topology.hosts[host];
  const std::vector<int> cross = topology.crossHostGroup(local);
  const size_t piece =
      pieceElems(call.count, localRanks.size(),
                 GroupRing(base, pipes, localRanks, local, call, total, 0).slice());
  if (piece < call.count) {
    return pipelinedAllReduce(base, pipes, topology, rank, call, in, out, piece);
  }

  GroupRing inside(base, pipes, localRanks, local, call, total, call.count);
  reduceScatter(inside, in, out);

  // This rank's shard: its chunk of the local ring (the same bounds on every host).
  size_t shardBegin;
  const size_t shardElems = inside.chunkRange(local, &shardBegin);
  GroupRing across(base, pipes, cross, host, call, total, shardElems);
  allReduceInPlace(across, out + inside.bytes(shardBegin));

  allGather(inside, out);
}

namespace {

bool hierFits(const AllReducePlace& p) { return p.topology && p.topology->hierarchical(); }

// Each local index's ring across hosts carries 2(H-1)/H of its shard; the leaders-only
// form's one ring of the leaders, of the whole buffer. Not hierarchical: the ring's.
double hierHostLinkBytes(size_t bytes, const HostTopology& t, int nicsPerHost) {
  if (!t.hierarchical()) return kRingAllReduce.hostLinkBytes(bytes, t, nicsPerHost);
  const double s = static_cast<double>(bytes);
  HostLoad load(t, nicsPerHost);
  const int hosts = t.hostCount();
  if (!t.even()) {
    const std::vector<int> leaders = t.leaders();
    for (int h = 0; h < hosts; ++h) {
      load.edge(leaders[h], leaders[(h + 1) % hosts], 2.0 * (hosts - 1) / hosts * s);
    }
    return load.busiest();
  }
  const double shard = s / t.ranksPerHost();
  for (int l = 0; l < t.ranksPerHost(); ++l) {
    const std::vector<int> group = t.crossHostGroup(l);
    for (int h = 0; h < hosts; ++h) {
      load.edge(group[h], group[(h + 1) % hosts], 2.0 * (hosts - 1) / hosts * shard);
    }
  }
  return load.busiest();
}

// 2(L-1) host steps at the intra alpha and 2(H-1) link steps at the inter one; the two
// host phases and the phase across hosts one after the other, or overlapped when
// pipelined.
double hierPredict(size_t bytes, const HostTopology& t, const TwoLevelCost& cost) {
  if (!t.hierarchical()) return kRingAllReduce.predict(bytes, t, cost);
  const double s = static_cast<double>(bytes);
  const double link = hierHostLinkBytes(bytes, t, cost.nicsPerHost) / cost.inter.bytesPerUs;
  const double h = t.hostCount();
  if (!t.even()) {
    // Leaders-only: two chains of maxL - 1 hops over shm (each rank moves S per chain),
    // the leaders' ring across hosts on the whole buffer.
    const double l = t.maxRanksPerHost();
    const double latency = 2 * (l - 1) * cost.intra.alphaUs + 2 * (h - 1) * cost.inter.alphaUs;
    return latency + 2 * s / cost.intra.bytesPerUs +
           std::max(link, 2 * (h - 1) / h * s / cost.intra.bytesPerUs);
  }
  const double l = t.ranksPerHost();
  const double latency = 2 * (l - 1) * cost.intra.alphaUs + 2 * (h - 1) * cost.inter.alphaUs;
  const double intraUs = 2 * (l - 1) / l * s / cost.intra.bytesPerUs;
  const double interUs = std::max(link, 2 * (h - 1) / h * s / l / cost.intra.bytesPerUs);
  // Pipelined over pieces (pieceElems above) beyond 2 default slots per local rank: the
  // host's phases run while the link carries the previous piece, so the slower of the
  // two counts, plus the first reduce-scatter and the last all-gather (about 1/8 of the
  // other). Below: one phase after the other.
  if (s > 2 * l * kPipelineSlotBytes) {
    // Each piece's ring across hosts is a chain of 2(H-1) link hops of its own, one
    // piece after the other, while the host phases of the neighbouring pieces run
    // between its passes: the chains count with the link's time.
    const double pieces = std::ceil(s / std::max(s / 8, 2 * l * kPipelineSlotBytes));
    const double chainsUs = (pieces - 1) * 2 * (h - 1) * cost.inter.alphaUs;
    const double acrossUs = interUs + chainsUs;
    return latency + std::max(intraUs, acrossUs) + std::min(intraUs, acrossUs) / 8;
  }
  return latency + intraUs + interUs;
}

}  // namespace

constinit const AllReduceRow kHierarchicalAllReduce = {
    AllReduceAlgo::kHierarchical,
    [](const ScheduleArgs& a) {
      hierarchicalAllReduce(a.ctx, a.pipes, a.topology, a.rank, a.call, a.sendbuf, a.recvbuf);
    },
    hierFits,  // several hosts, one with >= 2 ranks
    // One host has no hierarchy: the ring over the host's links.
    [](size_t bytes, int size, const LinkCost& cost) {
      return kRingAllReduce.predictOneHost(bytes, size, cost);
    },
    hierPredict,
    hierHostLinkBytes,
};

}  // namespace gyre
