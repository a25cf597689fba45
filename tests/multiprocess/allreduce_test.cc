// All-reduce across real processes over loopback: every dtype and op, in place and
// out of place, counts around the chunk and slot boundaries, exact results, and
// bitwise-identical outputs on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "store/tcp_store.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;

// How the ranks of a test are connected.
enum class Wiring { kTcp, kShm, kMixed };

const char* wiringName(Wiring w) {
  switch (w) {
    case Wiring::kTcp: return "tcp";
    case Wiring::kShm: return "shm";
    case Wiring::kMixed: return "mixed";
  }
  return "?";
}

SpawnOptions testOptions(size_t slotBytes = 512 * 1024, Wiring wiring = Wiring::kTcp) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  o.options.slotBytes = slotBytes;
  o.options.transport = wiring == Wiring::kTcp   ? TransportKind::kTcp
                        : wiring == Wiring::kShm ? TransportKind::kShm
                                                 : TransportKind::kAuto;
  if (wiring == Wiring::kMixed) {
    // Two fake hosts, the lower half of the ranks on one: the ring then has shm pipes
    // inside each half and tcp pipes where it crosses between them.
    o.perRank = [](int rank, Options& opts) {
      opts.hostId = rank % 4 < 2 ? "fake-host-a" : "fake-host-b";
    };
  }
  return o;
}

// Runs one all-reduce and checks it exactly, and that every rank holds the same bits.
void checkAllReduce(Communicator& comm, DataType t, ReduceOp op, size_t count, bool inPlace) {
  const size_t bytes = count * dtypeSize(t);
  std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), count);
  std::vector<std::byte> output(bytes + 1, std::byte{0x5a});
  const std::byte guard = output[bytes];
  void* recv = inPlace ? input.data() : output.data();
  comm.allReduce(input.data(), recv, count, t, op);
  std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), count);
  const std::string what = fmt::format("rank {}/{}: {} {} count {} {}", comm.rank(), comm.size(),
                                       dtypeName(t), opName(op), count,
                                       inPlace ? "in place" : "out of place");
  check(std::memcmp(recv, expected.data(), bytes) == 0, "{}: wrong result", what);
  if (!inPlace) {
    check(output[bytes] == guard, "{}: wrote past the end of recvbuf", what);
    std::vector<std::byte> again = testing::inputBuffer(t, op, comm.rank(), count);
    check(std::memcmp(input.data(), again.data(), bytes) == 0, "{}: sendbuf was modified", what);
  }
  uint64_t sum = testing::checksum(recv, bytes), lo = sum, hi = sum;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  check(lo == hi, "{}: ranks hold different bits", what);
}

class AllReduceRanks : public ::testing::TestWithParam<std::tuple<Wiring, int>> {};

// Every dtype, op and edge count under each algorithm: the small counts take recursive
// doubling under auto, so the ring is forced once too.
void everyDtypeOpAndEdgeCount(Wiring wiring, int n, AllReduceAlgo algo) {
  SpawnOptions o = testOptions(512 * 1024, wiring);
  o.options.algo = algo;
  spawn(n, [n = n](Communicator& comm) {
    check(comm.size() == n && comm.rank() >= 0 && comm.rank() < n, "bad rank/size");
    const size_t counts[] = {0, 1, static_cast<size_t>(n - 1), 1009};
    for (DataType t : testing::kAllTypes) {
      for (ReduceOp op : testing::kAllOps) {
        for (size_t count : counts) {
          checkAllReduce(comm, t, op, count, false);
          checkAllReduce(comm, t, op, count, true);
        }
      }
    }
  }, o);
}

TEST_P(AllReduceRanks, EveryDtypeOpAndEdgeCount) {
  const auto [wiring, n] = GetParam();
  everyDtypeOpAndEdgeCount(wiring, n, AllReduceAlgo::kAuto);
}

TEST_P(AllReduceRanks, EveryDtypeOpAndEdgeCountRing) {
  const auto [wiring, n] = GetParam();
  everyDtypeOpAndEdgeCount(wiring, n, AllReduceAlgo::kRing);
}

TEST_P(AllReduceRanks, LargerThanAllSlots) {
  const auto [wiring, n] = GetParam();
  // 16 KiB slots x 4: a 1 MiB-plus buffer crosses every slot many times per chunk.
  spawn(n, [](Communicator& comm) {
    const size_t count = (1 << 18) + 13;
    for (DataType t : {DataType::kFloat32, DataType::kInt8, DataType::kBFloat16,
                       DataType::kFloat64}) {
      checkAllReduce(comm, t, ReduceOp::kSum, count, false);
      checkAllReduce(comm, t, ReduceOp::kAvg, count, true);
    }
    checkAllReduce(comm, DataType::kInt32, ReduceOp::kMax, count, true);
    checkAllReduce(comm, DataType::kUint8, ReduceOp::kProd, count, false);
  }, testOptions(16 * 1024, wiring));
}

INSTANTIATE_TEST_SUITE_P(
    Wirings, AllReduceRanks,
    ::testing::Combine(::testing::Values(Wiring::kTcp, Wiring::kShm, Wiring::kMixed),
                       ::testing::Values(1, 2, 3, 4, 5, 8)),
    [](const auto& info) {
      return fmt::format("{}_{}ranks", wiringName(std::get<0>(info.param)),
                         std::get<1>(info.param));
    });

// GYRE_SLOT_BYTES unset: 512 KiB slots where every pipe is tcp, 128 KiB where some are
// shm (slotBytesFor, transport_options.h), the same on every rank; a set value wins. Each
// algorithm stays exact on a buffer that crosses the larger slots many times, the tree
// cutting its slices at 128 KiB whatever the slot (tree_allreduce.cc).
TEST(AllReduce, DefaultSlotFollowsThePipes) {
  struct Case {
    Wiring wiring;
    size_t set;   // GYRE_SLOT_BYTES, 0 unset
    size_t want;  // what the communicator reports
  };
  for (const Case& c :
       {Case{Wiring::kTcp, 0, 512 * 1024}, Case{Wiring::kShm, 0, 128 * 1024},
        Case{Wiring::kMixed, 0, 128 * 1024}, Case{Wiring::kTcp, 16 * 1024, 16 * 1024}}) {
    for (AllReduceAlgo algo : {AllReduceAlgo::kRing, AllReduceAlgo::kTree}) {
      SCOPED_TRACE(fmt::format("{} slot {} {}", wiringName(c.wiring), c.set, algoName(algo)));
      SpawnOptions o = testOptions(c.set, c.wiring);
      o.options.algo = algo;
      spawn(
          4,
          [want = c.want](Communicator& comm) {
            check(comm.slotBytes() == want, "rank {}: slot {} bytes, want {}", comm.rank(),
                  comm.slotBytes(), want);
            const size_t count = (5 << 18) + 13;  // 5 MiB of float32 and a ragged tail
            checkAllReduce(comm, DataType::kFloat32, ReduceOp::kSum, count, false);
            checkAllReduce(comm, DataType::kInt32, ReduceOp::kMax, count, true);
            checkAllReduce(comm, DataType::kFloat64, ReduceOp::kSum, count, true);
          },
          o);
    }
  }
  spawn(
      1,
      [](Communicator& comm) {
        check(comm.slotBytes() == 128 * 1024, "one rank (no pipes): slot {}", comm.slotBytes());
      },
      testOptions(0));
}

TEST(AllReduce, RepeatedCallsAndBarrier) {
  spawn(4, [](Communicator& comm) {
    std::vector<float> buf(100000);
    for (int iter = 0; iter < 50; ++iter) {
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<float>(comm.rank() + iter);
      comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
      const float want = static_cast<float>(6 + 4 * iter);
      for (float v : buf) check(v == want, "iteration {}: got {} want {}", iter, v, want);
      comm.barrier();
    }
  }, testOptions(64 * 1024));
}

TEST(AllReduce, InvalidArgumentsAreRejectedBeforeTraffic) {
  spawn(2, [](Communicator& comm) {
    auto expectInvalid = [&](auto&& call, const char* what) {
      try {
        call();
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kInvalidArgument, "{}: wrong code: {}", what, e.what());
        check(std::string(e.what()).find("rank") != std::string::npos, "{}: no rank in '{}'",
              what, e.what());
        return;
      }
      check(false, "{}: accepted", what);
    };
    float x = 1;
    expectInvalid([&] { comm.allReduce(nullptr, &x, 1, DataType::kFloat32, ReduceOp::kSum); },
                  "null sendbuf");
    expectInvalid([&] { comm.allReduce(&x, &x, 1, static_cast<DataType>(42), ReduceOp::kSum); },
                  "bad dtype");
    expectInvalid([&] { comm.allReduce(&x, &x, 1, DataType::kFloat32, static_cast<ReduceOp>(9)); },
                  "bad op");
    // The communicator still works: nothing was sent.
    comm.allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
    check(x == 2, "after rejected calls: got {}", x);
  }, testOptions());
}

TEST(Spawn, NamesTheFailingRank) {
  try {
    spawn(3, [](Communicator& comm) {
      if (comm.rank() == 1) throw std::runtime_error("boom from rank one");
    }, testOptions());
    FAIL() << "spawn did not report the failure";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("boom from rank one"), std::string::npos) << msg;
  }
}

// A real store (served here), so that only the rank and size can be what is wrong: each
// bad pair fails at once with kInvalidArgument naming it, and a good pair on the same
// store then makes a working communicator.
TEST(Communicator, RejectsBadRankAndSize) {
  auto store = TcpStore::serve("127.0.0.1", 0, std::chrono::seconds(30));
  auto expectInvalid = [&](std::shared_ptr<Store> s, int rank, int size,
                           const std::string& text) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " size " + std::to_string(size));
    const auto start = std::chrono::steady_clock::now();
    try {
      Communicator::create(s, rank, size);
      ADD_FAILURE() << "accepted rank " << rank << " size " << size;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  };
  expectInvalid(store, -1, 2, "rank -1 is outside [0, 2)");
  expectInvalid(store, 2, 2, "rank 2 is outside [0, 2)");
  expectInvalid(store, 7, 4, "rank 7 is outside [0, 4)");
  expectInvalid(store, std::numeric_limits<int>::min(), 1, "is outside [0, 1)");
  expectInvalid(store, 0, 0, "communicator size 0 must be >= 1");
  expectInvalid(store, 0, -3, "communicator size -3 must be >= 1");
  expectInvalid(store, -1, 0, "communicator size 0 must be >= 1");  // size is checked first
  expectInvalid(nullptr, 0, 1, "null store");

  // The store is still good for a valid pair.
  auto comm = Communicator::create(store, 0, 1);
  ASSERT_EQ(comm->size(), 1);
  int32_t value = 41;
  comm->allReduce(&value, &value, 1, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(value, 41);
}

}  // namespace
}  // namespace gyre
