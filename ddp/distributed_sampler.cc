#include "ddp/distributed_sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "base/error.h"

namespace gyre {
namespace {

// Uniform in [0, bound] by rejection: draws from the largest multiple of (bound + 1) that
// fits in 64 bits, so no value is favoured (a plain modulo would bias small values).
uint64_t uniformUpTo(std::mt19937_64& engine, uint64_t bound) {
  if (bound == UINT64_MAX) return engine();
  const uint64_t range = bound + 1;
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % range + 1) % range;
  uint64_t draw;
  do {
    draw = engine();
  } while (draw > limit);
  return draw % range;
}

}  // namespace

std::vector<size_t> seededPermutation(size_t n, uint64_t seed) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 engine(seed);
  for (size_t i = n; i > 1; --i) {
    const size_t j = static_cast<size_t>(uniformUpTo(engine, i - 1));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

DistributedSampler::DistributedSampler(size_t datasetSize, int numReplicas, int rank, bool shuffle,
                                       uint64_t seed, bool dropLast)
    : datasetSize_(datasetSize),
      numReplicas_(numReplicas),
      rank_(rank),
      shuffle_(shuffle),
      dropLast_(dropLast),
      numSamples_(0),
      state_{seed, 0} {
  if (numReplicas < 1) {
    fail(ErrorCode::kInvalidArgument, "DistributedSampler: numReplicas {} must be >= 1",
         numReplicas);
  }
  if (rank < 0 || rank >= numReplicas) {
    fail(ErrorCode::kInvalidArgument,
         "DistributedSampler: invalid rank {}, rank should be in the interval [0, {}]", rank,
         numReplicas - 1);
  }
  const size_t world = static_cast<size_t>(numReplicas);
  // torch: ceil((N - world) / world) with drop_last when N % world != 0, which is
  // floor(N / world) (and 0 when N < world); ceil(N / world) otherwise.
  numSamples_ = dropLast ? datasetSize / world : (datasetSize + world - 1) / world;
}

std::vector<size_t> DistributedSampler::epochList() const {
  std::vector<size_t> list;
  if (shuffle_) {
    list = seededPermutation(datasetSize_, state_.seed + state_.epoch);
  } else {
    list.resize(datasetSize_);
    std::iota(list.begin(), list.end(), size_t{0});
  }
  const size_t total = totalSize();
  if (dropLast_) {
    list.resize(total);
  } else if (total > list.size() && !list.empty()) {
    // Padding repeats the head; when it is longer than the list, the list repeats
    // cyclically (torch: (indices * ceil(pad / len))[:pad]).
    const size_t n = list.size();
    list.reserve(total);
    for (size_t i = n; i < total; ++i) list.push_back(list[i - n]);
  }
  return list;
}

std::vector<size_t> DistributedSampler::indices() const {
  const std::vector<size_t> list = epochList();
  std::vector<size_t> shard;
  shard.reserve(numSamples_);
  for (size_t i = static_cast<size_t>(rank_); i < list.size();
       i += static_cast<size_t>(numReplicas_)) {
    shard.push_back(list[i]);
  }
  return shard;
}

}  // namespace gyre
