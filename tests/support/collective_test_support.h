// Shared by the multi-process tests of the collectives beyond all-reduce (all-gather,
// reduce-scatter, reduce, all-to-all): spawn options with small slots, so that large
// counts cross every slot; the transport's name for test names; guard bytes; and the
// check that ranks that disagree on a call all fail in it; the parameters of the suites
// run per transport and rank count.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/error.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre::testing {

// Suites parameterized by (transport, ranks): tcp and shm at 1, 2, 3, 5 and 8 ranks,
// named tcp_3ranks etc.
using TransportRanks = std::tuple<TransportKind, int>;
inline auto everyTransportAndRankCount() {
  return ::testing::Combine(::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                            ::testing::Values(1, 2, 3, 5, 8));
}
inline std::string transportRanksName(const ::testing::TestParamInfo<TransportRanks>& info) {
  return fmt::format("{}_{}ranks", transportName(std::get<0>(info.param)), std::get<1>(info.param));
}

// Byte j of the block rank `from` sends rank `to` in call `call` of an all-to-all: a
// hash of all four, so a block from the wrong rank, for the wrong rank, at the wrong
// offset or left over from an earlier call shows.
inline std::byte blockByte(int from, int to, size_t call, size_t j) {
  uint64_t x = (static_cast<uint64_t>(from) << 56) ^ (static_cast<uint64_t>(to) << 48) ^
               (static_cast<uint64_t>(call) << 32) ^ j;
  x = (x + 1) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return static_cast<std::byte>(x);
}

constexpr size_t kGuardBytes = 16;
constexpr std::byte kGuard{0x5a};

// 4 slots of 16 KiB per pipe: large counts cross every slot.
inline SpawnOptions collectiveOptions(TransportKind transport) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(30);
  o.options.transport = transport;
  o.options.slotBytes = 16 * 1024;
  o.options.slots = 4;
  return o;
}

// Runs `call` on every rank, where the ranks disagree. When every rank's result depends on
// every other rank's share, every rank must fail in the call itself: kMismatch where it
// saw the other call, or the abort of the rank that did, well within the timeout; the
// communicator is aborted afterwards.
inline void expectFailsOnEveryRank(int n, TransportKind transport, const char* collective,
                                   const std::function<void(Communicator&)>& call) {
  spawn(n, [&](Communicator& comm) {
    const auto start = std::chrono::steady_clock::now();
    try {
      call(comm);
    } catch (const Error& e) {
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError ||
                e.code() == ErrorCode::kAborted,
            "rank {}: unexpected error: {}", comm.rank(), e.what());
      check(took < 10.0, "rank {}: failed only after {} s: {}", comm.rank(), took, e.what());
      try {
        comm.barrier();
      } catch (const Error& after) {
        check(after.code() == ErrorCode::kAborted, "rank {}: after: {}", comm.rank(),
              after.what());
        return;
      }
      check(false, "rank {}: the communicator still works after the mismatch", comm.rank());
    }
    check(false, "rank {}: the mismatched {} succeeded", comm.rank(), collective);
  }, collectiveOptions(transport));
}

}  // namespace gyre::testing
