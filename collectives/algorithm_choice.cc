#include "collectives/algorithm_choice.h"

#include <algorithm>

#include "collectives/recursive_doubling.h"
#include "collectives/schedule_math.h"

namespace gyre {

const LinkCost& linkCost(bool shm) { return shm ? kTuning.shm : kTuning.tcp; }

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
