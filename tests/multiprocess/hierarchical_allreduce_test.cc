// The hierarchical all-reduce (collectives/hierarchical_allreduce.h) on faked hosts:
// real processes whose GYRE_HOST_ID (Options::hostId) puts them on two or three
// "hosts", so pipes inside a host are shm and pipes across are tcp, as on a cluster.
// Every dtype and op, counts 0, 1, odd, around the chunk bounds and larger than all
// slots, in place and out of place, exact results and bitwise-identical ranks; hosts
// made of consecutive and of interleaved ranks; uneven hosts (3 + 1, 2 + 1 + 1,
// 3 + 2 + 1: the leaders-only form); the two-level broadcast, reduce and all-gather on
// the same layouts, every root; and the topology and its cost model as pure functions.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "collectives/host_topology.h"
#include "collectives/topology_choice.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "allreduce_check.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;
using testing::checkAllReduce;

// hostOf[r]: the fake host of rank r.
SpawnOptions fakeHosts(std::vector<int> hostOf, AllReduceAlgo algo, size_t slotBytes,
                       TransportKind transport = TransportKind::kAuto) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  o.options.slotBytes = slotBytes;
  o.options.algo = algo;
  o.options.transport = transport;
  o.perRank = [hostOf](int rank, Options& opts) {
    opts.hostId = fmt::format("fake-host-{}", hostOf.at(rank));
  };
  return o;
}

void everyDtypeOpAndCount(Communicator& comm) {
  const size_t n = static_cast<size_t>(comm.size());
  for (DataType t : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, n - 1, n + 1, size_t{1009}}) {
        checkAllReduce(comm, t, op, count, false);
        checkAllReduce(comm, t, op, count, true);
      }
    }
  }
  // Larger than all slots (16 KiB x 4) of every pipe, many slices per chunk and shard.
  const size_t large = (1 << 18) + 13;
  for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt64}) {
    checkAllReduce(comm, t, ReduceOp::kSum, large, false);
    checkAllReduce(comm, t, ReduceOp::kAvg, large, true);
  }
  checkAllReduce(comm, DataType::kUint8, ReduceOp::kMax, large, true);
  comm.barrier();
}

struct Layout {
  const char* name;
  std::vector<int> hostOf;
};

class HierarchicalLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(HierarchicalLayouts, ForcedEveryDtypeOpAndCount) {
  const Layout& layout = GetParam();
  spawn(static_cast<int>(layout.hostOf.size()), everyDtypeOpAndCount,
        fakeHosts(layout.hostOf, AllReduceAlgo::kHierarchical, 16 * 1024));
}

TEST_P(HierarchicalLayouts, AutoEveryDtypeOpAndCount) {
  const Layout& layout = GetParam();
  spawn(static_cast<int>(layout.hostOf.size()), everyDtypeOpAndCount,
        fakeHosts(layout.hostOf, AllReduceAlgo::kAuto, 16 * 1024));
}

INSTANTIATE_TEST_SUITE_P(
    FakeHosts, HierarchicalLayouts,
    ::testing::Values(Layout{"2x2", {0, 0, 1, 1}}, Layout{"2x2_interleaved", {0, 1, 0, 1}},
                      Layout{"2x3", {0, 0, 0, 1, 1, 1}}, Layout{"3x2", {0, 0, 1, 1, 2, 2}},
                      Layout{"2x4_interleaved", {0, 0, 1, 1, 0, 0, 1, 1}},
                      // Uneven: the leaders-only form.
                      Layout{"uneven_3plus1", {0, 0, 0, 1}},
                      Layout{"uneven_1plus3_interleaved", {0, 1, 1, 1}},
                      Layout{"uneven_2plus1plus1", {0, 0, 1, 2}},
                      Layout{"uneven_3plus2plus1", {0, 1, 0, 2, 1, 0}}),
    [](const auto& info) { return std::string(info.param.name); });

// Broadcast and reduce from every root, all-gather: exact, in place and out of place.
void otherCollectives(Communicator& comm) {
  const int n = comm.size();
  for (size_t count : {size_t{0}, size_t{1}, size_t{1009}, size_t{(1 << 17) + 3}}) {
    for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kUint8}) {
      const size_t bytes = count * dtypeSize(t);
      const std::string what = fmt::format("rank {}/{}: {} count {}", comm.rank(), n,
                                           dtypeName(t), count);
      for (int root = 0; root < n; ++root) {
        std::vector<std::byte> buf = comm.rank() == root
                                         ? testing::inputBuffer(t, ReduceOp::kSum, root, count)
                                         : std::vector<std::byte>(bytes + 1, std::byte{0x11});
        comm.broadcast(buf.data(), count, t, root);
        const auto want = testing::inputBuffer(t, ReduceOp::kSum, root, count);
        check(testing::sameBytes(buf.data(), want.data(), bytes), "{}: broadcast from {}", what,
              root);
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          std::vector<std::byte> in = testing::inputBuffer(t, op, comm.rank(), count);
          std::vector<std::byte> out(bytes + 1, std::byte{0x5a});
          const bool inPlace = (root + static_cast<int>(op)) % 2 == 0;
          void* recv = inPlace ? in.data() : out.data();
          comm.reduce(in.data(), recv, count, t, op, root);
          if (comm.rank() != root) continue;
          const auto exp = testing::expectedBuffer(t, op, n, count);
          check(testing::sameBytes(recv, exp.data(), bytes), "{}: reduce {} to {}", what,
                opName(op), root);
          check(out[bytes] == std::byte{0x5a}, "{}: reduce wrote past recvbuf", what);
        }
      }
      for (bool inPlace : {false, true}) {
        std::vector<std::byte> all(bytes * n + 1, std::byte{0x33});
        std::vector<std::byte> mine = testing::inputBuffer(t, ReduceOp::kSum, comm.rank(), count);
        std::byte* send = mine.data();
        if (inPlace) {
          if (bytes) std::memcpy(all.data() + bytes * comm.rank(), mine.data(), bytes);
          send = all.data() + bytes * comm.rank();
        }
        comm.allGather(send, all.data(), count, t);
        for (int r = 0; r < n; ++r) {
          const auto want = testing::inputBuffer(t, ReduceOp::kSum, r, count);
          check(testing::sameBytes(all.data() + bytes * r, want.data(), bytes),
                "{}: all-gather share of rank {}{}", what, r, inPlace ? " (in place)" : "");
        }
        check(all[bytes * n] == std::byte{0x33}, "{}: all-gather wrote past recvbuf", what);
      }
    }
  }
  comm.barrier();
}

TEST_P(HierarchicalLayouts, TwoLevelBroadcastReduceAllGather) {
  const Layout& layout = GetParam();
  for (AllReduceAlgo algo : {AllReduceAlgo::kHierarchical, AllReduceAlgo::kAuto}) {
    SCOPED_TRACE(algoName(algo));
    spawn(static_cast<int>(layout.hostOf.size()), otherCollectives,
          fakeHosts(layout.hostOf, algo, 16 * 1024));
  }
}

// The two-level all-gather really runs when forced: a count that disagrees is a
// mismatch naming "[hier]" (the flat ring's tag has no algorithm).
TEST(Hierarchical, AllGatherMismatchNamesTheTwoLevelForm) {
  SpawnOptions o = fakeHosts({0, 0, 1, 1}, AllReduceAlgo::kHierarchical, 16 * 1024);
  o.options.timeout = std::chrono::seconds(10);
  spawn(4, [](Communicator& comm) {
    std::vector<float> mine(64, 1.0f), all(64 * 4);
    try {
      comm.allGather(mine.data(), all.data(), comm.rank() == 2 ? 63 : 64, DataType::kFloat32);
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (e.code() == ErrorCode::kMismatch) {
        check(msg.find("allgather") != std::string::npos && msg.find("[hier]") != std::string::npos,
              "rank {}: no [hier] allgather in '{}'", comm.rank(), msg);
      }
      return;
    }
    check(false, "rank {}: the mismatched all-gather succeeded", comm.rank());
  }, o);
}

TEST(Hierarchical, TcpInsideHostsToo) {
  spawn(4, [](Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{7}, size_t{(1 << 17) + 5}}) {
      checkAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, count, true);
      checkAllReduce(comm, DataType::kInt32, ReduceOp::kAvg, count, false);
    }
  }, fakeHosts({0, 0, 1, 1}, AllReduceAlgo::kHierarchical, 16 * 1024, TransportKind::kTcp));
}

// The fewest slots a pipe may have (2): the early send of each pass still finds room.
TEST(Hierarchical, TwoSlotsPerPipe) {
  SpawnOptions o = fakeHosts({0, 0, 0, 1, 1, 1}, AllReduceAlgo::kHierarchical, 4 * 1024);
  o.options.slots = 2;
  spawn(6, [](Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{5}, size_t{(1 << 16) + 7}}) {
      checkAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, count, true);
      checkAllReduce(comm, DataType::kInt64, ReduceOp::kMin, count, false);
    }
  }, o);
}

// The forced algorithm really runs (it is named in the tag): ranks that disagree on
// the count fail with a mismatch that names "[hier]".
TEST(Hierarchical, MismatchNamesTheHierarchicalCall) {
  SpawnOptions o = fakeHosts({0, 0, 1, 1}, AllReduceAlgo::kHierarchical, 16 * 1024);
  o.options.timeout = std::chrono::seconds(10);
  spawn(4, [](Communicator& comm) {
    std::vector<float> buf(64, 1.0f);
    try {
      comm.allReduce(buf.data(), buf.data(), comm.rank() == 3 ? 63 : 64, DataType::kFloat32,
                     ReduceOp::kSum);
    } catch (const Error& e) {
      const std::string msg = e.what();
      check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError ||
                e.code() == ErrorCode::kAborted,
            "rank {}: unexpected error: {}", comm.rank(), msg);
      if (e.code() == ErrorCode::kMismatch) {
        check(msg.find("[hier]") != std::string::npos, "rank {}: no [hier] in '{}'",
              comm.rank(), msg);
      }
      return;
    }
    check(false, "rank {}: the mismatched all-reduce succeeded", comm.rank());
  }, o);
}

HostTopology topologyOf(const std::vector<int>& hostOf) {
  std::vector<std::string> ids;
  for (int h : hostOf) ids.push_back(fmt::format("h{}", h));
  return HostTopology::fromHostIds(ids);
}

TEST(HostTopology, HostsLocalOrderAndCrossGroups) {
  const HostTopology t = topologyOf({1, 0, 1, 0, 2, 2});
  ASSERT_EQ(t.hostCount(), 3);
  EXPECT_EQ(t.hosts[0], (std::vector<int>{0, 2}));  // hosts in order of their lowest rank
  EXPECT_EQ(t.hosts[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(t.hosts[2], (std::vector<int>{4, 5}));
  EXPECT_EQ(t.localIndexOf, (std::vector<int>{0, 0, 1, 1, 0, 1}));
  EXPECT_TRUE(t.hierarchical());
  EXPECT_EQ(t.crossHostGroup(1), (std::vector<int>{2, 3, 5}));
  EXPECT_EQ(t.describe(), "3 hosts x 2 ranks");

  EXPECT_TRUE(t.evenHierarchical());
  EXPECT_EQ(t.leaders(), (std::vector<int>{0, 1, 4}));
  // From rank 3 (host 1): its host from 3 round to 1, then hosts 2 and 0.
  EXPECT_EQ(t.hostOrderFrom(3), (std::vector<int>{3, 1, 4, 5, 0, 2}));

  const HostTopology uneven = topologyOf({0, 0, 0, 1});
  EXPECT_TRUE(uneven.hierarchical());  // the leaders-only form
  EXPECT_FALSE(uneven.evenHierarchical());
  EXPECT_EQ(uneven.maxRanksPerHost(), 3);
  EXPECT_EQ(uneven.describe(), "2 hosts (3+1 ranks)");
  EXPECT_EQ(uneven.whyFlat(), "");
  EXPECT_FALSE(topologyOf({0, 1, 2, 3}).hierarchical());  // one rank per host
  EXPECT_NE(topologyOf({0, 1, 2, 3}).whyFlat().find("single rank"), std::string::npos);
  EXPECT_FALSE(topologyOf({0, 0, 0, 0}).hierarchical());  // one host
}

TEST(TopologyChoice, HostLinkBytes) {
  const size_t s = 1 << 20;
  // 2 hosts x 4 consecutive ranks: the flat ring crosses each link once with
  // 2(n-1)/n = 1.75 S, the hierarchical schedule sends 2(H-1)/H = 1 S.
  const HostTopology t = topologyOf({0, 0, 0, 0, 1, 1, 1, 1});
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kRing, s, t), 1.75 * s);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kHierarchical, s, t), 1.0 * s);
  // 4 hosts x 1 rank: the double tree's inner ranks send 2 S, the ring 1.5 S.
  const HostTopology flat = topologyOf({0, 1, 2, 3});
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kRing, s, flat), 1.5 * s);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kTree, s, flat), 2.0 * s);
  // 3 + 1: the ring crosses twice with 1.5 S each way; the leaders' ring sends S.
  const HostTopology uneven = topologyOf({0, 0, 0, 1});
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kRing, s, uneven), 1.5 * s);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kHierarchical, s, uneven), 1.0 * s);
}

// GYRE_NICS_PER_HOST: local rank i sends on NIC i mod N, so a host's cross-host bytes
// spread over its NICs. 2 hosts x 4: hier's 4 cross rings each carry S/4 (one ring a
// NIC with 4 NICs); rd's xor-4 partners all cross, S each; the ring's one crossing
// rank per host carries the same 2(n-1)/n S whatever N.
TEST(TopologyChoice, NicsPerHostSpreadTheCrossTraffic) {
  const size_t s = 8 << 20;
  const HostTopology twoByFour = topologyOf({0, 0, 0, 0, 1, 1, 1, 1});
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kHierarchical, s, twoByFour, 1), 1.0 * s);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kHierarchical, s, twoByFour, 4), s / 4.0);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kHierarchical, s, twoByFour, 2), s / 2.0);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kRecursiveDoubling, s, twoByFour, 1),
                   4.0 * s);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kRecursiveDoubling, s, twoByFour, 4),
                   1.0 * s);
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kRing, s, twoByFour, 4),
                   busiestHostLinkBytes(AllReduceAlgo::kRing, s, twoByFour, 1));
  // More NICs than ranks: one a rank, the rest idle.
  EXPECT_DOUBLE_EQ(busiestHostLinkBytes(AllReduceAlgo::kHierarchical, s, twoByFour, 64), s / 4.0);
  // The choice it changes (gyre-sim, 8 x 8 at 25 Gbit/s, 32 KiB: one NIC a rank, rd
  // 165 us and the tree 284; one NIC a host, rd 353 us, behind the tree and hier).
  std::vector<int> hosts;
  for (int r = 0; r < 64; ++r) hosts.push_back(r / 8);
  const HostTopology eightByEight = topologyOf(hosts);
  Options o;
  EXPECT_NE(chooseForTopology(o, 32 << 10, eightByEight, false, twoLevelCost(true, 10, 3125, 1)),
            AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseForTopology(o, 32 << 10, eightByEight, false, twoLevelCost(true, 10, 3125, 8)),
            AllReduceAlgo::kRecursiveDoubling);
  // The constructor keeps it, and never below one.
  EXPECT_EQ(twoLevelCost(true, 10, 3125, 8).nicsPerHost, 8);
  EXPECT_EQ(twoLevelCost(true, 0).nicsPerHost, 1);
  EXPECT_EQ(twoLevelCost(true).nicsPerHost, 1);
}

TEST(TopologyChoice, TwoLevelFormsWhereThePlacementPays) {
  Options o;
  const TwoLevelCost cost = twoLevelCost(true);
  const HostTopology consecutive = topologyOf({0, 0, 0, 0, 1, 1, 1, 1});
  const HostTopology interleaved = topologyOf({0, 1, 0, 1, 0, 1, 0, 1});
  const size_t big = 16 << 20;
  // The flat ring already crosses each boundary once on consecutive hosts: kept.
  for (CollectiveKind k : {CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
    EXPECT_FALSE(chooseTwoLevel(o, k, big, 0, consecutive, cost));
    EXPECT_FALSE(chooseTwoLevel(o, k, big, 5, consecutive, cost));
    EXPECT_TRUE(chooseTwoLevel(o, k, big, 3, interleaved, cost));  // 7 crossings -> 1
  }
  // All-gather: L(H-1) = 4 shares per host link against the flat ring's n - 1 = 7.
  EXPECT_TRUE(chooseTwoLevel(o, CollectiveKind::kAllGather, big / 8, 0, consecutive, cost));
  EXPECT_FALSE(chooseTwoLevel(o, CollectiveKind::kAllGather, big / 8, 0,
                              topologyOf({0, 0, 0, 1}), cost));  // uneven: flat
  EXPECT_FALSE(chooseTwoLevel(o, CollectiveKind::kReduceScatter, big, 0, consecutive, cost));
  // Forced: hier where it applies; any other forced algorithm keeps the flat ring.
  o.algo = AllReduceAlgo::kHierarchical;
  EXPECT_TRUE(chooseTwoLevel(o, CollectiveKind::kBroadcast, 8, 0, consecutive, cost));
  EXPECT_FALSE(chooseTwoLevel(o, CollectiveKind::kBroadcast, 8, 0, topologyOf({0, 1, 2}), cost));
  o.algo = AllReduceAlgo::kRing;
  EXPECT_FALSE(chooseTwoLevel(o, CollectiveKind::kAllGather, big, 0, consecutive, cost));
}

TEST(TopologyChoice, MeasuredConstantsMoveTheCrossover) {
  Options o;
  const HostTopology twoByFour = topologyOf({0, 0, 0, 0, 1, 1, 1, 1});
  // Unmeasured: the fixed constants.
  EXPECT_FALSE(twoLevelCost(true, 0, 0).measured);
  EXPECT_EQ(twoLevelCost(true, 0, 0).inter.alphaUs, twoLevelCost(true).inter.alphaUs);
  const TwoLevelCost fast = twoLevelCost(true, 5, 12500);  // 100 Gbit/s, 5 us per hop
  EXPECT_TRUE(fast.measured);
  EXPECT_EQ(fast.inter.bytesPerUs, 12500);
  // Link-bound sizes pick hier whatever the constants; the predicted time scales with
  // the link rate.
  const TwoLevelCost slow = twoLevelCost(true, 60, 125);
  EXPECT_EQ(chooseForTopology(o, 64 << 20, twoByFour, false, slow), AllReduceAlgo::kHierarchical);
  const double tSlow = predictTopologyMicros(AllReduceAlgo::kHierarchical, 64 << 20, twoByFour, slow);
  EXPECT_NEAR(tSlow, (64 << 20) / 125.0, 0.15 * (64 << 20) / 125.0);
  EXPECT_LT(predictTopologyMicros(AllReduceAlgo::kHierarchical, 64 << 20, twoByFour, fast),
            tSlow / 10);
}

TEST(TopologyChoice, PicksWhatTheLinksFavour) {
  Options o;
  const HostTopology twoByFour = topologyOf({0, 0, 0, 0, 1, 1, 1, 1});
  const HostTopology fourByOne = topologyOf({0, 1, 2, 3});
  EXPECT_EQ(chooseForTopology(o, 64 << 20, twoByFour, false, true), AllReduceAlgo::kHierarchical);
  EXPECT_EQ(chooseForTopology(o, 16 << 20, twoByFour, false, true), AllReduceAlgo::kHierarchical);
  // Link-bound, one rank per host: the ring, not the tree (which sends 4/3 as much).
  for (size_t bytes : {size_t{1} << 20, size_t{16} << 20, size_t{64} << 20}) {
    EXPECT_EQ(chooseForTopology(o, bytes, fourByOne, false, false), AllReduceAlgo::kRing) << bytes;
  }
  // Latency-bound: rd (3 steps) rather than hier's 2(L-1) + 2(H-1) = 8.
  EXPECT_EQ(chooseForTopology(o, 8, fourByOne, false, false), AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseForTopology(o, 8, twoByFour, false, true), AllReduceAlgo::kRecursiveDoubling);
  EXPECT_EQ(chooseForTopology(o, 1 << 20, twoByFour, false, true), AllReduceAlgo::kHierarchical);
  // 3 + 1, link-bound: the leaders' ring (S per link) beats the flat ring (1.5 S); the
  // double tree, whose one cross edge per tree also carries S in all, about ties with it.
  const HostTopology threePlusOne = topologyOf({0, 0, 0, 1});
  const TwoLevelCost cost = twoLevelCost(true);
  EXPECT_NE(chooseForTopology(o, 64 << 20, threePlusOne, false, true), AllReduceAlgo::kRing);
  EXPECT_LT(predictTopologyMicros(AllReduceAlgo::kHierarchical, 64 << 20, threePlusOne, cost),
            0.8 * predictTopologyMicros(AllReduceAlgo::kRing, 64 << 20, threePlusOne, cost));
  // One host: exactly the flat model.
  const HostTopology one = topologyOf({0, 0, 0, 0});
  for (size_t bytes : {size_t{8}, size_t{1} << 20, size_t{64} << 20}) {
    EXPECT_EQ(chooseForTopology(o, bytes, one, true, true), chooseAllReduce(o, bytes, 4, true));
  }
  // Forced: hier only where it applies, else the ring.
  o.algo = AllReduceAlgo::kHierarchical;
  EXPECT_EQ(chooseForTopology(o, 8, twoByFour, false, true), AllReduceAlgo::kHierarchical);
  EXPECT_EQ(chooseForTopology(o, 8, topologyOf({0, 0, 0, 1}), false, true),
            AllReduceAlgo::kHierarchical);  // the leaders-only form
  EXPECT_EQ(chooseForTopology(o, 8, topologyOf({0, 1, 2, 3}), false, true), AllReduceAlgo::kRing);
  o.algo = AllReduceAlgo::kTree;
  EXPECT_EQ(chooseForTopology(o, 64 << 20, twoByFour, false, true), AllReduceAlgo::kTree);
}

}  // namespace
}  // namespace gyre
