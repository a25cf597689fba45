// DistributedSampler against torch.utils.data.DistributedSampler's formulas and
// invariants: counts, padding, drop_last, disjoint strided shards, per-epoch reshuffle.
#include "ddp/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "base/error.h"

namespace gyre {
namespace {

// torch's __init__, written as the Python does it (float division, math.ceil).
size_t torchNumSamples(size_t n, size_t world, bool dropLast) {
  if (dropLast && n % world != 0) {
    return static_cast<size_t>(
        std::ceil((static_cast<double>(n) - static_cast<double>(world)) / world));
  }
  return static_cast<size_t>(std::ceil(static_cast<double>(n) / world));
}

TEST(DistributedSamplerTest, CountsMatchTorchFormulas) {
  for (size_t n : {0, 1, 2, 3, 5, 7, 10, 64, 100, 1001, 60000}) {
    for (int world = 1; world <= 9; ++world) {
      for (bool dropLast : {false, true}) {
        DistributedSampler s(n, world, world - 1, true, 0, dropLast);
        const size_t expected = torchNumSamples(n, world, dropLast);
        EXPECT_EQ(s.numSamples(), expected) << "n " << n << " world " << world;
        EXPECT_EQ(s.totalSize(), expected * world);
        EXPECT_EQ(s.indices().size(), expected);
        EXPECT_EQ(s.epochList().size(), expected * world);
      }
    }
  }
  // A few by hand: torch gives 8572 per rank and 4 padded for 60000 over 7 ranks.
  EXPECT_EQ(DistributedSampler(60000, 7, 0).numSamples(), 8572u);
  EXPECT_EQ(DistributedSampler(60000, 7, 0, true, 0, true).numSamples(), 8571u);
  EXPECT_EQ(DistributedSampler(10, 3, 0).totalSize(), 12u);
  EXPECT_EQ(DistributedSampler(10, 3, 0, true, 0, true).totalSize(), 9u);
  EXPECT_EQ(DistributedSampler(2, 4, 0, true, 0, true).numSamples(), 0u);
}

TEST(DistributedSamplerTest, ShardsAreDisjointAndCoverTheData) {
  for (size_t n : {12, 60}) {
    for (int world : {1, 2, 3, 4}) {
      std::set<size_t> seen;
      size_t total = 0;
      for (int r = 0; r < world; ++r) {
        DistributedSampler s(n, world, r, true, 7);
        s.setEpoch(3);
        for (size_t i : s.indices()) {
          EXPECT_LT(i, n);
          EXPECT_TRUE(seen.insert(i).second) << "index " << i << " in two shards";
          ++total;
        }
      }
      EXPECT_EQ(total, n);
      EXPECT_EQ(seen.size(), n);
    }
  }
}

TEST(DistributedSamplerTest, PaddingRepeatsTheHeadOfTheEpochList) {
  const size_t n = 10;
  const int world = 4;  // total 12: two samples repeated
  DistributedSampler s0(n, world, 0, true, 1);
  const std::vector<size_t> list = s0.epochList();
  ASSERT_EQ(list.size(), 12u);
  EXPECT_EQ(list[10], list[0]);
  EXPECT_EQ(list[11], list[1]);
  std::map<size_t, int> count;
  for (int r = 0; r < world; ++r) {
    for (size_t i : DistributedSampler(n, world, r, true, 1).indices()) ++count[i];
  }
  EXPECT_EQ(count.size(), n);  // covers everything
  EXPECT_EQ(count[list[0]], 2);
  EXPECT_EQ(count[list[1]], 2);

  // Padding longer than the list: the list repeats cyclically, as torch's
  // (indices * ceil(pad / len))[:pad].
  DistributedSampler tiny(2, 5, 0, false);
  EXPECT_EQ(tiny.epochList(), (std::vector<size_t>{0, 1, 0, 1, 0}));
}

TEST(DistributedSamplerTest, DropLastCutsTheTailAndStaysDisjoint) {
  const size_t n = 11;
  const int world = 4;  // 2 per rank, 3 samples dropped
  std::set<size_t> seen;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, true, 5, true);
    EXPECT_EQ(s.indices().size(), 2u);
    for (size_t i : s.indices()) EXPECT_TRUE(seen.insert(i).second);
  }
  EXPECT_EQ(seen.size(), 8u);
  const std::vector<size_t> perm = seededPermutation(n, 5);
  DistributedSampler s(n, world, 0, true, 5, true);
  EXPECT_EQ(s.epochList(), std::vector<size_t>(perm.begin(), perm.begin() + 8));
}

TEST(DistributedSamplerTest, EveryRankSeesTheSameOrderAndTakesItsStride) {
  const size_t n = 103;
  const int world = 4;
  DistributedSampler reference(n, world, 0, true, 42);
  reference.setEpoch(2);
  const std::vector<size_t> list = reference.epochList();
  for (int r = 0; r < world; ++r) {
    DistributedSampler s(n, world, r, true, 42);
    s.setEpoch(2);
    EXPECT_EQ(s.epochList(), list) << "rank " << r;
    const std::vector<size_t> shard = s.indices();
    for (size_t k = 0; k < shard.size(); ++k) EXPECT_EQ(shard[k], list[r + k * world]);
  }
}

TEST(DistributedSamplerTest, EpochsReshuffleDeterministically) {
  DistributedSampler s(1000, 2, 1, true, 0);
  s.setEpoch(0);
  const auto e0 = s.indices();
  s.setEpoch(1);
  const auto e1 = s.indices();
  EXPECT_NE(e0, e1);
  s.setEpoch(0);
  EXPECT_EQ(s.indices(), e0);
  // The seed matters, and seed + epoch is what seeds the permutation.
  DistributedSampler other(1000, 2, 1, true, 1);
  EXPECT_EQ(other.indices(), e1);
}

TEST(DistributedSamplerTest, NoShuffleIsTheIdentityInStrides) {
  DistributedSampler s(10, 3, 1, false);
  EXPECT_EQ(s.indices(), (std::vector<size_t>{1, 4, 7, 0}));  // padded with index 0
}

TEST(DistributedSamplerTest, PermutationIsPinned) {
  // The documented generator (mt19937_64 + Fisher-Yates by rejection) is part of the
  // checkpoint format: a resumed run must draw the same orders. Pin it.
  const std::vector<size_t> p = seededPermutation(10, 0);
  std::vector<size_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(p, (std::vector<size_t>{7, 2, 0, 8, 3, 9, 6, 1, 5, 4}));
}

TEST(DistributedSamplerTest, StateRoundTrips) {
  DistributedSampler a(500, 3, 2, true, 9);
  a.setEpoch(4);
  DistributedSampler b(500, 3, 2, true, 0);
  b.restore(a.state());
  EXPECT_EQ(b.indices(), a.indices());
  EXPECT_EQ(b.state().seed, 9u);
  EXPECT_EQ(b.state().epoch, 4u);
}

TEST(DistributedSamplerTest, RejectsABadRank) {
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), Error);
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
}

}  // namespace
}  // namespace gyre
