#include "collectives/topology_choice.h"

#include <algorithm>
#include <vector>

#include "collectives/double_tree.h"
#include "collectives/recursive_doubling.h"

namespace gyre {
namespace {

int floorLog2(int n) {
  int d = 0;
  while ((2 << d) <= n) ++d;
  return d;
}

// Inter-host constants, measured between network namespaces over veth links shaped by
// tbf (tools/netns_bench.sh, 2026-12-01, 2 cores shared, load ~15): alpha from the 8-byte
// times across 4 hosts x 1 rank (tree 165-478 us / 6 steps, ring 788-1376 us / 6: 27-230 us
// per step; 60 taken); bytesPerUs of the host link: the ring's busiest link at 1-4 MiB
// on 2 Gbit/s (6.2 ms for 1.5 MiB, 26 ms for 6 MiB: 240-250 B/us). Only the latency /
// bandwidth crossover depends on them; between ring, tree and hier at large sizes the
// bytes on the busiest link decide.
constexpr double kInterAlphaUs = 60.0;
constexpr double kInterBytesPerUs = 240.0;

// Per-host bytes out and in; the larger of the two over all hosts.
struct HostLoad {
  std::vector<double> out, in;
  explicit HostLoad(int hosts) : out(hosts, 0.0), in(hosts, 0.0) {}
  void edge(const HostTopology& t, int from, int to, double bytes) {
    if (t.hostOf[from] == t.hostOf[to]) return;
    out[t.hostOf[from]] += bytes;
    in[t.hostOf[to]] += bytes;
  }
  double busiest() const {
    double m = 0;
    for (size_t h = 0; h < out.size(); ++h) m = std::max({m, out[h], in[h]});
    return m;
  }
};

}  // namespace

TwoLevelCost twoLevelCost(bool intraShm) {
  TwoLevelCost c;
  c.intra = linkCost(intraShm);
  c.inter = linkCost(false);
  c.inter.alphaUs = kInterAlphaUs;
  c.inter.bytesPerUs = kInterBytesPerUs;
  return c;
}

double busiestHostLinkBytes(AllReduceAlgo algo, size_t bytes, const HostTopology& t) {
  const int n = t.size();
  const double s = static_cast<double>(bytes);
  HostLoad load(t.hostCount());
  switch (algo) {
    case AllReduceAlgo::kRing:
      for (int r = 0; r < n; ++r) load.edge(t, r, (r + 1) % n, 2.0 * (n - 1) / n * s);
      break;
    case AllReduceAlgo::kTree:
      for (int r = 0; r < n; ++r) {
        const DoubleTree dt = doubleBinaryTree(r, n);
        for (const TreeLinks& links : dt.tree) {
          if (links.parent < 0) continue;
          load.edge(t, r, links.parent, s / 2);  // up: this tree's half
          load.edge(t, links.parent, r, s / 2);  // down
        }
      }
      break;
    case AllReduceAlgo::kRecursiveDoubling:
      for (int r = 0; r < n; ++r) {
        for (int peer : recursiveDoublingPeers(r, n)) load.edge(t, r, peer, s);
      }
      break;
    case AllReduceAlgo::kHierarchical: {
      if (!t.hierarchical()) return busiestHostLinkBytes(AllReduceAlgo::kRing, bytes, t);
      const int hosts = t.hostCount();
      const double shard = s / t.ranksPerHost();
      for (int l = 0; l < t.ranksPerHost(); ++l) {
        const std::vector<int> group = t.crossHostGroup(l);
        for (int h = 0; h < hosts; ++h) {
          load.edge(t, group[h], group[(h + 1) % hosts], 2.0 * (hosts - 1) / hosts * shard);
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
  const double link = busiestHostLinkBytes(algo, bytes, t) / cost.inter.bytesPerUs;
  const double ringRankBytes = 2 * (n - 1) / n * s;
  const double tree = cost.intra.treeBytesRatio[std::min(t.size(), 8)];
  switch (algo) {
    case AllReduceAlgo::kRing:
      return cost.inter.alphaUs * 2 * (n - 1) +
             std::max(link, ringRankBytes / cost.intra.bytesPerUs);
    case AllReduceAlgo::kTree:
      return cost.inter.alphaUs * (2 * floorLog2(t.size()) + 2) +
             std::max(link, tree * ringRankBytes / cost.intra.bytesPerUs);
    case AllReduceAlgo::kRecursiveDoubling: {
      const int lg = floorLog2(t.size());
      const double steps = lg + ((1 << lg) != t.size() ? 2 : 0);
      return cost.inter.alphaUs * steps + std::max(link, steps * s / cost.intra.bytesPerUs);
    }
    case AllReduceAlgo::kHierarchical: {
      if (!t.hierarchical()) return predictTopologyMicros(AllReduceAlgo::kRing, bytes, t, cost);
      const double l = t.ranksPerHost();
      const double h = t.hostCount();
      // Every step at the inter-host alpha, as for the flat algorithms: measured on 2 x 4
      // ranks (2 cores), 8 B took 280-716 us for hier's 8 steps (35-90 us each), the shm
      // table's 2 us per step (4 ranks on one host) would make it look cheaper than rd.
      const double steps = 2 * (l - 1) + 2 * (h - 1);
      return cost.inter.alphaUs * steps + 2 * (l - 1) / l * s / cost.intra.bytesPerUs +
             std::max(link, 2 * (h - 1) / h * s / l / cost.intra.bytesPerUs);
    }
    case AllReduceAlgo::kAuto: break;  // a setting, never a chosen algorithm
  }
  return 0;
}

AllReduceAlgo chooseForTopology(const Options& options, size_t bytes, const HostTopology& t,
                                bool allShm, bool intraShm) {
  if (options.algo == AllReduceAlgo::kHierarchical) {
    return t.hierarchical() ? AllReduceAlgo::kHierarchical : AllReduceAlgo::kRing;
  }
  if (t.hostCount() < 2 || options.algo != AllReduceAlgo::kAuto) {
    return chooseAllReduce(options, bytes, t.size(), allShm);
  }
  const TwoLevelCost cost = twoLevelCost(intraShm);
  AllReduceAlgo best = AllReduceAlgo::kRing;
  double bestUs = predictTopologyMicros(best, bytes, t, cost);
  for (AllReduceAlgo a : {AllReduceAlgo::kTree, AllReduceAlgo::kRecursiveDoubling,
                          AllReduceAlgo::kHierarchical}) {
    if (a == AllReduceAlgo::kRecursiveDoubling &&
        !recursiveDoublingFits(bytes, options.slotBytes)) {
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
