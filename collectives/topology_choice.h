// The all-reduce choice for a communicator that spans several hosts: the cost model of
// collectives/algorithm_choice.h with a second level. Inside a host the links are the
// flat model's (shm, or tcp when GYRE_TRANSPORT=tcp); between hosts each host has
// nicsPerHost NICs (GYRE_NICS_PER_HOST; local rank i on NIC i mod N) of `inter` cost
// each, a NIC shared by every pipe of its ranks that leaves the host. Per algorithm
// (its row's predict(), in the algorithm's own file: collective_table.h), predicted
// microseconds =
//
//   latency  the algorithm's critical chain of hops, each hop at the alpha of its kind
//            (inside a host intra's, across hosts inter's): the ring's 2(n-1) hops,
//            the double tree's deepest path up and down, rd's partners, hier's 2(L-1)
//            host and 2(H-1) link steps
//   bytes    max(busiest NIC: max over NICs of the bytes it sends or receives, computed
//                 from the algorithm's actual edges (ring r -> r+1, the double binary
//                 tree's parent/child edges, recursive doubling's partners, hier's
//                 cross-host rings) / inter.bytesPerUs,
//                the busiest rank's bytes / intra.bytesPerUs (the CPU-bound ceiling))
//            the tree adds its pipeline's fill (a slice up and down its path); the
//            hierarchical schedule adds its two intra-host phases to its inter one (one
//            after the other), or when pipelined (above 2 slots per local rank) takes
//            the larger of the two plus 1/8 of the smaller, its pieces' link chains
//            counted with the link; the leaders-only form (unequal hosts) adds two shm
//            chains of S each.
// How its picks compare with every schedule simulated at scale: docs/simulator.md,
// "Auto's choice at scale".
//
// The inter-host constants: measured at creation by a probe between two host leaders
// (ring/host_link_calibration.h: one NIC's rate), else the fixed ones of
// collectives/tuning.h.
//
// So on link-bound networks the tree (which sends about 2S per inner rank, against the
// ring's 2(n-1)/n S) loses to the ring, and the hierarchical schedule (2(H-1)/H S per
// host link) beats the flat ring whenever a host has more than one rank.
//
// Contract: pure and deterministic; every input (topology from the published host ids,
// the options, the transport kinds decided at bootstrap) is the same on every rank, so
// every rank makes the same choice (which travels in the tag). One host: exactly
// chooseAllReduce.
#pragma once

#include <cstddef>

#include "collectives/algorithm_choice.h"
#include "collectives/collective.h"
#include "collectives/cost_model.h"
#include "collectives/host_topology.h"

namespace gyre {

// The table's entry: intra-host from linkCost(intraShm), inter-host the fixed constants
// of collectives/tuning.h.
TwoLevelCost twoLevelCost(bool intraShm, int nicsPerHost = 1);
// The same with inter-host alpha and bytesPerUs measured on this communicator's links;
// either <= 0 (the probe did not run): the fixed constants.
TwoLevelCost twoLevelCost(bool intraShm, double interAlphaUs, double interBytesPerUs,
                          int nicsPerHost = 1);

// Bytes the busiest NIC carries in one direction for an all-reduce of `bytes`, with
// `nicsPerHost` NICs a host (local rank i on NIC i mod nicsPerHost): the row's
// hostLinkBytes (collective_table.h).
double busiestHostLinkBytes(AllReduceAlgo algo, size_t bytes, const HostTopology& topology,
                            int nicsPerHost = 1);

// The row's predict().
double predictTopologyMicros(AllReduceAlgo algo, size_t bytes, const HostTopology& topology,
                             const TwoLevelCost& cost);

// The algorithm for a call: options.algo when forced and it fits (hier needs
// topology.hierarchical(), rd a buffer that fits a slot; else the ring), else the row
// that fits with the cheapest prediction (pickAllReduce). One host: chooseAllReduce.
// allShm/intraShm: the communicator's transport facts.
AllReduceAlgo chooseForTopology(const CollectiveOptions& options, size_t bytes,
                                const HostTopology& topology, bool allShm, bool intraShm);
AllReduceAlgo chooseForTopology(const CollectiveOptions& options, size_t bytes,
                                const HostTopology& topology, bool allShm,
                                const TwoLevelCost& cost);

// Broadcast, reduce and all-gather: predicted microseconds of the flat ring
// (twoLevel false) or the two-level form (collectives/hierarchical_broadcast.h,
// hierarchical_allgather.h); `bytes` is the buffer (all-gather: one rank's share).
//   broadcast, reduce  (n-1) alpha + max(busiest host link's bytes / inter, S / intra):
//                      the flat ring carries S over every boundary it crosses, the
//                      host-ordered chain crosses each once
//   all-gather         flat: (n-1) alpha + max(busiest link / inter, (n-1) S / intra);
//                      two-level: (H-1 + L-1) alpha + max(L(H-1) S / inter,
//                      (H-1) S / intra) + (L-1) H S / intra
double predictCollectiveMicros(CollectiveKind kind, bool twoLevel, size_t bytes, int root,
                               const HostTopology& topology, const TwoLevelCost& cost);
// Whether a broadcast, reduce or all-gather runs its two-level form: where it applies
// (all-gather: equal hosts; the others: topology.hierarchical()), GYRE_ALGO=hier forces
// it, any other forced algorithm keeps the flat ring, auto takes it when predicted 2%
// cheaper. Other kinds: false.
bool chooseTwoLevel(const CollectiveOptions& options, CollectiveKind kind, size_t bytes, int root,
                    const HostTopology& topology, const TwoLevelCost& cost);

// What CollectiveCall::algo is for `call` on topology.size() >= 2 ranks: all-reduce and
// barrier chooseForTopology's pick; broadcast, reduce and all-gather kHierarchical when
// chooseTwoLevel takes the two-level form; else 0. The communicator and the simulator
// (sim/) both set a call's algo with it.
uint8_t callAlgorithm(const CollectiveOptions& options, const CollectiveCall& call,
                      const HostTopology& topology, bool allShm, const TwoLevelCost& cost);

}  // namespace gyre
