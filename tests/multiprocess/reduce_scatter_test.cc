// Reduce-scatter across real processes over loopback (tcp and shm): every dtype and op,
// counts 0, 1, odd and larger than all slots, in place and out of place. Every rank's
// share is exact and nothing past it is written; each share has the bits of the ring
// all-reduce's for the same inputs; ranks that disagree on the call all fail, promptly;
// buffers that overlap without being in place are refused before any traffic.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "collective_test_support.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;
using testing::collectiveOptions;
using testing::kGuard;
using testing::kGuardBytes;
using testing::expectFailsOnEveryRank;



// Rank r's input is the test values for size * count elements; its expected share is
// elements [r * count, (r + 1) * count) of the exact reduction of all of them.
void checkReduceScatter(Communicator& comm, DataType t, ReduceOp op, size_t count,
                        bool inPlace) {
  const size_t n = static_cast<size_t>(comm.size());
  const size_t rank = static_cast<size_t>(comm.rank());
  const size_t shareBytes = count * dtypeSize(t);
  std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), n * count);
  input.resize(n * shareBytes);
  input.resize(n * shareBytes + kGuardBytes, kGuard);
  const std::vector<std::byte> original = input;
  std::vector<std::byte> output(shareBytes + kGuardBytes, kGuard);
  std::byte* recv = inPlace ? input.data() + rank * shareBytes : output.data();
  comm.reduceScatter(input.data(), recv, count, t, op);

  const std::string what =
      fmt::format("rank {}/{}: reducescatter {} {} count {} {}", rank, n, dtypeName(t),
                  opName(op), count, inPlace ? "in place" : "out of place");
  std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), n * count);
  check(std::memcmp(recv, expected.data() + rank * shareBytes, shareBytes) == 0,
        "{}: wrong result", what);
  if (inPlace) {
    // Past the share lie the other shares and then the guard. They are only read (the
    // library does not promise it, but writing them would mean a direct send could
    // have read a half-written value).
    check(std::memcmp(input.data(), original.data(), rank * shareBytes) == 0 &&
              std::memcmp(recv + shareBytes, original.data() + (rank + 1) * shareBytes,
                          (n - rank - 1) * shareBytes + kGuardBytes) == 0,
          "{}: wrote outside this rank's share of sendbuf", what);
  } else {
    for (size_t i = 0; i < kGuardBytes; ++i) {
      check(recv[shareBytes + i] == kGuard, "{}: wrote past the end of recvbuf", what);
    }
    check(input == original, "{}: sendbuf was modified", what);
  }
}

class ReduceScatterRanks : public ::testing::TestWithParam<testing::TransportRanks> {};

TEST_P(ReduceScatterRanks, EveryDtypeOpAndCount) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    comm.reduceScatter(nullptr, nullptr, 0, DataType::kInt32, ReduceOp::kSum);  // null: count 0
    const size_t counts[] = {0, 1, 7, 1009};
    size_t k = 0;
    for (DataType t : testing::kAllTypes) {
      for (ReduceOp op : testing::kAllOps) {
        // The count rotates so that every dtype and every op meets every count.
        checkReduceScatter(comm, t, op, counts[k % 4], false);
        checkReduceScatter(comm, t, op, counts[(k + 1) % 4], true);
        checkReduceScatter(comm, t, op, counts[(k + 2) % 4], k % 2 == 0);
        ++k;
      }
    }
  }, collectiveOptions(transport));
}

TEST_P(ReduceScatterRanks, LargerThanAllSlots) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    const size_t count = 70001;  // per rank: odd, and 1 to 9 times all slots of a pipe
    checkReduceScatter(comm, DataType::kFloat32, ReduceOp::kSum, count, false);
    checkReduceScatter(comm, DataType::kBFloat16, ReduceOp::kAvg, count, true);
    checkReduceScatter(comm, DataType::kInt8, ReduceOp::kMin, count, true);
    checkReduceScatter(comm, DataType::kFloat64, ReduceOp::kProd, count, false);
  }, collectiveOptions(transport));
}

INSTANTIATE_TEST_SUITE_P(Transports, ReduceScatterRanks, testing::everyTransportAndRankCount(),
                         testing::transportRanksName);

// Inexact float inputs (sums that round differently in another order): every share has
// the bits of the ring all-reduce of the same size * count elements, whose chunk r is
// exactly share r and is reduced in the same order.
TEST(ReduceScatter, MatchesRingAllReduceBitForBit) {
  SpawnOptions o = collectiveOptions(TransportKind::kShm);
  o.options.algo = AllReduceAlgo::kRing;
  for (int n : {3, 5}) {
    spawn(n, [](Communicator& comm) {
      const size_t n = static_cast<size_t>(comm.size());
      const size_t rank = static_cast<size_t>(comm.rank());
      const size_t count = 5003;  // a share spans several 16 KiB slices
      for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                         DataType::kBFloat16}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
          const size_t elem = dtypeSize(t);
          std::vector<std::byte> in(n * count * elem), all(n * count * elem), mine(count * elem);
          for (size_t i = 0; i < n * count; ++i) {
            const double v = 1.0 / static_cast<double>(3 + (i * 7 + rank * 13) % 97);
            switch (t) {
              case DataType::kFloat32: reinterpret_cast<float*>(in.data())[i] = float(v); break;
              case DataType::kFloat64: reinterpret_cast<double*>(in.data())[i] = v; break;
              case DataType::kFloat16:
                reinterpret_cast<Float16*>(in.data())[i] = toFloat16(float(v));
                break;
              default: reinterpret_cast<BFloat16*>(in.data())[i] = toBFloat16(float(v)); break;
            }
          }
          comm.allReduce(in.data(), all.data(), n * count, t, op);
          comm.reduceScatter(in.data(), mine.data(), count, t, op);
          check(std::memcmp(mine.data(), all.data() + rank * count * elem, count * elem) == 0,
                "rank {}/{}: {} {}: the share differs from the ring all-reduce's", rank, n,
                dtypeName(t), opName(op));
        }
      }
    }, o);
  }
}

// A reduce-scatter of more than the pipes hold, with the count and op chosen per rank.
void reduceScatterWith(TransportKind transport, int n, const std::function<size_t(int)>& countOf,
                       const std::function<ReduceOp(int)>& opOf) {
  expectFailsOnEveryRank(n, transport, "reducescatter", [&](Communicator& comm) {
    const size_t count = countOf(comm.rank());
    std::vector<float> in(count * static_cast<size_t>(comm.size()) + 1), out(count + 1);
    comm.reduceScatter(in.data(), out.data(), count, DataType::kFloat32, opOf(comm.rank()));
  });
}

TEST(ReduceScatter, DifferentCountFails) {
  auto sum = [](int) { return ReduceOp::kSum; };
  reduceScatterWith(TransportKind::kTcp, 4, [](int r) -> size_t { return r == 1 ? 40001 : 40000; },
                    sum);
  reduceScatterWith(TransportKind::kShm, 2, [](int r) -> size_t { return r == 0 ? 0 : 3; }, sum);
}

TEST(ReduceScatter, DifferentOpFails) {
  reduceScatterWith(TransportKind::kShm, 5, [](int) -> size_t { return 40000; },
                    [](int r) { return r == 3 ? ReduceOp::kMax : ReduceOp::kSum; });
  reduceScatterWith(TransportKind::kTcp, 3, [](int) -> size_t { return 40000; },
                    [](int r) { return r == 0 ? ReduceOp::kAvg : ReduceOp::kSum; });
}

TEST(ReduceScatter, RefusesOverlapThatIsNotInPlace) {
  spawn(3, [](Communicator& comm) {
    const size_t count = 10;
    const size_t rank = static_cast<size_t>(comm.rank());
    std::vector<float> in(3 * count + 1);
    // One element past the in-place share; and, on ranks other than 0 (where it is in
    // place), the start of sendbuf.
    float* bad[] = {in.data() + rank * count + 1, rank == 0 ? nullptr : in.data()};
    for (float* recv : bad) {
      if (recv == nullptr) continue;
      try {
        comm.reduceScatter(in.data(), recv, count, DataType::kFloat32, ReduceOp::kSum);
        check(false, "rank {}: recvbuf at element {} of sendbuf was accepted", rank,
              recv - in.data());
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kInvalidArgument, "rank {}: wrong code: {}", rank,
              e.what());
      }
    }
    // Nothing was sent: a valid in-place call still works.
    for (size_t i = 0; i < 3 * count; ++i) in[i] = static_cast<float>(i + rank);
    comm.reduceScatter(in.data(), in.data() + rank * count, count, DataType::kFloat32,
                       ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(3 * (rank * count + i) + 3);  // ranks 0 + 1 + 2
      check(in[rank * count + i] == want, "rank {}: element {} is {}, want {}", rank, i,
            in[rank * count + i], want);
    }
  }, collectiveOptions(TransportKind::kTcp));
}

}  // namespace
}  // namespace gyre
