// The order in which gyre-bench --compare-algos times its contenders (bench/compare_algos.h),
// shared with gyre-sim --as-bench, which replays it on a simulated cluster: the
// contenders (auto last: best is the minimum of the others), which one runs k-th in
// round r, a burst's length, and the median over rounds that makes a contender's time.
//
// Contract: pure, header-only.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "collectives/allreduce_algo.h"

namespace gyre::bench {

inline constexpr size_t kCompareAlgos = 4;
inline constexpr std::array<AllReduceAlgo, kCompareAlgos> kCompareKinds = {
    AllReduceAlgo::kRing, AllReduceAlgo::kTree, AllReduceAlgo::kHierarchical,
    AllReduceAlgo::kAuto};
inline constexpr std::array<const char*, kCompareAlgos> kCompareLabels = {"ring", "tree", "hier",
                                                                           "auto"};
inline constexpr size_t kCompareAuto = kCompareAlgos - 1;

// Round r starts the turn at contender r mod 4, so that no contender always runs right
// after the same other one.
inline size_t compareTurn(size_t round, size_t k) { return (round + k) % kCompareAlgos; }

// Timed ops per burst: iters spread over the rounds, at least one.
inline int compareBurst(int iters, int rounds) { return std::max(1, iters / rounds); }

// The median of `v` (the mean of the middle two for an even count); v is not empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

}  // namespace gyre::bench
