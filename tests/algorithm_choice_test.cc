// The all-reduce algorithm choice: GYRE_ALGO overrides are honoured, recursive doubling
// only where the buffer fits a slot, the automatic choice follows the cost model (and so
// the measurements its table came from), and ranks that choose differently fail with a
// mismatch instead of running different schedules into each other.
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "collectives/algorithm_choice.h"
#include "collectives/collective.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;

Options withAlgo(AllReduceAlgo algo) {
  Options o;
  o.algo = algo;
  return o;
}

TEST(AlgorithmChoice, ForcedAlgorithmsAreHonoured) {
  for (bool shm : {false, true}) {
    for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{1} << 28}) {
      EXPECT_EQ(chooseAllReduce(withAlgo(AllReduceAlgo::kRing), bytes, 8, shm), AllReduceAlgo::kRing);
      EXPECT_EQ(chooseAllReduce(withAlgo(AllReduceAlgo::kTree), bytes, 8, shm), AllReduceAlgo::kTree);
    }
    const Options rd = withAlgo(AllReduceAlgo::kRecursiveDoubling);
    EXPECT_EQ(chooseAllReduce(rd, rd.slotBytes, 5, shm), AllReduceAlgo::kRecursiveDoubling);
    EXPECT_EQ(chooseAllReduce(rd, rd.slotBytes + 1, 5, shm), AllReduceAlgo::kRing);
  }
}

TEST(AlgorithmChoice, AutoFollowsTheModelAndTheMeasuredCrossovers) {
  const Options o;
  for (bool shm : {false, true}) {
    for (int n = 2; n <= 64; ++n) {
      for (size_t bytes = 1; bytes <= (size_t{1} << 30); bytes *= 4) {
        const AllReduceAlgo got = chooseAllReduce(o, bytes, n, shm);
        const LinkCost& cost = linkCost(shm);
        for (AllReduceAlgo a : {AllReduceAlgo::kRing, AllReduceAlgo::kTree,
                                AllReduceAlgo::kRecursiveDoubling}) {
          if (a == AllReduceAlgo::kRecursiveDoubling && bytes > o.slotBytes) continue;
          EXPECT_LE(predictMicros(got, bytes, n, cost), predictMicros(a, bytes, n, cost))
              << "n " << n << " bytes " << bytes << " shm " << shm << ": chose "
              << algoName(got) << " over cheaper " << algoName(a);
        }
        if (bytes > o.slotBytes) {
          EXPECT_NE(got, AllReduceAlgo::kRecursiveDoubling);
        }
      }
    }
  }
  // The crossovers measured on the development VM (collectives/algorithm_choice.cc's table):
  // latency-bound calls are recursive doubling, 8 ranks over tcp take the tree from
  // 128 KiB on, 8 ranks over shm the ring for large buffers, 4 ranks the tree.
  EXPECT_EQ(chooseAllReduce(o, 8, 8, false), AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseAllReduce(o, 8, 8, true), AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseAllReduce(o, 128 * 1024, 8, false), AllReduceAlgo::kTree);
  EXPECT_EQ(chooseAllReduce(o, 16 << 20, 8, true), AllReduceAlgo::kRing);
  EXPECT_EQ(chooseAllReduce(o, 16 << 20, 4, true), AllReduceAlgo::kTree);
  EXPECT_EQ(chooseAllReduce(o, 16 << 20, 4, false), AllReduceAlgo::kTree);
}

TEST(AlgorithmChoice, RanksWithDifferentSettingsFailAtCreation) {
  SpawnOptions so;
  so.options.timeout = std::chrono::seconds(20);
  so.perRank = [](int rank, Options& o) {
    o.algo = rank == 2 ? AllReduceAlgo::kTree : AllReduceAlgo::kRing;
  };
  const auto start = std::chrono::steady_clock::now();
  try {
    spawn(4, [](Communicator& comm) {
      check(false, "rank {}: created a communicator with mixed GYRE_ALGO", comm.rank());
    }, so);
    FAIL() << "spawn succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("GYRE_ALGO=tree"), std::string::npos) << msg;
    EXPECT_NE(msg.find("GYRE_ALGO=ring"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Should ranks still run different algorithms (the choice's inputs differ in a way the
// creation check does not see), the algorithm in every slice's tag makes it a mismatch.
TEST(AlgorithmChoice, TheAlgorithmIsPartOfTheTag) {
  CollectiveCall ring, tree;
  ring.algo = static_cast<uint8_t>(AllReduceAlgo::kRing);
  tree.algo = static_cast<uint8_t>(AllReduceAlgo::kTree);
  // The values on the wire: 0 is "no algorithm" (every other collective).
  EXPECT_EQ(ring.algo, 1);
  EXPECT_EQ(tree.algo, 2);
  EXPECT_EQ(static_cast<uint8_t>(AllReduceAlgo::kRecursiveDoubling), 3);
  EXPECT_NE(ring.tag(), tree.tag());
  EXPECT_NE(describe(ring.tag()).find("[ring]"), std::string::npos);
  EXPECT_NE(describe(tree).find("[tree]"), std::string::npos);
}

}  // namespace
}  // namespace gyre
