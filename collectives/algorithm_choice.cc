#include "collectives/algorithm_choice.h"

#include <algorithm>

#include "collectives/recursive_doubling.h"
#include "collectives/schedule_math.h"

namespace gyre {
namespace {

// The whole cost model's constants. Measured on the development VM (2 cores, ranks 2..8
// oversubscribing them), 2026-11-29, gyre-bench -b 8 -e 32M -f 4, min of 3 runs per
// point, mean of out-of-place and in-place:
//  - alpha: the 8-byte ring time / 2(n-1) at 4 ranks (shm 8 us / 6, tcp 131 us / 6 ~ 20;
//    at 8 ranks 2.7 and 25: oversubscription makes steps dearer, alike for every
//    algorithm, so the choice barely moves).
//  - bytesPerUs: the ring's 2(n-1)/n * S / time at 16 MiB, 4 and 8 ranks (shm 4.0 and
//    3.1 GB/s, tcp 1.6 and 0.9): 3500 and 1200.
//  - treeBytesRatio: tree time / ring time at 4 MiB and 16 MiB, mean of the two, per rank
//    count (shm: 1.01 0.80 0.64 0.97 0.95 1.10 1.12; tcp: 1.05 0.99 0.80 0.85 0.92 0.94
//    0.89 for n = 2..8).
// Resulting choice on that VM: rd up to ~32 KiB, then the tree, except for shm at 7+
// ranks above ~1 MiB (ring). Measured against it: see the closing note.
constexpr LinkCost kShm{2.0, 3500.0, {1, 1, 1.01, 0.80, 0.64, 0.97, 0.95, 1.10, 1.12}};
constexpr LinkCost kTcp{20.0, 1200.0, {1, 1, 1.05, 0.99, 0.80, 0.85, 0.92, 0.94, 0.89}};

}  // namespace

const LinkCost& linkCost(bool shm) { return shm ? kShm : kTcp; }

double predictMicros(AllReduceAlgo algo, size_t bytes, int size, const LinkCost& cost) {
  const double s = static_cast<double>(bytes) / cost.bytesPerUs;
  const double n = size;
  const double ringBytes = 2 * (n - 1) / n * s;
  switch (algo) {
    case AllReduceAlgo::kRing:
    case AllReduceAlgo::kHierarchical:  // on one host: the ring over the host's links
      return cost.alphaUs * 2 * (n - 1) + ringBytes;
    case AllReduceAlgo::kTree:
      return cost.alphaUs * (2 * floorLog2(size) + 2) +
             cost.treeBytesRatio[std::min(size, 8)] * ringBytes;
    case AllReduceAlgo::kRecursiveDoubling: {
      const double steps = floorLog2(size) + (lowerPowerOfTwo(size) != size ? 2 : 0);
      return cost.alphaUs * steps + steps * s;
    }
    case AllReduceAlgo::kAuto: break;
  }
  return 0;
}

AllReduceAlgo chooseAllReduce(const Options& options, size_t bytes, int size, bool shm) {
  const bool rdFits = recursiveDoublingFits(bytes, options.smallestSlotBytes());
  switch (options.algo) {
    case AllReduceAlgo::kAuto: break;
    case AllReduceAlgo::kHierarchical: return AllReduceAlgo::kRing;  // no hosts in this model
    case AllReduceAlgo::kRecursiveDoubling:
      return rdFits ? AllReduceAlgo::kRecursiveDoubling : AllReduceAlgo::kRing;
    default: return options.algo;
  }
  const LinkCost& cost = linkCost(shm);
  AllReduceAlgo best = AllReduceAlgo::kRing;
  double bestUs = predictMicros(best, bytes, size, cost);
  for (AllReduceAlgo a : {AllReduceAlgo::kTree, AllReduceAlgo::kRecursiveDoubling}) {
    if (a == AllReduceAlgo::kRecursiveDoubling && !rdFits) continue;
    const double us = predictMicros(a, bytes, size, cost);
    if (us < bestUs) {
      best = a;
      bestUs = us;
    }
  }
  return best;
}

}  // namespace gyre
