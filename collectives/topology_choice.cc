#include "collectives/topology_choice.h"

#include <algorithm>
#include <vector>

#include "collectives/collective_table.h"

namespace gyre {

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
  return allReduceRow(algo).hostLinkBytes(bytes, t, nicsPerHost);
}

double predictTopologyMicros(AllReduceAlgo algo, size_t bytes, const HostTopology& t,
                             const TwoLevelCost& cost) {
  return allReduceRow(algo).predict(bytes, t, cost);
}

AllReduceAlgo chooseForTopology(const CollectiveOptions& options, size_t bytes, const HostTopology& t,
                                bool allShm, bool intraShm) {
  return chooseForTopology(options, bytes, t, allShm, twoLevelCost(intraShm));
}

AllReduceAlgo chooseForTopology(const CollectiveOptions& options, size_t bytes, const HostTopology& t,
                                bool allShm, const TwoLevelCost& cost) {
  if (t.hostCount() < 2) return chooseAllReduce(options, bytes, t.size(), allShm);
  const AllReducePlace place{bytes, t.size(), options.smallestSlotBytes(), &t};
  return pickAllReduce(options.algo, place,
                       [&](const AllReduceRow& row) { return row.predict(bytes, t, cost); });
}

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

bool chooseTwoLevel(const CollectiveOptions& options, CollectiveKind kind, size_t bytes, int root,
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

uint8_t callAlgorithm(const CollectiveOptions& options, const CollectiveCall& call,
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
