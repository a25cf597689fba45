// The machine constants: what the all-reduce cost model (collectives/cost_model.h) and
// the primitives assume of the hardware, one row each, with where its measurement is.
// `gyre-bench --calibrate` prints the shm and tcp rows for the machine it runs on
// (docs/benchmarks.md); with several hosts the link probe at creation
// (collectives/link_probe.h) replaces the inter-host rows.
//
// Contract: constants; any thread.
#pragma once

#include <cstddef>

namespace gyre {

// One kind of link in the model `time = alpha * steps + bytes / bytesPerUs`.
struct LinkCost {
  double alphaUs = 0;  // fixed cost of one step (hand-off to a peer and its wake-up)
  double bytesPerUs = 1;  // what the busiest rank moves per microsecond in the ring
  // Tree time over ring time for large buffers, by rank count (index n, 2..8; larger
  // counts use the last entry).
  double treeBytesRatio[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
};

struct Tuning {
  LinkCost shm;  // ranks of one host over shared memory
  LinkCost tcp;  // ranks over tcp
  double interAlphaUs;      // one hop between hosts, where the link probe did not run
  double interBytesPerUs;   // one host link's rate, where the link probe did not run
  size_t streamOutMinBytes;  // calls this large write results with non-temporal stores
};

inline constexpr Tuning kTuning = {
    // fitted by gyre-bench --calibrate, shm, 2-8 ranks (docs/benchmarks.md#gyre-bench)
    .shm = {2.0, 3500.0, {1, 1, 1.01, 0.80, 0.64, 0.97, 0.95, 1.10, 1.12}},
    // fitted by gyre-bench --calibrate, tcp loopback, 2-8 ranks (docs/benchmarks.md#gyre-bench)
    .tcp = {20.0, 1200.0, {1, 1, 1.05, 0.99, 0.80, 0.85, 0.92, 0.94, 0.89}},
    // a loaded 2-core host's hop; quiet links probe 12-16 us (docs/simulator.md#validation)
    .interAlphaUs = 60.0,
    // the ring's 1.5 S / time at 2-8 MiB: bench/results/sim_validation_quiet/4x1_2gbit.txt
    .interBytesPerUs = 240.0,
    // where streaming stores overtake memcpy with 4 ranks sharing a 32 MiB L3: plain stores
    // won at 4 MiB, streaming from 16 MiB (host_kernels/stream_copy.h, DESIGN.md)
    .streamOutMinBytes = size_t{8} << 20,
};

}  // namespace gyre
