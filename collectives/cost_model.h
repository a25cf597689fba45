// What the all-reduce cost model is made of, shared by every algorithm's row (its fits()
// and predictions, in the algorithm's own file: collective_table.h lists them) and by the
// choice over the rows (algorithm_choice.h on one host, topology_choice.h across hosts):
// the constants of a two-level machine, where a call would run, the bytes each NIC
// carries over the edges that cross hosts, and the alpha of one hop.
//
// Two models, by where the ranks are:
//   one host      alpha * steps + bytes / bytesPerUs, one LinkCost for the ranks'
//                 transport (collectives/tuning.h)
//   several hosts the alpha summed along the algorithm's critical chain of hops, each at
//                 its kind's alpha, plus max(busiest NIC's bytes / inter rate, busiest
//                 rank's bytes / intra rate), plus the algorithm's own terms
//                 (topology_choice.h)
//
// Contract: plain values and pure functions; any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "transport/transport_options.h"
#include "collectives/host_topology.h"
#include "collectives/tuning.h"

namespace gyre {

struct TwoLevelCost {
  LinkCost intra;  // between ranks of one host
  LinkCost inter;  // alphaUs per hop between hosts, bytesPerUs of one host's link
  bool measured = false;  // inter from the creation probe (collectives/link_probe.h)
  int nicsPerHost = 1;    // GYRE_NICS_PER_HOST: NICs a host's cross-host bytes spread over
};

// Where an all-reduce would run, as an algorithm's fits() judges it.
struct AllReducePlace {
  size_t bytes;
  int size;                                // ranks, >= 2
  size_t slotBytes;                        // TransportOptions::smallestSlotBytes()
  const HostTopology* topology = nullptr;  // null: every rank on one host
};

// The slice the tree cuts at most (tree_allreduce.cc) and the pipelined hierarchical
// form's threshold assume: the default slot where some pipes are shm.
inline constexpr double kPipelineSlotBytes = TransportOptions::kSlotBytes;

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

// The alpha of one hop: inside a host the intra row's, across hosts the inter one's
// (charging every hop the inter alpha would make the ring, 7 of 8 hops inside a host at
// 8 ranks a host, and hier's host phases look 5-10x slower in latency than they run).
inline double hopAlpha(const HostTopology& t, const TwoLevelCost& c, int from, int to) {
  return t.hostOf[from] == t.hostOf[to] ? c.intra.alphaUs : c.inter.alphaUs;
}

}  // namespace gyre
