// The all-reduce algorithm choice: GYRE_ALGO overrides are honoured, recursive doubling
// only where the buffer fits a slot, the automatic choice follows the cost model (and so
// the measurements its table came from), and ranks that choose differently fail with a
// mismatch instead of running different schedules into each other.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "collectives/algorithm_choice.h"
#include "collectives/collective.h"
#include "collectives/host_topology.h"
#include "collectives/topology_choice.h"
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
    EXPECT_EQ(chooseAllReduce(rd, rd.smallestSlotBytes(), 5, shm),
              AllReduceAlgo::kRecursiveDoubling);
    EXPECT_EQ(chooseAllReduce(rd, rd.smallestSlotBytes() + 1, 5, shm), AllReduceAlgo::kRing);
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
          if (a == AllReduceAlgo::kRecursiveDoubling && bytes > o.smallestSlotBytes()) continue;
          EXPECT_LE(predictMicros(got, bytes, n, cost), predictMicros(a, bytes, n, cost))
              << "n " << n << " bytes " << bytes << " shm " << shm << ": chose "
              << algoName(got) << " over cheaper " << algoName(a);
        }
        if (bytes > o.smallestSlotBytes()) {
          EXPECT_NE(got, AllReduceAlgo::kRecursiveDoubling);
        }
      }
    }
  }
  // The crossovers of collectives/tuning.h's constants:
  // latency-bound calls are recursive doubling, 8 ranks over tcp take the tree from
  // 128 KiB on, 8 ranks over shm the ring for large buffers, 4 ranks the tree.
  EXPECT_EQ(chooseAllReduce(o, 8, 8, false), AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseAllReduce(o, 8, 8, true), AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseAllReduce(o, 128 * 1024, 8, false), AllReduceAlgo::kTree);
  EXPECT_EQ(chooseAllReduce(o, 16 << 20, 8, true), AllReduceAlgo::kRing);
  EXPECT_EQ(chooseAllReduce(o, 16 << 20, 4, true), AllReduceAlgo::kTree);
  EXPECT_EQ(chooseAllReduce(o, 16 << 20, 4, false), AllReduceAlgo::kTree);
}

// Ranks created with settings that `perRank` makes differ must all fail at creation,
// the error naming both values (`a` and `b`), within 10 s.
void expectRefusedAtCreation(int ranks, std::function<void(int, Options&)> perRank,
                             const std::string& setting, const std::string& a,
                             const std::string& b) {
  SpawnOptions so;
  so.options.timeout = std::chrono::seconds(20);
  so.perRank = std::move(perRank);
  const auto start = std::chrono::steady_clock::now();
  try {
    spawn(ranks, [&](Communicator& comm) {
      check(false, "rank {}: created a communicator with mixed {}", comm.rank(), setting);
    }, so);
    FAIL() << "spawn succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(setting + "=" + a), std::string::npos) << msg;
    EXPECT_NE(msg.find(setting + "=" + b), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(AlgorithmChoice, RanksWithDifferentSettingsFailAtCreation) {
  expectRefusedAtCreation(
      4, [](int rank, Options& o) { o.algo = rank == 2 ? AllReduceAlgo::kTree : AllReduceAlgo::kRing; },
      "GYRE_ALGO", "tree", "ring");
}

// The NIC count decides auto's pick, so it must be equal too: named at creation.
TEST(AlgorithmChoice, RanksWithDifferentNicCountsFailAtCreation) {
  expectRefusedAtCreation(
      3, [](int rank, Options& o) { o.nicsPerHost = rank == 1 ? 8 : 1; }, "GYRE_NICS_PER_HOST",
      "8", "1");
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

// The projection in docs/DESIGN.md: the two-level model's predicted all-reduce time for
// ring, tree and hier at 8..1024 ranks, 8 per host, on 100 Gbit/s host links (12500
// bytes/us, alpha 10 us per hop), inside a host the shm row of collectives/tuning.h
// (2 us, 3.5 GB/s) and a server's (20 GB/s); printed as markdown tables. Checks the shape
// docs/DESIGN.md claims.
// hierUpTo: the most hosts at which hier is claimed to win at 256 MiB.
void projection(const TwoLevelCost& cost, int hierUpTo) {
  const size_t sizes[] = {8, size_t{1} << 20, size_t{256} << 20};
  std::printf("| ranks (hosts) | 8 B ring | tree | hier | 1 MiB ring | tree | hier | 256 MiB ring "
              "| tree | hier |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n = 8; n <= 1024; n *= 2) {
    std::vector<std::string> ids;
    for (int r = 0; r < n; ++r) ids.push_back(std::to_string(r / 8));
    const HostTopology t = HostTopology::fromHostIds(ids);
    std::printf("| %d (%d) |", n, n / 8);
    double big[3] = {};
    for (size_t s : sizes) {
      int i = 0;
      for (AllReduceAlgo a : {AllReduceAlgo::kRing, AllReduceAlgo::kTree, AllReduceAlgo::kHierarchical}) {
        const double us = predictTopologyMicros(a, s, t, cost);
        if (s == sizes[2]) big[i] = us;
        ++i;
        if (us >= 1e4) std::printf(" %.0f ms |", us / 1e3);
        else if (us >= 1e3) std::printf(" %.1f ms |", us / 1e3);
        else std::printf(" %.0f us |", us);
      }
    }
    std::printf("\n");
    if (n >= 16 && n / 8 <= hierUpTo) {
      EXPECT_LT(big[2], big[0]) << n << " ranks: hier beats the ring at 256 MiB";
      EXPECT_LT(big[2], big[1]) << n << " ranks: hier beats the tree at 256 MiB";
    }
  }
}

TEST(TopologyChoice, ProjectionTable) {
  TwoLevelCost cost = twoLevelCost(true, 10.0, 12500.0);
  std::printf("intra-host: the shm row of collectives/tuning.h (%.0f us, %.0f bytes/us)\n",
              cost.intra.alphaUs, cost.intra.bytesPerUs);
  projection(cost, 1 << 30);
  cost.intra.bytesPerUs = 20000;
  std::printf("intra-host: 20 GB/s\n");
  // With fast hosts the link decides, and from 16 hosts on the 8 pieces' chains of
  // 2(H-1) link hops put hier behind the ring (gyre-sim at 16 x 8, 256 MiB: ring 57 ms,
  // tree 68, hier 82).
  projection(cost, 8);
}

}  // namespace
}  // namespace gyre
