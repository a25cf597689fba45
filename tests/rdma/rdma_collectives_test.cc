// The collective suite over GYRE_TRANSPORT=rdma on a real verbs device (soft-RoCE in the
// VM: tools/rdma_vm.sh): all-reduce (ring, tree, rd), broadcast, all-gather,
// reduce-scatter, all-to-all and send/recv on 2-4 ranks, exact checks, counts that
// cross the 16 KiB slots; the lower half of the ranks on RDMA_DEV_A and the upper half
// on RDMA_DEV_B, so every pipe between the halves crosses the veth link. Then a rank
// killed mid-stream: every survivor names it, within seconds. The transport choice line
// at GYRE_DEBUG=INFO is checked too. Without a device every case skips saying why.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "base/error.h"
#include "fork_ranks.h"
#include "rdma_test_support.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::allReduceStream;
using testing::check;

Options rdmaOptions() {
  Options o = Options::fromEnvironment();
  o.transport = TransportKind::kRdma;
  o.timeout = std::chrono::seconds(120);  // emulated: far above what a call takes
  o.slotBytes = 16 * 1024;
  o.slots = 4;
  return o;
}

SpawnOptions spawnOptions(int n, AllReduceAlgo algo = AllReduceAlgo::kAuto) {
  SpawnOptions s;
  s.options = rdmaOptions();
  s.options.algo = algo;
  s.grace = std::chrono::milliseconds(20000);
  s.perRank = [n](int rank, Options& o) { o.ibHca = testing::rdmaHcaFor(rank < (n + 1) / 2 ? 0 : 1); };
  return s;
}

const size_t kCounts[] = {1, 7, 4096 + 3, 60001};  // 4096+3 int32s cross a 16 KiB slot

int32_t value(int rank, size_t i) { return (rank + 1) * static_cast<int32_t>(i % 1000 + 1); }

class RdmaAllReduce : public ::testing::TestWithParam<std::tuple<int, AllReduceAlgo>> {};

TEST_P(RdmaAllReduce, ExactForEveryCount) {
  GYRE_SKIP_WITHOUT_RDMA();
  auto [n, algo] = GetParam();
  spawn(n, [](Communicator& comm) {
    const int n = comm.size();
    for (size_t count : kCounts) {
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = value(comm.rank(), i);
      comm.allReduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const int32_t want = n * (n + 1) / 2 * static_cast<int32_t>(i % 1000 + 1);
        check(out[i] == want, "rank {}: count {} [{}] = {}, want {}", comm.rank(), count, i, out[i], want);
      }
      comm.allReduce(in.data(), in.data(), count, DataType::kInt32, ReduceOp::kMax);  // in place
      for (size_t i = 0; i < count; ++i) check(in[i] == value(n - 1, i), "rank {}: max [{}]", comm.rank(), i);
    }
  }, spawnOptions(n, algo));
}

INSTANTIATE_TEST_SUITE_P(
    Rdma, RdmaAllReduce,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(AllReduceAlgo::kRing, AllReduceAlgo::kTree, AllReduceAlgo::kRecursiveDoubling)),
    [](const auto& info) {
      return fmt::format("{}ranks_{}", std::get<0>(info.param), algoName(std::get<1>(info.param)));
    });

class RdmaCollectives : public ::testing::TestWithParam<int> {};

TEST_P(RdmaCollectives, BroadcastAllGatherReduceScatterAllToAllSendRecv) {
  GYRE_SKIP_WITHOUT_RDMA();
  spawn(GetParam(), [](Communicator& comm) {
    const int n = comm.size(), me = comm.rank();
    for (size_t count : kCounts) {
      for (int root = 0; root < n; ++root) {
        std::vector<int32_t> b(count);
        for (size_t i = 0; i < count; ++i) b[i] = me == root ? value(root, i) : -7;
        comm.broadcast(b.data(), count, DataType::kInt32, root);
        for (size_t i = 0; i < count; ++i) check(b[i] == value(root, i), "broadcast root {} [{}]", root, i);
      }
      std::vector<int32_t> in(count), all(count * n, -1);
      for (size_t i = 0; i < count; ++i) in[i] = value(me, i);
      comm.allGather(in.data(), all.data(), count, DataType::kInt32);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) check(all[r * count + i] == value(r, i), "allGather [{}][{}]", r, i);

      std::vector<int32_t> full(count * n), part(count, -1);
      for (size_t i = 0; i < full.size(); ++i) full[i] = value(me, i);
      comm.reduceScatter(full.data(), part.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const size_t g = me * count + i;
        check(part[i] == n * (n + 1) / 2 * static_cast<int32_t>(g % 1000 + 1), "reduceScatter [{}]", i);
      }

      std::vector<int32_t> a2aIn(count * n), a2aOut(count * n, -1);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) a2aIn[r * count + i] = me * 100000 + r * 1000 + static_cast<int32_t>(i % 1000);
      comm.allToAll(a2aIn.data(), a2aOut.data(), count, DataType::kInt32);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          check(a2aOut[r * count + i] == r * 100000 + me * 1000 + static_cast<int32_t>(i % 1000), "allToAll [{}][{}]", r, i);

      // send/recv around the ring, through both devices.
      std::vector<int32_t> mine(count), got(count, -1);
      for (size_t i = 0; i < count; ++i) mine[i] = value(me, i);
      const int right = (me + 1) % n, left = (me + n - 1) % n;
      comm.sendRecv(mine.data(), count, right, got.data(), count, left, DataType::kInt32);
      for (size_t i = 0; i < count; ++i) check(got[i] == value(left, i), "sendRecv [{}]", i);
    }
  }, spawnOptions(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Rdma, RdmaCollectives, ::testing::Values(2, 4),
                         [](const auto& info) { return fmt::format("{}ranks", info.param); });

TEST(RdmaFaults, KilledRankIsNamedByEverySurvivor) {
  GYRE_SKIP_WITHOUT_RDMA();
  constexpr int kRanks = 4, kVictim = 2;
  Options o = rdmaOptions();
  o.timeout = std::chrono::seconds(60);
  o.logLevel = LogLevel::kInfo;
  o.token = fmt::format("rdmafault{}", ::getpid());
  ::setenv("GYRE_DEBUG", "INFO", 1);  // the log level is read once, in each rank
  testing::CommRanks group(kRanks, o);
  group.perRank = [](int rank, Options& opts) { opts.ibHca = testing::rdmaHcaFor(rank < 2 ? 0 : 1); };
  group.start(allReduceStream(group));
  ASSERT_TRUE(group.waitReady(std::chrono::seconds(120))) << "ranks did not start";
  ASSERT_TRUE(group.tryAwait("streaming", kRanks, std::chrono::seconds(120)));
  const auto killedAt = Clock::now();
  ::kill(group.pid(kVictim), SIGKILL);
  auto reports = group.join(killedAt + std::chrono::seconds(30));
  for (const testing::RankResult& r : reports) {
    EXPECT_FALSE(r.hung) << r.rank << ": " << r.message << "\n" << r.log;
    if (r.rank == kVictim) continue;
    ASSERT_TRUE(r.reported && !r.ok) << r.rank << ": " << r.message << "\n" << r.log;
    EXPECT_NE(r.message.find(fmt::format("rank {} failed", kVictim)), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("allreduce"), std::string::npos) << r.message;
    const double seconds = std::chrono::duration<double>(r.endedAt - killedAt).count();
    EXPECT_LT(seconds, 10.0) << r.message;  // emulated; tcp's bound is 3 s natively
    std::printf("[rdma fault] rank %d: %.0f ms: %s\n", r.rank, seconds * 1e3, r.message.c_str());
    // The INFO line that says which transport each peer got, and why.
    EXPECT_NE(r.log.find("rdma (GYRE_TRANSPORT=rdma"), std::string::npos) << r.log;
  }
}

// Where no device is usable (here: GYRE_IB_HCA names none), GYRE_TRANSPORT=rdma fails the
// communicator's creation on every rank, naming the setting; it runs on every machine.
TEST(RdmaSetup, ForcedRdmaWithoutADeviceFailsClearly) {
  SpawnOptions s;
  s.options = rdmaOptions();
  s.options.timeout = std::chrono::seconds(30);
  s.options.ibHca = "=no_such_hca";
  try {
    spawn(2, [](Communicator&) {}, s);
    FAIL() << "a communicator was made over rdma without a device";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("GYRE_TRANSPORT=rdma, but this rank has no usable RDMA device"), std::string::npos) << m;
    EXPECT_NE(m.find("GYRE_IB_HCA"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace gyre
