// Tree all-reduce (GYRE_ALGO=tree) across real processes over tcp and shm: every dtype
// and op, in place and out of place, counts 0, 1, 2 (one element per tree), odd and
// larger than all slots (also with the minimum of 2 slots per pipe), exact results,
// guard bytes, bitwise-identical outputs on every rank (also for inexact float sums),
// and calls with different counts failing with kMismatch on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;

SpawnOptions treeOptions(TransportKind transport, size_t slotBytes = 16 * 1024, size_t slots = 4) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  o.options.transport = transport;
  o.options.slotBytes = slotBytes;
  o.options.slots = slots;
  o.options.algo = AllReduceAlgo::kTree;
  return o;
}

// Whether every rank holds the same `bytes` at `data` (checked with the tree itself).
void checkSameBitsEverywhere(Communicator& comm, const void* data, size_t bytes,
                             const std::string& what) {
  uint64_t sum = testing::checksum(data, bytes), lo = sum, hi = sum;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  check(lo == hi, "{}: ranks hold different bits", what);
}

// One all-reduce, checked exactly, with a guard byte past recvbuf and sendbuf intact.
void checkAllReduce(Communicator& comm, DataType t, ReduceOp op, size_t count, bool inPlace) {
  const size_t bytes = count * dtypeSize(t);
  std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), count);
  std::vector<std::byte> output(bytes + 1, std::byte{0x5a});
  const std::byte guard = output[bytes];
  const std::byte inputGuard = input[bytes];
  void* recv = inPlace ? input.data() : output.data();
  comm.allReduce(input.data(), recv, count, t, op);
  std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), count);
  const std::string what =
      fmt::format("rank {}/{}: {} {} count {} {}", comm.rank(), comm.size(), dtypeName(t),
                  opName(op), count, inPlace ? "in place" : "out of place");
  check(std::memcmp(recv, expected.data(), bytes) == 0, "{}: wrong result", what);
  check(input[bytes] == inputGuard, "{}: wrote past the end of the buffer", what);
  if (!inPlace) {
    check(output[bytes] == guard, "{}: wrote past the end of recvbuf", what);
    std::vector<std::byte> again = testing::inputBuffer(t, op, comm.rank(), count);
    check(std::memcmp(input.data(), again.data(), bytes) == 0, "{}: sendbuf was modified", what);
  }
  checkSameBitsEverywhere(comm, recv, bytes, what);
}

class TreeAllReduce : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {};

TEST_P(TreeAllReduce, EveryDtypeOpAndEdgeCount) {
  const auto [transport, n] = GetParam();
  spawn(
      n,
      [](Communicator& comm) {
        // 4099 float64 are two 16 KiB slices per tree; 2 puts one element in each tree.
        const size_t counts[] = {0, 1, 2, 4099};
        for (DataType t : testing::kAllTypes) {
          for (ReduceOp op : testing::kAllOps) {
            for (size_t count : counts) {
              checkAllReduce(comm, t, op, count, false);
              checkAllReduce(comm, t, op, count, true);
            }
          }
        }
      },
      treeOptions(transport));
}

TEST_P(TreeAllReduce, LargerThanAllSlots) {
  const auto [transport, n] = GetParam();
  // 16 KiB slots, 2 per pipe (the minimum): each tree's half crosses every slot of
  // every pipe many times, with up and down slices in flight on the same pipes.
  spawn(
      n,
      [](Communicator& comm) {
        const size_t count = (1 << 17) + 13;
        checkAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, count, false);
        checkAllReduce(comm, DataType::kFloat64, ReduceOp::kAvg, count, true);
        checkAllReduce(comm, DataType::kInt8, ReduceOp::kAvg, count, false);
        checkAllReduce(comm, DataType::kBFloat16, ReduceOp::kMax, count, true);
        checkAllReduce(comm, DataType::kUint8, ReduceOp::kProd, count, true);
      },
      treeOptions(transport, 16 * 1024, 2));
}

TEST_P(TreeAllReduce, InexactFloatSumsAreBitwiseIdentical) {
  const auto [transport, n] = GetParam();
  // Random floats: the sum depends on the order of the operands, so only a final value
  // computed once and copied down gives every rank the same bits.
  spawn(
      n,
      [](Communicator& comm) {
        std::mt19937 gen(1234 + static_cast<unsigned>(comm.rank()));
        std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
        for (size_t count : {size_t{3}, size_t{50000}}) {
          std::vector<float> buf(count);
          for (float& v : buf) v = dist(gen);
          comm.allReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kAvg);
          checkSameBitsEverywhere(comm, buf.data(), count * sizeof(float),
                                  fmt::format("rank {}: float32 avg of {}", comm.rank(), count));
        }
      },
      treeOptions(transport, 16 * 1024, 3));
}

INSTANTIATE_TEST_SUITE_P(Transports, TreeAllReduce,
                         ::testing::Combine(::testing::Values(TransportKind::kTcp,
                                                              TransportKind::kShm),
                                            ::testing::Values(1, 2, 3, 4, 5, 7, 8)),
                         [](const auto& info) {
                           return fmt::format("{}_{}ranks", transportName(std::get<0>(info.param)),
                                              std::get<1>(info.param));
                         });

TEST(TreeAllReduce, RepeatedCallsBetweenOtherCollectives) {
  // The pipes are shared with the ring's collectives: nothing of a tree call may be left
  // in them for the next call to trip over.
  spawn(
      6,
      [](Communicator& comm) {
        std::vector<int32_t> buf(3001);
        for (int iter = 0; iter < 20; ++iter) {
          const size_t count = 1 + static_cast<size_t>(iter) * 150;
          for (size_t i = 0; i < count; ++i) buf[i] = comm.rank() + iter + static_cast<int32_t>(i);
          comm.allReduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
          for (size_t i = 0; i < count; ++i) {
            const int32_t want = 15 + 6 * (iter + static_cast<int32_t>(i));
            check(buf[i] == want, "rank {} iteration {} [{}]: got {} want {}", comm.rank(), iter, i,
                  buf[i], want);
          }
          comm.barrier();
          int32_t root = iter;
          comm.broadcast(&root, 1, DataType::kInt32, iter % 6);
        }
      },
      treeOptions(TransportKind::kTcp, 4096));
}

TEST(TreeAllReduce, DifferentCountsFailWithMismatchOnEveryRank) {
  for (TransportKind transport : {TransportKind::kTcp, TransportKind::kShm}) {
    for (size_t oddCount : {size_t{1001}, size_t{0}}) {
      SpawnOptions so = treeOptions(transport);
      so.options.timeout = std::chrono::seconds(30);
      spawn(
          5,
          [oddCount](Communicator& comm) {
            float x = 1;
            comm.allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);  // a matching call first
            std::vector<float> buf(1001);
            const size_t count = comm.rank() == 3 ? oddCount : 1000;
            const auto start = std::chrono::steady_clock::now();
            try {
              comm.allReduce(buf.data(), buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
            } catch (const Error& e) {
              const double took =
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
              check(e.code() == ErrorCode::kMismatch, "rank {}: {} for '{}'", comm.rank(),
                    errorCodeName(e.code()), e.what());
              check(took < 10.0, "rank {}: the mismatch took {} s to surface", comm.rank(), took);
              return;
            }
            check(false, "rank {}: the mismatch went unnoticed", comm.rank());
          },
          so);
    }
  }
}

}  // namespace
}  // namespace gyre
