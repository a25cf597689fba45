// The all-reduce between two real "hosts": network namespaces joined by a veth pair
// shaped by tbf (tests/netns_hosts.h), several ranks in each, so pipes inside a host are
// shm and pipes across go through the shaped link, as on a cluster. Every algorithm
// forced and auto, on 2 + 2, 3 + 3 and uneven 3 + 1 ranks: every dtype and op, edge
// counts and a buffer larger than all slots, exact results, identical bits on every
// rank, and bytes counted by the link's qdisc (the traffic really crossed it); and the
// link cut in the middle of hierarchical all-reduces: every rank fails within its
// timeout, naming a rank on the other host. Needs
// root and iproute2: skipped, saying why, otherwise.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "netns_hosts.h"
#include "rank_harness.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"
#include "test_values.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::check;
using testing::NamespaceHosts;
using testing::RankGroup;
using testing::RankReport;

void checkAllReduce(Communicator& comm, DataType t, ReduceOp op, size_t count, bool inPlace) {
  const size_t bytes = count * dtypeSize(t);
  std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), count);
  std::vector<std::byte> output(bytes + 1, std::byte{0x5a});
  void* recv = inPlace ? input.data() : output.data();
  comm.allReduce(input.data(), recv, count, t, op);
  const std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), count);
  const std::string what = fmt::format("rank {}/{} ({}): {} {} count {} {}", comm.rank(),
                                       comm.size(), comm.allReduceAlgorithm(bytes), dtypeName(t),
                                       opName(op), count, inPlace ? "in place" : "out of place");
  check(testing::sameBytes(recv, expected.data(), bytes), "{}: wrong result", what);
  if (!inPlace) check(output[bytes] == std::byte{0x5a}, "{}: wrote past recvbuf", what);
  uint64_t sum = testing::checksum(recv, bytes), lo = sum, hi = sum;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  check(lo == hi, "{}: ranks hold different bits", what);
}

void everyDtypeOpAndCount(Communicator& comm, int) {
  const size_t n = static_cast<size_t>(comm.size());
  for (DataType t : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (size_t count : {size_t{0}, size_t{1}, n + 1, size_t{1009}}) {
        checkAllReduce(comm, t, op, count, false);
        checkAllReduce(comm, t, op, count, true);
      }
    }
  }
  const size_t large = (1 << 18) + 13;  // 1 MiB of floats: many slices on every pipe
  checkAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, large, false);
  checkAllReduce(comm, DataType::kFloat32, ReduceOp::kAvg, large, true);
  checkAllReduce(comm, DataType::kInt32, ReduceOp::kMax, large, true);
  comm.barrier();
}

// inA[r]: whether rank r is on host a (rank 0, serving the store, must be).
void runOnTwoHosts(const std::vector<bool>& inA, const std::vector<AllReduceAlgo>& algos) {
  NamespaceHosts net("hier", "10.214.0", {"1gbit"});
  if (!net.ok()) GTEST_SKIP() << net.why();
  const int n = static_cast<int>(inA.size());
  int port = 29531;
  for (AllReduceAlgo algo : algos) {
    SCOPED_TRACE(algoName(algo));
    const long long before = net.bytesSentByA();
    Options o;
    o.timeout = 60s;
    o.slotBytes = 32 * 1024;
    o.algo = algo;
    o.token = fmt::format("netns-hier-{}-{}-{}", ::getpid(), n, port);
    RankGroup group(n, o);
    group.masterAddr = net.address(true);
    group.beforeCreate = [&](int rank) { net.enter(inA[rank]); };
    group.makeStore = [&, port](int rank) -> std::shared_ptr<Store> {
      if (rank == 0) return TcpStore::serve(net.address(true), port, o.timeout);
      return TcpStore::connect(net.address(true), port, o.timeout);
    };
    group.start(everyDtypeOpAndCount);
    ASSERT_TRUE(group.waitReady(30s)) << "the ranks did not connect across the namespaces";
    const auto reports = group.join(Clock::now() + 200s);
    for (const RankReport& r : reports) {
      EXPECT_TRUE(r.reported && r.ok && !r.hung)
          << "rank " << r.rank << ": " << r.message << "\n" << r.log;
    }
    // At least the large buffers' share that host a must send to host b.
    const long long sent = net.bytesSentByA() - before;
    EXPECT_GT(sent, 3LL << 20) << "the traffic did not cross the shaped link";
    std::printf("[netns] %d ranks, GYRE_ALGO=%s: ok, %lld bytes through host a's link\n", n,
                algoName(algo), sent);
    ++port;
  }
}

const std::vector<AllReduceAlgo> kEvery = {AllReduceAlgo::kHierarchical, AllReduceAlgo::kAuto, AllReduceAlgo::kRing,
                                      AllReduceAlgo::kTree, AllReduceAlgo::kRecursiveDoubling};

TEST(NetnsHierarchical, TwoHostsOfTwoRanks) { runOnTwoHosts({true, true, false, false}, kEvery); }

TEST(NetnsHierarchical, TwoHostsOfThreeRanks) {
  runOnTwoHosts({true, true, true, false, false, false}, {AllReduceAlgo::kHierarchical,
                                                          AllReduceAlgo::kAuto});
}

TEST(NetnsHierarchical, UnevenThreePlusOne) {  // hier falls back to the ring
  runOnTwoHosts({true, true, true, false}, {AllReduceAlgo::kHierarchical, AllReduceAlgo::kAuto});
}

// The link between the hosts goes down while hierarchical all-reduces stream: the ranks
// on each side that wait across it time out naming a rank on the far side, and their
// host mates learn it through the abort (a failure naming the culprit), within the
// per-operation timeout plus slack, never a hang.
TEST(NetnsHierarchical, LinkCutMidCollectiveFailsNamingTheFarSide) {
  NamespaceHosts net("hier", "10.214.0", {"1gbit"});
  if (!net.ok()) GTEST_SKIP() << net.why();
  const std::vector<bool> inA = {true, true, false, false};
  Options o;
  o.timeout = 2s;
  o.stallWarn = 1s;
  o.algo = AllReduceAlgo::kHierarchical;
  o.token = fmt::format("netns-hier-cut-{}", ::getpid());
  RankGroup group(4, o);
  group.masterAddr = net.address(true);
  group.beforeCreate = [&](int rank) { net.enter(inA[rank]); };
  group.makeStore = [&](int rank) -> std::shared_ptr<Store> {
    if (rank == 0) return TcpStore::serve(net.address(true), 29539, o.timeout * 10);
    return TcpStore::connect(net.address(true), 29539, o.timeout * 10);
  };
  group.start([](Communicator& comm, int) {
    std::vector<float> buf(1 << 20);
    for (;;) comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  });
  ASSERT_TRUE(group.waitReady(30s)) << "the ranks did not connect across the namespaces";
  std::this_thread::sleep_for(300ms);
  const auto cutAt = Clock::now();
  ASSERT_TRUE(net.cut());
  const auto reports = group.join(cutAt + o.timeout + 6s);
  double worst = 0;
  for (const RankReport& r : reports) {
    SCOPED_TRACE(fmt::format("rank {}", r.rank));
    ASSERT_TRUE(r.reported && !r.ok && !r.hung) << r.message << "\n" << r.log;
    EXPECT_NE(r.message.find("[hier]"), std::string::npos) << r.message;
    bool named = false;
    for (int other = 0; other < 4; ++other) {
      if (inA[other] != inA[r.rank]) {
        named |= r.message.find(fmt::format("rank {} stalled", other)) != std::string::npos ||
                 r.message.find(fmt::format("rank {} failed", other)) != std::string::npos;
      }
    }
    EXPECT_TRUE(named) << r.message;
    const double seconds = testing::secondsBetween(cutAt, r.errorAt);
    worst = std::max(worst, seconds);
    EXPECT_LT(seconds, 2.0 + 2.0) << r.message;
  }
  std::printf("[fault] hier, link cut (2 hosts x 2 ranks): worst fault->error %.2f s\n"
              "[fault] example error: %s\n", worst, reports[1].message.c_str());
}

}  // namespace
}  // namespace gyre
