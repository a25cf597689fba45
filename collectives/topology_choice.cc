#include "collectives/topology_choice.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "collectives/double_tree.h"
#include "collectives/recursive_doubling.h"
#include "collectives/schedule_math.h"

namespace gyre {
namespace {

// The slice the tree cuts at most (tree_allreduce.cc) and the pipelined hierarchical
// form's threshold assumes: the default slot where some pipes are shm.
constexpr double kPipelineSlotBytes = Options::kSlotBytes;

// Per-NIC bytes out and in over the edges that cross hosts; the larger of the two over
// all NICs. A host's NIC k carries its local ranks k, k + N, k + 2N, ...
struct HostLoad {
  const HostTopology& t;
  int nics;
  std::vector<double> out, in;
  HostLoad(const HostTopology& topology, int nicsPerHost)
      : t(topology),
        nics(std::max(1, nicsPerHost)),
        out(static_cast<size_t>(topology.hostCount()) * nics, 0.0),
        in(out.size(), 0.0) {}
  size_t nicOf(int rank) const {
    return static_cast<size_t>(t.hostOf[rank]) * nics + t.localIndexOf[rank] % nics;
  }
  void edge(int from, int to, double bytes) {
    if (t.hostOf[from] == t.hostOf[to]) return;
    out[nicOf(from)] += bytes;
    in[nicOf(to)] += bytes;
  }
  double busiest() const {
    double m = 0;
    for (size_t h = 0; h < out.size(); ++h) m = std::max({m, out[h], in[h]});
    return m;
  }
};

// The latency of a chain of hops: each hop charged the alpha of its kind (inside a host
// the intra table's, across hosts the inter one's): charging every hop the inter alpha
// would make the ring (7 of 8 hops inside a host at 8 ranks per host) and hier's host
// phases look 5-10x slower in latency than they run.
double hopAlpha(const HostTopology& t, const TwoLevelCost& c, int from, int to) {
  return t.hostOf[from] == t.hostOf[to] ? c.intra.alphaUs : c.inter.alphaUs;
}

// The mean alpha of the ring's hops r -> r + 1.
double ringHopAlpha(const HostTopology& t, const TwoLevelCost& c) {
  const int n = t.size();
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += hopAlpha(t, c, r, (r + 1) % n);
  return sum / n;
}

// The double tree's critical chain: the path from its deepest rank up to the root (tree
// 0; tree 1 mirrors it), which a slice climbs and then descends. Its summed alpha and
// how many of its hops cross hosts: near the leaves the hops stay inside a host, near
// the root they cross, so the mean over all edges would undercount the crossings.
struct TreePath {
  double alpha = 0;  // one way
  int hops = 0;
  int crossings = 0;
};
TreePath treePath(const HostTopology& t, const TwoLevelCost& c) {
  const int n = t.size();
  int deepest = 0, depth = -1;
  for (int r = 0; r < n; ++r) {
    const int d = doubleBinaryTree(r, n).tree[0].depth;
    if (d > depth) {
      depth = d;
      deepest = r;
    }
  }
  TreePath path;
  for (int r = deepest, guard = 0; guard < n; ++guard) {  // a path has < n hops
    const int parent = doubleBinaryTree(r, n).tree[0].parent;
    if (parent < 0) break;
    path.alpha += hopAlpha(t, c, r, parent);
    path.crossings += t.hostOf[r] != t.hostOf[parent];
    ++path.hops;
    r = parent;
  }
  return path;
}

// Recursive doubling's exchanges as rank 0 makes them (every rank's partners sit alike
// on equal hosts): the fold partner twice (in and out), then each xor partner.
double rdChainAlpha(const HostTopology& t, const TwoLevelCost& c) {
  const int n = t.size();
  const int p = lowerPowerOfTwo(n);
  double sum = p < n ? 2 * hopAlpha(t, c, 0, p) : 0;
  for (int mask = 1; mask < p; mask <<= 1) sum += hopAlpha(t, c, 0, mask);
  return sum;
}

}  // namespace

TwoLevelCost twoLevelCost(bool intraShm, int nicsPerHost) {
  TwoLevelCost c;
  c.nicsPerHost = std::max(1, nicsPerHost);
  c.intra = linkCost(intraShm);
  c.inter = linkCost(false);
  c.inter.alphaUs = kTuning.interAlphaUs;
  c.inter.bytesPerUs = kTuning.interBytesPerUs;
  return c;
}

TwoLevelCost twoLevelCost(bool intraShm, double interAlphaUs, double interBytesPerUs,
                          int nicsPerHost) {
  TwoLevelCost c = twoLevelCost(intraShm, nicsPerHost);
  c.measured = interAlphaUs > 0 && interBytesPerUs > 0;
  if (c.measured) {
    c.inter.alphaUs = interAlphaUs;
    c.inter.bytesPerUs = interBytesPerUs;
  }
  return c;
}

double busiestHostLinkBytes(AllReduceAlgo algo, size_t bytes, const HostTopology& t,
                            int nicsPerHost) {
  const int n = t.size();
  const double s = static_cast<double>(bytes);
  HostLoad load(t, nicsPerHost);
  switch (algo) {
    case AllReduceAlgo::kRing:
      for (int r = 0; r < n; ++r) load.edge(r, (r + 1) % n, 2.0 * (n - 1) / n * s);
      break;
    case AllReduceAlgo::kTree:
      for (int r = 0; r < n; ++r) {
        const DoubleTree dt = doubleBinaryTree(r, n);
        for (const TreeLinks& links : dt.tree) {
          if (links.parent < 0) continue;
          load.edge(r, links.parent, s / 2);  // up: this tree's half
          load.edge(links.parent, r, s / 2);  // down
        }
      }
      break;
    case AllReduceAlgo::kRecursiveDoubling:
      for (int r = 0; r < n; ++r) {
        for (int peer : recursiveDoublingPeers(r, n)) load.edge(r, peer, s);
      }
      break;
    case AllReduceAlgo::kHierarchical: {
      if (!t.hierarchical()) {
        return busiestHostLinkBytes(AllReduceAlgo::kRing, bytes, t, nicsPerHost);
      }
      const int hosts = t.hostCount();
      if (!t.even()) {  // the leaders-only form: one ring of the leaders on the whole buffer
        const std::vector<int> leaders = t.leaders();
        for (int h = 0; h < hosts; ++h) {
          load.edge(leaders[h], leaders[(h + 1) % hosts], 2.0 * (hosts - 1) / hosts * s);
        }
        break;
      }
      const double shard = s / t.ranksPerHost();
      for (int l = 0; l < t.ranksPerHost(); ++l) {
        const std::vector<int> group = t.crossHostGroup(l);
        for (int h = 0; h < hosts; ++h) {
          load.edge(group[h], group[(h + 1) % hosts], 2.0 * (hosts - 1) / hosts * shard);
        }
      }
      break;
    }
    case AllReduceAlgo::kAuto: break;  // a setting, never a chosen algorithm
  }
  return load.busiest();
}

double predictTopologyMicros(AllReduceAlgo algo, size_t bytes, const HostTopology& t,
                             const TwoLevelCost& cost) {
  const double n = t.size();
  const double s = static_cast<double>(bytes);
  const double link =
      busiestHostLinkBytes(algo, bytes, t, cost.nicsPerHost) / cost.inter.bytesPerUs;
  const double ringRankBytes = 2 * (n - 1) / n * s;
  const double tree = cost.intra.treeBytesRatio[std::min(t.size(), 8)];
  switch (algo) {
    case AllReduceAlgo::kRing:
      return ringHopAlpha(t, cost) * 2 * (n - 1) +
             std::max(link, ringRankBytes / cost.intra.bytesPerUs);
    case AllReduceAlgo::kTree: {
      // The pipeline's fill: a slice climbs floor(log2 n) hops and comes down as many
      // before the first one is done, each hop moving a whole slice (one slot, or the
      // half-buffer when smaller), reduced by the CPU and, on cross edges, over the
      // link. Measured in gyre-sim: with one slice per tree the tree takes 2-3x its
      // bytes term (8 x 8 at 256 KiB: 773-1168 us against the model's 320).
      const TreePath path = treePath(t, cost);
      const double slice = std::min(s / 2, kPipelineSlotBytes);
      const double fillUs = 2 * (path.hops * slice / cost.intra.bytesPerUs +
                                 path.crossings * slice / cost.inter.bytesPerUs);
      // 2 floor(log2 n) + 2 steps: up and down the path, and the pipeline's two extra.
      const double meanAlpha = path.hops > 0 ? path.alpha / path.hops : cost.inter.alphaUs;
      return 2 * path.alpha + 2 * meanAlpha + fillUs +
             std::max(link, tree * ringRankBytes / cost.intra.bytesPerUs);
    }
    case AllReduceAlgo::kRecursiveDoubling: {
      const int lg = floorLog2(t.size());
      const double steps = lg + ((1 << lg) != t.size() ? 2 : 0);
      return rdChainAlpha(t, cost) + std::max(link, steps * s / cost.intra.bytesPerUs);
    }
    case AllReduceAlgo::kHierarchical: {
      if (!t.hierarchical()) return predictTopologyMicros(AllReduceAlgo::kRing, bytes, t, cost);
      const double h = t.hostCount();
      // Host steps at the intra alpha, link steps at the inter one (hopAlpha). On the
      // loaded 2-core VM a shm step cost as much as a tcp one (2 x 4: 8 B took 280-716 us
      // for hier's 8 steps); there rd (2 shm exchanges + 1 tcp) stays cheaper at 8 B all
      // the same.
      if (!t.even()) {
        // Leaders-only: two chains of maxL - 1 hops over shm (each rank moves S per
        // chain), the leaders' ring across hosts on the whole buffer.
        const double l = t.maxRanksPerHost();
        const double latency = 2 * (l - 1) * cost.intra.alphaUs + 2 * (h - 1) * cost.inter.alphaUs;
        return latency + 2 * s / cost.intra.bytesPerUs +
               std::max(link, 2 * (h - 1) / h * s / cost.intra.bytesPerUs);
      }
      const double l = t.ranksPerHost();
      const double latency = 2 * (l - 1) * cost.intra.alphaUs + 2 * (h - 1) * cost.inter.alphaUs;
      const double intraUs = 2 * (l - 1) / l * s / cost.intra.bytesPerUs;
      const double interUs = std::max(link, 2 * (h - 1) / h * s / l / cost.intra.bytesPerUs);
      // Pipelined over pieces (hierarchical_allreduce.cc) above 2 default slots per
      // local rank: the host's phases run while the link carries the previous piece,
      // so the slower of the two counts, plus the first reduce-scatter and the last
      // all-gather (about 1/8 of the other). Below: one phase after the other.
      if (s > 2 * l * kPipelineSlotBytes) {
        // Each piece's ring across hosts is a chain of 2(H-1) link hops of its own, one
        // piece after the other (pieceElems in hierarchical_allreduce.cc: at most 8, each
        // at least 2 slots per local rank), while the host phases of the neighbouring
        // pieces run between its passes: the chains count with the link's time.
        // gyre-sim at 128 x 8 on 16 MiB: hier 36 ms against the tree's 17, which the
        // model without this term ranked the other way round.
        const double pieces = std::ceil(s / std::max(s / 8, 2 * l * kPipelineSlotBytes));
        const double chainsUs = (pieces - 1) * 2 * (h - 1) * cost.inter.alphaUs;
        const double acrossUs = interUs + chainsUs;
        return latency + std::max(intraUs, acrossUs) + std::min(intraUs, acrossUs) / 8;
      }
      return latency + intraUs + interUs;
    }
    case AllReduceAlgo::kAuto: break;  // a setting, never a chosen algorithm
  }
  return 0;
}

AllReduceAlgo chooseForTopology(const Options& options, size_t bytes, const HostTopology& t,
                                bool allShm, bool intraShm) {
  return chooseForTopology(options, bytes, t, allShm, twoLevelCost(intraShm));
}

AllReduceAlgo chooseForTopology(const Options& options, size_t bytes, const HostTopology& t,
                                bool allShm, const TwoLevelCost& cost) {
  if (options.algo == AllReduceAlgo::kHierarchical) {
    return t.hierarchical() ? AllReduceAlgo::kHierarchical : AllReduceAlgo::kRing;
  }
  if (t.hostCount() < 2 || options.algo != AllReduceAlgo::kAuto) {
    return chooseAllReduce(options, bytes, t.size(), allShm);
  }
  AllReduceAlgo best = AllReduceAlgo::kRing;
  double bestUs = predictTopologyMicros(best, bytes, t, cost);
  for (AllReduceAlgo a : {AllReduceAlgo::kTree, AllReduceAlgo::kRecursiveDoubling,
                          AllReduceAlgo::kHierarchical}) {
    if (a == AllReduceAlgo::kRecursiveDoubling &&
        !recursiveDoublingFits(bytes, options.smallestSlotBytes())) {
      continue;
    }
    if (a == AllReduceAlgo::kHierarchical && !t.hierarchical()) continue;
    const double us = predictTopologyMicros(a, bytes, t, cost);
    if (us < bestUs) {
      best = a;
      bestUs = us;
    }
  }
  return best;
}

}  // namespace gyre

namespace gyre {
namespace {

// Edges of the flat ring (r -> r+1) or of the host-ordered chain from `root` (without
// the empty closing slice's edge back to the root), each carrying `bytes`.
double chainLinkBytes(bool twoLevel, size_t bytes, int root, const HostTopology& t,
                      int nicsPerHost) {
  const int n = t.size();
  HostLoad load(t, nicsPerHost);
  const double s = static_cast<double>(bytes);
  if (twoLevel) {
    const std::vector<int> order = t.hostOrderFrom(root);
    for (int i = 0; i + 1 < n; ++i) load.edge(order[i], order[i + 1], s);
  } else {
    for (int k = 0; k + 1 < n; ++k) load.edge((root + k) % n, (root + k + 1) % n, s);
  }
  return load.busiest();
}

}  // namespace

double predictCollectiveMicros(CollectiveKind kind, bool twoLevel, size_t bytes, int root,
                               const HostTopology& t, const TwoLevelCost& cost) {
  const double n = t.size();
  const double s = static_cast<double>(bytes);
  if (kind == CollectiveKind::kAllGather) {  // bytes: one rank's share
    if (!twoLevel) {
      HostLoad load(t, cost.nicsPerHost);
      for (int r = 0; r < t.size(); ++r) load.edge(r, (r + 1) % t.size(), (n - 1) * s);
      return cost.inter.alphaUs * (n - 1) +
             std::max(load.busiest() / cost.inter.bytesPerUs, (n - 1) * s / cost.intra.bytesPerUs);
    }
    const double h = t.hostCount();
    const double l = t.ranksPerHost();
    // Every local index's ring across hosts carries H - 1 shares over each edge.
    HostLoad load(t, cost.nicsPerHost);
    for (int i = 0; i < t.ranksPerHost(); ++i) {
      const std::vector<int> group = t.crossHostGroup(i);
      for (size_t k = 0; k < group.size(); ++k) {
        load.edge(group[k], group[(k + 1) % group.size()], (h - 1) * s);
      }
    }
    const double link = load.busiest();
    return cost.inter.alphaUs * ((h - 1) + (l - 1)) +
           std::max(link / cost.inter.bytesPerUs, (h - 1) * s / cost.intra.bytesPerUs) +
           (l - 1) * h * s / cost.intra.bytesPerUs;
  }
  // Broadcast and reduce: a pipelined chain of n - 1 hops carrying the buffer.
  return cost.inter.alphaUs * (n - 1) +
         std::max(chainLinkBytes(twoLevel, bytes, root, t, cost.nicsPerHost) /
                      cost.inter.bytesPerUs,
                  s / cost.intra.bytesPerUs);
}

bool chooseTwoLevel(const Options& options, CollectiveKind kind, size_t bytes, int root,
                    const HostTopology& t, const TwoLevelCost& cost) {
  const bool applies = kind == CollectiveKind::kAllGather ? t.evenHierarchical()
                                                          : t.hierarchical();
  if (!applies || (kind != CollectiveKind::kAllGather && kind != CollectiveKind::kBroadcast &&
                   kind != CollectiveKind::kReduce)) {
    return false;
  }
  if (options.algo == AllReduceAlgo::kHierarchical) return true;
  if (options.algo != AllReduceAlgo::kAuto) return false;
  // Strictly cheaper by 2%: equal predictions (consecutive hosts' broadcast) keep the
  // flat ring, whose schedule is the one every other path has run longest.
  return predictCollectiveMicros(kind, true, bytes, root, t, cost) <
         0.98 * predictCollectiveMicros(kind, false, bytes, root, t, cost);
}

uint8_t callAlgorithm(const Options& options, const CollectiveCall& call,
                      const HostTopology& topology, bool allShm, const TwoLevelCost& cost) {
  const size_t bytes = call.count * dtypeSize(call.dtype);
  if (call.kind == CollectiveKind::kAllReduce || call.kind == CollectiveKind::kBarrier) {
    return static_cast<uint8_t>(chooseForTopology(options, bytes, topology, allShm, cost));
  }
  if (chooseTwoLevel(options, call.kind, bytes, call.root, topology, cost)) {
    return static_cast<uint8_t>(AllReduceAlgo::kHierarchical);  // the two-level form
  }
  return 0;
}

}  // namespace gyre
