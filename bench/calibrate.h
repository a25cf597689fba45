// gyre-bench --calibrate: measures this machine's link cost for ring/algorithm_choice.h.
//
// On the ranks' transport (GYRE_TRANSPORT), a ring all-reduce (float sum, algorithm
// forced to ring) is timed at 8 B and at 4 MiB and 16 MiB, and the model's ring cost
//   time = alphaUs * 2(n-1) + 2(n-1)/n * S / (gbps * 1000)      (us, S in bytes)
// is fitted: alphaUs = time(8 B) / 2(n-1), gbps from the 16 MiB time less the alpha part.
// For information, the 8-byte time of every algorithm (ring, tree, rd) at this rank
// count is measured too, next to what the fitted model predicts. Each algorithm runs on a
// communicator of its own (Options are fixed per communicator), bootstrapped through a
// store that rank 0 serves on a free port of MASTER_ADDR; an algorithm that fails (one
// not implemented yet) is reported as failed and does not stop the others.
//
// Times are the largest over ranks of the mean per op (-w warm-up ops, a barrier, -n
// timed ops; 10 x -n at 8 bytes, where one op is short and noisy). Rank 0 prints
//   calibration: transport=shm ranks=4 alpha_us=3.052 gbps=5.912
// and `calibration:` lines with the raw times and the line to paste into linkCost().
// Collective: every rank calls it with the same arguments (n >= 2). Returns 0; throws
// gyre::Error if the ring measurement itself fails.
#pragma once

#include "base/options.h"
#include "ring/communicator.h"

namespace gyre::bench {

int calibrate(Communicator& comm, const Options& options, int iters, int warmup);

}  // namespace gyre::bench
