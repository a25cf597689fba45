// The all-reduce between two real "hosts": network namespaces joined by a veth pair
// shaped by tbf (tests/netns_hosts.h), several ranks in each, so pipes inside a host are
// shm and pipes across go through the shaped link, as on a cluster. Every algorithm
// forced and auto, on 2 + 2, 3 + 3 and uneven 3 + 1 ranks: every dtype and op, edge
// counts and a buffer larger than all slots, exact results, identical bits on every
// rank, and bytes counted by the link's qdisc (the traffic really crossed it). Needs
// root and iproute2: skipped, saying why, otherwise.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
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
void runOnTwoHosts(const std::vector<bool>& inA, const std::vector<AlgoKind>& algos) {
  NamespaceHosts net("1gbit");
  if (!net.ok()) GTEST_SKIP() << net.why();
  const int n = static_cast<int>(inA.size());
  int port = 29531;
  for (AlgoKind algo : algos) {
    SCOPED_TRACE(algoKindName(algo));
    const long long before = net.bytesSentByA();
    Options o;
    o.timeout = 60s;
    o.slotBytes = 32 * 1024;
    o.algo = algo;
    o.token = fmt::format("netns-hier-{}-{}-{}", ::getpid(), n, port);
    RankGroup group(n, o);
    group.masterAddr = NamespaceHosts::addressOf(true);
    group.beforeCreate = [&](int rank) { net.enter(inA[rank]); };
    group.makeStore = [&, port](int rank) -> std::shared_ptr<Store> {
      if (rank == 0) return TcpStore::serve(NamespaceHosts::addressOf(true), port, o.timeout);
      return TcpStore::connect(NamespaceHosts::addressOf(true), port, o.timeout);
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
                algoKindName(algo), sent);
    ++port;
  }
}

const std::vector<AlgoKind> kEvery = {AlgoKind::kHierarchical, AlgoKind::kAuto, AlgoKind::kRing,
                                      AlgoKind::kTree, AlgoKind::kRecursiveDoubling};

TEST(NetnsHierarchical, TwoHostsOfTwoRanks) { runOnTwoHosts({true, true, false, false}, kEvery); }

TEST(NetnsHierarchical, TwoHostsOfThreeRanks) {
  runOnTwoHosts({true, true, true, false, false, false}, {AlgoKind::kHierarchical,
                                                          AlgoKind::kAuto});
}

TEST(NetnsHierarchical, UnevenThreePlusOne) {  // hier falls back to the ring
  runOnTwoHosts({true, true, true, false}, {AlgoKind::kHierarchical, AlgoKind::kAuto});
}

}  // namespace
}  // namespace gyre
