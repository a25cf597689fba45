// gyre::DistributedSampler: which sample indices each rank visits in an epoch, with the
// semantics of torch.utils.data.DistributedSampler.
//
// Contract (torch's algorithm, step by step):
//   num_samples = ceil(N / world), or floor(N / world) with drop_last;
//   total_size  = num_samples * world;
//   epoch list  = a permutation of 0..N-1 seeded with seed + epoch (shuffle), else 0..N-1;
//   without drop_last the list is padded to total_size by repeating its head (cyclically,
//   when the padding is longer than the list); with drop_last it is cut to total_size;
//   rank r takes the strided shard list[r], list[r + world], ... (num_samples entries).
// So every rank sees the same number of samples, the shards are disjoint apart from the
// padding, and together they cover the dataset (minus at most world-1 with drop_last).
//
// The permutation: torch's randperm (a Philox/MT generator behind torch.Generator)
// cannot be reproduced bit for bit outside torch, so gyre documents its own: the
// std::mt19937_64 engine (its output sequence is fixed by the C++ standard) seeded with
// seed + epoch (mod 2^64), driving a Fisher-Yates shuffle from the last position down,
// each swap index drawn in [0, i] by rejection sampling (std::uniform_int_distribution
// is implementation-defined, so it is not used). Same inputs, same permutation, on every
// rank, compiler and platform.
//
// Ownership and threads: a plain value type holding no data but its parameters; const
// methods may be called from any thread, setEpoch/restore need exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gyre {

class DistributedSampler {
 public:
  // What a checkpoint must store to reproduce the sampler's future orders.
  struct State {
    uint64_t seed = 0;
    uint64_t epoch = 0;
  };

  // Throws gyre::Error(kInvalidArgument) unless 0 <= rank < numReplicas.
  DistributedSampler(size_t datasetSize, int numReplicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool dropLast = false);

  // Selects the permutation of the coming epoch (torch's set_epoch).
  void setEpoch(uint64_t epoch) { state_.epoch = epoch; }
  uint64_t epoch() const { return state_.epoch; }

  // Samples this rank visits per epoch (torch's len(sampler)).
  size_t numSamples() const { return numSamples_; }
  // numSamples() * numReplicas: the padded (or cut) length of the epoch list.
  size_t totalSize() const { return numSamples_ * static_cast<size_t>(numReplicas_); }

  // This rank's shard for the current epoch, in visiting order.
  std::vector<size_t> indices() const;
  // The padded or cut list of the current epoch before sharding (identical on all ranks).
  std::vector<size_t> epochList() const;

  State state() const { return state_; }
  void restore(const State& state) { state_ = state; }

  size_t datasetSize() const { return datasetSize_; }
  int numReplicas() const { return numReplicas_; }
  int rank() const { return rank_; }

 private:
  size_t datasetSize_;
  int numReplicas_;
  int rank_;
  bool shuffle_;
  bool dropLast_;
  size_t numSamples_;
  State state_;
};

// The permutation of 0..n-1 described above (exposed for tests and tools).
std::vector<size_t> seededPermutation(size_t n, uint64_t seed);

}  // namespace gyre
