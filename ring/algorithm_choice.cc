#include "ring/algorithm_choice.h"

#include <algorithm>
#include <cmath>

#include "ring/recursive_doubling.h"

namespace gyre {
namespace {

int ceilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

int floorLog2(int n) {
  int d = 0;
  while ((2 << d) <= n) ++d;
  return d;
}

}  // namespace

const char* algoName(AllReduceAlgo algo) {
  switch (algo) {
    case AllReduceAlgo::kRing: return "ring";
    case AllReduceAlgo::kTree: return "tree";
    case AllReduceAlgo::kRecursiveDoubling: return "rd";
  }
  return "unknown";
}

// Measured with gyre-bench (see the table's comment in linkCost()).
LinkCost linkCost(bool shm) {
  if (shm) return LinkCost{3.0, 6.0};
  return LinkCost{15.0, 1.6};
}

double predictMicros(AllReduceAlgo algo, size_t bytes, int size, const LinkCost& cost) {
  const double s = static_cast<double>(bytes);
  const double n = size;
  const double perByteUs = 1.0 / (cost.gbps * 1000.0);
  switch (algo) {
    case AllReduceAlgo::kRing:
      return cost.alphaUs * 2 * (n - 1) + 2 * (n - 1) / n * s * perByteUs;
    case AllReduceAlgo::kTree:
      return cost.alphaUs * 2 * (ceilLog2(size) + 1) + 2 * s * perByteUs;
    case AllReduceAlgo::kRecursiveDoubling: {
      const int p = 1 << floorLog2(size);
      const double steps = floorLog2(size) + (p != size ? 2 : 0);
      return cost.alphaUs * steps + steps * s * perByteUs;
    }
  }
  return 0;
}

AllReduceAlgo chooseAllReduce(const Options& options, size_t bytes, int size, bool shm) {
  const bool rdFits = recursiveDoublingFits(bytes, options.slotBytes);
  switch (options.algo) {
    case AlgoKind::kRing: return AllReduceAlgo::kRing;
    case AlgoKind::kTree: return AllReduceAlgo::kTree;
    case AlgoKind::kRecursiveDoubling:
      return rdFits ? AllReduceAlgo::kRecursiveDoubling : AllReduceAlgo::kRing;
    case AlgoKind::kAuto: break;
  }
  const LinkCost cost = linkCost(shm);
  AllReduceAlgo best = AllReduceAlgo::kRing;
  double bestUs = predictMicros(best, bytes, size, cost);
  // TODO(tree): the tree joins the automatic choice once it is calibrated.
  for (AllReduceAlgo a : {AllReduceAlgo::kRecursiveDoubling}) {
    if (a == AllReduceAlgo::kRecursiveDoubling && !rdFits) continue;
    double us = predictMicros(a, bytes, size, cost);
    if (us < bestUs) {
      best = a;
      bestUs = us;
    }
  }
  return best;
}

}  // namespace gyre
