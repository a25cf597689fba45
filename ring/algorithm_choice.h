// Which all-reduce algorithm runs a call: a cost model `time = alpha * steps + bytes / beta`
// per algorithm, with alpha (seconds per step) and beta (bytes per second on one link)
// per transport from one table (ring/algorithm_choice.cc, measured with gyre-bench;
// `gyre-bench --calibrate` measures this machine's and prints a table to paste, and
// GYRE_ALGO=ring|tree|rd overrides the choice).
//
//   ring  2(n-1) steps, 2(n-1)/n * S bytes on every link
//   tree  2 * depth steps (depth ~ log2 n), the busiest rank moves ~2S (double binary tree)
//   rd    log2(p) exchanges (+2 when n is not a power of two p), log2(p) * S bytes; only
//         when the buffer fits one slot
//
// Contract: pure and deterministic: every rank computes the same choice from the same
// (options, bytes, size, transport), so all ranks run the same schedule.
#pragma once

#include <cstddef>

#include "base/options.h"

namespace gyre {

enum class AllReduceAlgo { kRing, kTree, kRecursiveDoubling };

const char* algoName(AllReduceAlgo algo);

struct LinkCost {
  double alphaUs = 0;  // fixed cost of one step (hand-off to a peer and its wake-up)
  double gbps = 1;     // bytes per ns that one link sustains in a pipelined schedule
};

// The table's entry for shared memory (shm = true) or tcp.
LinkCost linkCost(bool shm);

// Predicted microseconds for `bytes` over `size` ranks.
double predictMicros(AllReduceAlgo algo, size_t bytes, int size, const LinkCost& cost);

// The algorithm for an all-reduce of `bytes` on `size` ranks (size >= 2) over links of
// the given kind; honours options.algo (a forced rd that does not fit a slot is ring).
AllReduceAlgo chooseAllReduce(const Options& options, size_t bytes, int size, bool shm);

}  // namespace gyre
