// gyre-bench --compare-algos: ring, tree, hierarchical and auto all-reduce, interleaved
// in one job (hier is the flat ring where the hosts do not allow the two-level schedule).
//
// On a shared machine separate runs of one algorithm differ by 20-30%, more than the
// algorithms differ from each other, so the four are timed in alternation instead:
// each on a communicator of its own (Options.algo = ring, tree, hier, auto; bench/calibrate.h's
// algoStore and algoCommunicator), alive side by side. Per size of the sweep:
//   - -w untimed out-of-place ops on each communicator, once;
//   - R rounds; in each, for ring, tree, hier, auto in turn: a barrier on that communicator,
//     then a burst of max(1, iters / R) back-to-back out-of-place ops, timed. Round r
//     starts the turn at algorithm r mod 4 (ring, tree, hier, auto; tree, hier, auto, ring; ...), so
//     that no algorithm always runs right after the same other one;
//   - a burst's time is the largest over ranks of the mean per op (gyre-bench's table
//     rule), and an algorithm's time is the median over the R rounds of that;
//   - with check, one exact out-of-place and one in-place op per communicator
//     (bench_collectives.h's checks), wrong elements summed over ranks.
// Rank 0 prints one line per size and a final one:
//   compare: bytes=131072 ranks=8 transport=shm ring_us=68.10 tree_us=63.00 hier_us=68.30 auto_us=64.20
//     auto_algo=tree auto/best=1.02 wrong=0                                   (one line)
//   compare: worst auto/best=1.08 at bytes=2048 wrong=0
// auto_algo is the auto communicator's own pick at that size
// (Communicator::allReduceAlgorithm, collectives/topology_choice.h); best = min(ring,
// tree, hier); auto/best uses the unrounded times; wrong is N/A without check.
//
// Collective: every rank calls it with the same arguments, on >= 2 ranks. `send` and
// `recv` hold `capacity` bytes plus kGuardElements * 8, as CollectiveRunner requires,
// and capacity covers every size. Returns 0 when nothing was wrong, 1 otherwise; throws
// gyre::Error when a collective fails.
#pragma once

#include <cstddef>
#include <vector>

#include "base/types.h"
#include "ring/communicator.h"
#include "ring/options.h"

namespace gyre::bench {

struct CompareConfig {
  std::vector<size_t> sizes;  // bytes, the sweep's
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int iters = 20;  // timed ops per algorithm and size, split over the rounds
  int warmup = 5;  // untimed ops per algorithm and size, before the first round
  int rounds = 5;
  bool check = true;
};

int compareAlgos(Communicator& comm, const Options& options, const CompareConfig& config,
                 std::byte* send, std::byte* recv, size_t capacity);

}  // namespace gyre::bench
