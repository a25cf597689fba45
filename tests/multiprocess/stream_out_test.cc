// The large-call path of the primitives (collectives/primitives.h): calls of at least
// Primitives::kStreamOutMinBytes over shm write their results to user memory with
// non-temporal stores (host_kernels/stream_copy.h) and fuse the slot writes. Checks
// streamCopy against memcpy at every alignment, then all-reduce (ring and tree, in and
// out of place, counts that end mid-line), broadcast and all-gather above the threshold,
// exactly, over shm and over mixed shm/tcp rings.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <vector>

#include "collectives/primitives.h"
#include "host_kernels/stream_copy.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "allreduce_check.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;
using testing::checkAllReduce;

TEST(StreamCopy, MatchesMemcpyAtEveryAlignmentAndLength) {
  std::vector<unsigned char> src(4096 + 128), dst(4096 + 256), want(dst.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  const size_t lengths[] = {0, 1, 15, 16, 63, 64, 65, 127, 128, 200, 1000, 4096};
  for (size_t dstOff = 0; dstOff < 64; ++dstOff) {
    for (size_t srcOff = 0; srcOff < 64; srcOff += 5) {
      for (size_t len : lengths) {
        std::fill(dst.begin(), dst.end(), 0xa5);
        want = dst;
        std::memcpy(want.data() + dstOff, src.data() + srcOff, len);
        streamCopy(dst.data() + dstOff, src.data() + srcOff, len);
        ASSERT_EQ(dst, want) << "dst offset " << dstOff << ", src offset " << srcOff
                             << ", length " << len;
      }
    }
  }
}

SpawnOptions shmOptions(bool mixed) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(120);
  o.options.transport = mixed ? TransportKind::kAuto : TransportKind::kShm;
  if (mixed) {
    o.perRank = [](int rank, Options& opts) {
      opts.hostId = rank < 2 ? "fake-host-a" : "fake-host-b";
    };
  }
  return o;
}

// Counts a little above the threshold whose byte size is not a multiple of a cache line.
size_t aboveThreshold(DataType t) { return Primitives::kStreamOutMinBytes / dtypeSize(t) + 13; }

void largeAllReduces(int n, AllReduceAlgo algo, bool mixed) {
  SpawnOptions o = shmOptions(mixed);
  o.options.algo = algo;
  spawn(n, [](Communicator& comm) {
    checkAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, aboveThreshold(DataType::kFloat32), true);
    checkAllReduce(comm, DataType::kFloat32, ReduceOp::kAvg, aboveThreshold(DataType::kFloat32), false);
    checkAllReduce(comm, DataType::kBFloat16, ReduceOp::kSum, aboveThreshold(DataType::kBFloat16), false);
    checkAllReduce(comm, DataType::kInt8, ReduceOp::kMax, aboveThreshold(DataType::kInt8), true);
  }, o);
}

TEST(StreamOut, RingAllReduceShm4Ranks) { largeAllReduces(4, AllReduceAlgo::kRing, false); }
TEST(StreamOut, RingAllReduceShm3Ranks) { largeAllReduces(3, AllReduceAlgo::kRing, false); }
TEST(StreamOut, TreeAllReduceShm4Ranks) { largeAllReduces(4, AllReduceAlgo::kTree, false); }
TEST(StreamOut, RingAllReduceMixedShmTcp) { largeAllReduces(4, AllReduceAlgo::kRing, true); }

TEST(StreamOut, BroadcastAndAllGatherShm) {
  spawn(4, [](Communicator& comm) {
    const size_t count = Primitives::kStreamOutMinBytes / 4 + 5;  // float32 elements
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = comm.rank() == 1 ? static_cast<float>(i % 4099) : -1.0f;
    comm.broadcast(buf.data(), count, DataType::kFloat32, 1);
    for (size_t i = 0; i < count; ++i) {
      check(buf[i] == static_cast<float>(i % 4099), "rank {}: broadcast element {} is {}",
            comm.rank(), i, buf[i]);
    }
    // An all-gather's call counts one rank's block: that block is above the threshold.
    const size_t per = Primitives::kStreamOutMinBytes / 4 + 3;
    std::vector<int32_t> mine(per), all(per * comm.size(), -1);
    for (size_t i = 0; i < per; ++i) mine[i] = static_cast<int32_t>(comm.rank() * 1000003 + i);
    comm.allGather(mine.data(), all.data(), per, DataType::kInt32);
    for (int r = 0; r < comm.size(); ++r) {
      for (size_t i = 0; i < per; ++i) {
        check(all[r * per + i] == static_cast<int32_t>(r * 1000003 + i),
              "rank {}: all-gather block {} element {} is {}", comm.rank(), r, i, all[r * per + i]);
      }
    }
  }, shmOptions(false));
}

}  // namespace
}  // namespace gyre
