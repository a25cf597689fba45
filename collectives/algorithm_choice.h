// Which all-reduce algorithm runs a call: a cost model `time = alpha * steps + bytes / beta`
// per algorithm, with alpha (microseconds per step) and beta (bytes per microsecond on
// the busiest rank) per transport from the table of collectives/tuning.h
// (`gyre-bench --calibrate` fits alpha and beta on another machine; GYRE_ALGO=ring|tree|rd
// overrides the choice).
//
// Per algorithm (its row's predictOneHost(), in the algorithm's own file:
// collective_table.h):
//
//   ring  2(n-1) steps; 2(n-1)/n * S bytes per rank
//   tree  2 floor(log2 n) + 2 steps (up, down, and the pipeline's fill); the ring's bytes
//         times a measured ratio per rank count (the double binary tree moves about as
//         much as the ring per rank, but needs fewer ranks scheduled at once per slice,
//         which on a host with fewer cores than ranks makes it faster: tuning.h's ratios)
//   rd    log2(p) exchanges, +2 when n is not a power of two p; log2(p) * S bytes (+2S);
//         only when the buffer fits one slot
//   hier  the ring (one host has no hierarchy; it never fits here)
//
// Contract: pure and deterministic; every input is the same on every rank (the
// transport kind is decided alike on every rank at bootstrap), so all ranks choose the
// same algorithm, and the choice travels in every slice's tag: ranks that still
// disagree (a different GYRE_ALGO, say) fail with kMismatch instead of mixing schedules.
#pragma once

#include <cstddef>

#include "collectives/collective_options.h"
#include "collectives/collective_table.h"
#include "collectives/cost_model.h"
#include "collectives/tuning.h"

namespace gyre {

// The table's entry for shared memory (shm = true) or tcp (kTuning.shm, kTuning.tcp).
const LinkCost& linkCost(bool shm);

// Predicted microseconds for `bytes` over `size` ranks (algo is not kAuto): the row's
// predictOneHost().
double predictMicros(AllReduceAlgo algo, size_t bytes, int size, const LinkCost& cost);

// The algorithm for an all-reduce of `bytes` on `size` ranks (size >= 2) over links of
// the given kind, never kAuto; honours options.algo (a forced algorithm that does not
// fit, rd above a slot or hier, is the ring).
AllReduceAlgo chooseAllReduce(const CollectiveOptions& options, size_t bytes, int size, bool shm);

// The choice over kAllReduceAlgorithms at `place`: `forced` where it fits, else the
// ring; for kAuto the row that fits with the least predict(row), the earlier row on a
// tie (strictly cheaper wins).
template <typename Predict>
AllReduceAlgo pickAllReduce(AllReduceAlgo forced, const AllReducePlace& place,
                            Predict&& predict) {
  if (forced != AllReduceAlgo::kAuto) {
    return allReduceRow(forced).fits(place) ? forced : kAllReduceAlgorithms[0]->algo;
  }
  const AllReduceRow* best = nullptr;
  double bestUs = 0;
  for (const AllReduceRow* row : kAllReduceAlgorithms) {
    if (!row->fits(place)) continue;
    const double us = predict(*row);
    if (!best || us < bestUs) {
      best = row;
      bestUs = us;
    }
  }
  return best->algo;
}

}  // namespace gyre
