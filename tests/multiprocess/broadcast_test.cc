// Broadcast across real processes: every root, every dtype, counts around the slot
// boundaries, tcp and shm; the root's buffer arrives bit for bit; a call whose root
// differs between ranks fails on every rank instead of delivering the wrong data.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;

SpawnOptions options(TransportKind transport) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(30);
  o.options.transport = transport;
  o.options.slotBytes = 16 * 1024;  // large counts cross many slots
  return o;
}

// Distinct bytes per root, index and dtype, so a slice from the wrong place shows.
std::vector<std::byte> pattern(size_t bytes, int root) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((i * 31 + root * 7 + 1) & 0xff);
  return v;
}

class BroadcastRanks : public ::testing::TestWithParam<std::tuple<TransportKind, int>> {};

TEST_P(BroadcastRanks, EveryRootDtypeAndCount) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    const size_t counts[] = {0, 1, 7, 10007, 100003};
    for (int root = 0; root < comm.size(); ++root) {
      for (DataType t : testing::kAllTypes) {
        for (size_t count : counts) {
          const size_t bytes = count * dtypeSize(t);
          std::vector<std::byte> want = pattern(bytes + 1, root);
          std::vector<std::byte> buf = comm.rank() == root ? want : pattern(bytes + 1, root + 99);
          const std::byte guard = buf[bytes];
          comm.broadcast(buf.data(), count, t, root);
          check(std::memcmp(buf.data(), want.data(), bytes) == 0,
                "rank {}: broadcast of {} {} from root {} differs", comm.rank(), count,
                dtypeName(t), root);
          check(buf[bytes] == guard, "rank {}: wrote past the buffer", comm.rank());
        }
      }
    }
  }, options(transport));
}

INSTANTIATE_TEST_SUITE_P(
    Transports, BroadcastRanks,
    ::testing::Combine(::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                       ::testing::Values(1, 2, 3, 5, 8)),
    [](const auto& info) {
      return fmt::format("{}_{}ranks",
                         std::get<0>(info.param) == TransportKind::kTcp ? "tcp" : "shm",
                         std::get<1>(info.param));
    });

TEST(Broadcast, MismatchedRootsFailOnEveryRank) {
  // Ranks 0 and 1 say root 0, ranks 2 and 3 say root 2: the tags differ, so whoever
  // receives a slice of the other call reports a mismatch and everyone fails promptly.
  try {
    spawn(4, [](Communicator& comm) {
      std::vector<float> buf(1000, static_cast<float>(comm.rank()));
      const int root = comm.rank() < 2 ? 0 : 2;
      try {
        comm.broadcast(buf.data(), buf.size(), DataType::kFloat32, root);
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError ||
                  e.code() == ErrorCode::kAborted,
              "rank {}: unexpected error code: {}", comm.rank(), e.what());
        throw;
      }
      check(false, "rank {}: a mismatched broadcast succeeded", comm.rank());
    }, options(TransportKind::kTcp));
    FAIL() << "spawn reported no failure";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("root"), std::string::npos) << msg;
  }
}

// Only the root disagrees (rank 0 says root 2, the others root 0), over many slices: with
// the ring closed at the end, every rank waited to receive and it took the timeout; now
// the closing slice goes first, so the disagreement is a mismatch at once.
TEST(Broadcast, ARootThatNamesAnotherRootFailsPromptly) {
  SpawnOptions o = options(TransportKind::kShm);
  o.options.timeout = std::chrono::seconds(20);
  const auto start = std::chrono::steady_clock::now();
  try {
    spawn(4, [](Communicator& comm) {
      std::vector<float> buf(100000, static_cast<float>(comm.rank()));
      const int root = comm.rank() == 0 ? 2 : 0;
      comm.broadcast(buf.data(), buf.size(), DataType::kFloat32, root);
      check(false, "rank {}: a mismatched broadcast succeeded", comm.rank());
    }, o);
    FAIL() << "spawn reported no failure";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast #0"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(Broadcast, RejectsABadRoot) {
  spawn(2, [](Communicator& comm) {
    float x = 1;
    try {
      comm.broadcast(&x, 1, DataType::kFloat32, 2);
    } catch (const Error& e) {
      check(e.code() == ErrorCode::kInvalidArgument, "wrong code: {}", e.what());
      comm.broadcast(&x, 1, DataType::kFloat32, 0);  // still usable: nothing was sent
      return;
    }
    check(false, "root 2 of 2 was accepted");
  }, options(TransportKind::kTcp));
}

}  // namespace
}  // namespace gyre
