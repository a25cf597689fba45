// All-gather across real processes over loopback (tcp and shm): every dtype, counts 0,
// 1, odd and larger than all slots, in place and out of place. Every rank's share
// arrives bit for bit at its offset and nothing past recvbuf is written; ranks that
// disagree on the count or dtype all fail, promptly; buffers that overlap without
// being in place are refused before any traffic.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "base/error.h"
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



// Bytes distinct per rank and position (a mixing hash), so a share at the wrong offset
// or from the wrong rank shows. All-gather only moves bytes: any bits will do.
std::vector<std::byte> share(size_t bytes, int rank) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    uint64_t x = (static_cast<uint64_t>(rank) << 40) ^ i;
    x *= 0x9e3779b97f4a7c15ull;
    v[i] = static_cast<std::byte>(x >> 56);
  }
  return v;
}

void checkAllGather(Communicator& comm, DataType t, size_t count, bool inPlace) {
  const size_t shareBytes = count * dtypeSize(t);
  const size_t n = static_cast<size_t>(comm.size());
  const size_t rank = static_cast<size_t>(comm.rank());
  std::vector<std::byte> mine = share(shareBytes, comm.rank());
  mine.resize(shareBytes + kGuardBytes, kGuard);
  const std::vector<std::byte> original = mine;
  std::vector<std::byte> out(n * shareBytes + kGuardBytes, kGuard);
  const void* send = mine.data();
  if (inPlace) {
    if (shareBytes > 0) std::memcpy(out.data() + rank * shareBytes, mine.data(), shareBytes);
    send = out.data() + rank * shareBytes;
  }
  comm.allGather(send, out.data(), count, t);

  const std::string what = fmt::format("rank {}/{}: allgather {} count {} {}", rank, n,
                                       dtypeName(t), count, inPlace ? "in place" : "out of place");
  for (int r = 0; r < comm.size(); ++r) {
    check(testing::sameBytes(out.data() + static_cast<size_t>(r) * shareBytes,
                             share(shareBytes, r).data(), shareBytes),
          "{}: wrong share of rank {}", what, r);
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    check(out[n * shareBytes + i] == kGuard, "{}: wrote past the end of recvbuf", what);
  }
  check(mine == original, "{}: sendbuf was modified", what);
}

class AllGatherRanks : public ::testing::TestWithParam<testing::TransportRanks> {};

TEST_P(AllGatherRanks, EveryDtypeAndCount) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    comm.allGather(nullptr, nullptr, 0, DataType::kFloat32);  // count 0: null is allowed
    for (DataType t : testing::kAllTypes) {
      for (size_t count : {0, 1, 7, 1009}) {
        checkAllGather(comm, t, count, false);
        checkAllGather(comm, t, count, true);
      }
    }
  }, collectiveOptions(transport));
}

TEST_P(AllGatherRanks, LargerThanAllSlots) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    // 100003 bytes to 800024 bytes per share: 1.5 to 12 times all slots of a pipe.
    checkAllGather(comm, DataType::kInt8, 100003, false);
    checkAllGather(comm, DataType::kFloat32, 100003, true);
    checkAllGather(comm, DataType::kBFloat16, 100003, false);
    checkAllGather(comm, DataType::kFloat64, 100003, true);
  }, collectiveOptions(transport));
}

INSTANTIATE_TEST_SUITE_P(Transports, AllGatherRanks, testing::everyTransportAndRankCount(),
                         testing::transportRanksName);

// An all-gather of more than the pipes hold, with the count and dtype chosen per rank.
void allGatherWith(TransportKind transport, int n, const std::function<size_t(int)>& countOf,
                   const std::function<DataType(int)>& dtypeOf) {
  expectFailsOnEveryRank(n, transport, "allgather", [&](Communicator& comm) {
    const size_t count = countOf(comm.rank());
    const DataType t = dtypeOf(comm.rank());
    const size_t bytes = count * dtypeSize(t);
    std::vector<std::byte> in(bytes + 1), out(bytes * static_cast<size_t>(comm.size()) + 1);
    comm.allGather(in.data(), out.data(), count, t);
  });
}

TEST(AllGather, DifferentCountFails) {
  auto f32 = [](int) { return DataType::kFloat32; };
  allGatherWith(TransportKind::kTcp, 4, [](int r) -> size_t { return r == 2 ? 50001 : 50000; },
                f32);
  allGatherWith(TransportKind::kShm, 3, [](int r) -> size_t { return r == 0 ? 0 : 1; }, f32);
  allGatherWith(TransportKind::kTcp, 2, [](int r) -> size_t { return r == 1 ? 0 : 1; }, f32);
}

TEST(AllGather, DifferentDtypeOfTheSameSizeFails) {
  allGatherWith(TransportKind::kShm, 5, [](int) -> size_t { return 50000; },
                [](int r) { return r == 4 ? DataType::kInt32 : DataType::kFloat32; });
}

TEST(AllGather, RefusesOverlapThatIsNotInPlace) {
  spawn(3, [](Communicator& comm) {
    const size_t count = 10;
    const size_t rank = static_cast<size_t>(comm.rank());
    std::vector<float> out(3 * count + 1);
    // One element past the in-place share; and, on ranks other than 0 (where it is in
    // place), the start of recvbuf.
    const float* bad[] = {out.data() + rank * count + 1, rank == 0 ? nullptr : out.data()};
    for (const float* send : bad) {
      if (send == nullptr) continue;
      try {
        comm.allGather(send, out.data(), count, DataType::kFloat32);
        check(false, "rank {}: sendbuf at element {} of recvbuf was accepted", rank,
              send - out.data());
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kInvalidArgument, "rank {}: wrong code: {}", rank,
              e.what());
      }
    }
    // Nothing was sent: a valid in-place call still works.
    for (size_t i = 0; i < count; ++i) out[rank * count + i] = static_cast<float>(rank);
    comm.allGather(out.data() + rank * count, out.data(), count, DataType::kFloat32);
    for (size_t i = 0; i < 3 * count; ++i) {
      check(out[i] == static_cast<float>(i / count), "rank {}: element {} is {}", rank, i, out[i]);
    }
  }, collectiveOptions(TransportKind::kTcp));
}

}  // namespace
}  // namespace gyre
