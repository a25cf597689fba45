// gyre-bench --calibrate: measures the link cost that collectives/algorithm_choice.h models,
// on the machine it runs on.
//
// On the ranks' transport (GYRE_TRANSPORT), a ring all-reduce (float sum, algorithm
// forced to ring) is timed at 8 B and at 4 MiB and 16 MiB, and the model's ring cost
//   time = alphaUs * 2(n-1) + 2(n-1)/n * S / (gbps * 1000)      (us, S in bytes)
// is fitted: alphaUs = time(8 B) / 2(n-1), gbps from the 16 MiB time less the alpha part.
// For information, the 8-byte time of every algorithm that fits one host
// (collectives/collective_table.h: ring, tree, rd) at this rank count is measured too,
// next to what the fitted model predicts. Each algorithm runs on a
// communicator of its own (Options are fixed per communicator), bootstrapped through a
// store that rank 0 serves on a free port of MASTER_ADDR; an algorithm that fails (one
// not implemented yet) is reported as failed and does not stop the others.
//
// Times are the largest over ranks of the mean per op (-w warm-up ops, a barrier, -n
// timed ops; 10 x -n at 8 bytes, where one op is short and noisy). Rank 0 prints
//   calibration: transport=shm ranks=4 alpha_us=3.052 gbps=5.912
// and `calibration:` lines with the raw times and the line to paste into collectives/tuning.h.
// Collective: every rank calls it with the same arguments (n >= 2). Returns 0; throws
// gyre::Error if the ring measurement itself fails.
//
// The helpers below are shared with --compare-algos (bench/compare_algos.h), which also
// runs one communicator per algorithm. Each is collective over `comm` (n >= 1).
#pragma once

#include <memory>
#include <string>

#include "ring/communicator.h"
#include "ring/options.h"

namespace gyre {
class Store;
}

namespace gyre::bench {

int calibrate(Communicator& comm, const Options& options, int iters, int warmup);

// A store for per-algorithm communicators: rank 0 serves one on a free port of
// MASTER_ADDR (the launcher's address for rank 0; 127.0.0.1 if unset) and tells the
// others the port over `comm`. Communicators created on it keep their keys apart.
std::shared_ptr<Store> algoStore(Communicator& comm, const Options& options);

// A communicator of comm's ranks on `store` with `options` but the algorithm `algo`.
std::unique_ptr<Communicator> algoCommunicator(Communicator& comm,
                                               const std::shared_ptr<Store>& store,
                                               const Options& options, AllReduceAlgo algo);

// The transport the ranks use, "shm" or "tcp": GYRE_TRANSPORT, and for auto bootstrap's
// rule (shared memory when every rank is on one host), judged by the host identity
// (ring/host_identity.h: host name, boot id, network namespace; "tcp" when ranks span hosts).
std::string resolvedTransport(Communicator& comm, const Options& options);

}  // namespace gyre::bench
