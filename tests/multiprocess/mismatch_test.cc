// Mismatched collectives: ranks that call different counts, dtypes, ops, collectives or
// sequences. Every rank must fail with kMismatch naming both calls (the ranks that see
// the mismatch directly name both ranks too), promptly (the others learn it from the
// abort, not from a timeout), and nothing may be written outside any buffer.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "collectives/collective.h"
#include "ring/communicator.h"
#include "collectives/primitives.h"
#include "ring/spawn.h"
#include "test_values.h"
#include "transport/shm/shm_pipe.h"

namespace gyre {
namespace {

using testing::check;

constexpr size_t kGuard = 64;
constexpr std::byte kGuardByte{0xa5};

// A buffer of `bytes` bytes between two guard zones.
class Guarded {
 public:
  explicit Guarded(size_t bytes) : bytes_(bytes), mem_(bytes + 2 * kGuard, kGuardByte) {
    std::fill(mem_.begin() + kGuard, mem_.end() - kGuard, std::byte{0});
  }
  void* data() { return mem_.data() + kGuard; }
  bool intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (mem_[i] != kGuardByte || mem_[kGuard + bytes_ + i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<std::byte> mem_;
};

struct Call {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 0;
};

CollectiveCall asCall(const Call& c, uint32_t seq) {
  CollectiveCall cc;
  cc.kind = c.kind;
  cc.dtype = c.kind == CollectiveKind::kBarrier ? DataType::kUint8 : c.dtype;
  cc.op = c.kind == CollectiveKind::kBarrier ? ReduceOp::kMax : c.op;
  cc.count = c.kind == CollectiveKind::kBarrier ? 1 : c.count;
  cc.seq = seq;
  return cc;
}

void issue(Communicator& comm, const Call& c, Guarded& send, Guarded& recv) {
  if (c.kind == CollectiveKind::kBarrier) {
    comm.barrier();
  } else {
    comm.allReduce(send.data(), recv.data(), c.count, c.dtype, c.op);
  }
}

// `odd` runs `theirs` as its call #`seq` where everyone else runs `ours`; before it,
// `seq` matching all-reduces. Checks on every rank: kMismatch, both calls named, the
// time it took, guards intact, and that the communicator is aborted afterwards.
void expectMismatch(int nranks, int odd, const Call& ours, const Call& theirs, uint32_t seq = 1) {
  SpawnOptions so;
  so.options.timeout = std::chrono::seconds(30);
  so.options.slotBytes = 16 * 1024;
  spawn(
      nranks,
      [&](Communicator& comm) {
        for (uint32_t i = 0; i < seq; ++i) {
          float x = 1;
          comm.allReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum);
        }
        const Call& mine = comm.rank() == odd ? theirs : ours;
        const size_t bytes = std::max<size_t>(1, mine.count * dtypeSize(mine.dtype));
        Guarded send(bytes), recv(bytes);
        const auto start = std::chrono::steady_clock::now();
        try {
          issue(comm, mine, send, recv);
          check(false, "rank {}: the mismatch went unnoticed", comm.rank());
        } catch (const Error& e) {
          const std::string msg = e.what();
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          check(e.code() == ErrorCode::kMismatch, "rank {}: code {} for '{}'", comm.rank(),
                errorCodeName(e.code()), msg);
          for (const Call* c : {&ours, &theirs}) {
            std::string name = describe(asCall(*c, seq));
            check(msg.find(name) != std::string::npos, "rank {}: '{}' does not name {}",
                  comm.rank(), msg, name);
          }
          check(msg.find(fmt::format("rank {}:", comm.rank())) == 0,
                "'{}' does not start with rank", msg);
          check(took < 3.0, "rank {}: took {} s", comm.rank(), took);
        }
        check(send.intact() && recv.intact(), "rank {}: wrote outside a buffer", comm.rank());
        try {
          comm.barrier();
          check(false, "rank {}: barrier after the mismatch passed", comm.rank());
        } catch (const Error& e) {
          check(e.code() == ErrorCode::kAborted, "rank {}: after a mismatch: {}", comm.rank(),
                e.what());
        }
      },
      so);
}

TEST(Mismatch, Count) {
  Call a{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1000};
  Call b = a;
  b.count = 1001;
  expectMismatch(3, 1, a, b);
}

TEST(Mismatch, LargerCountOnTheOddRankWritesNothingOutside) {
  // The odd rank's slices are larger than what its neighbour expects: refused before use.
  Call a{CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 100000};
  Call b = a;
  b.count = 400000;
  expectMismatch(4, 2, a, b);
}

TEST(Mismatch, ZeroCountAgainstNonZero) {
  Call a{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 0};
  Call b = a;
  b.count = 5;
  expectMismatch(2, 0, a, b);
}

TEST(Mismatch, Dtype) {
  Call a{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 4096};
  Call b = a;
  b.dtype = DataType::kInt32;
  expectMismatch(4, 3, a, b);
}

TEST(Mismatch, Op) {
  Call a{CollectiveKind::kAllReduce, DataType::kFloat64, ReduceOp::kSum, 777};
  Call b = a;
  b.op = ReduceOp::kMax;
  expectMismatch(3, 0, a, b);
}

TEST(Mismatch, AllReduceAgainstBarrier) {
  Call a{CollectiveKind::kAllReduce, DataType::kUint8, ReduceOp::kMax, 1};
  Call b{CollectiveKind::kBarrier};
  expectMismatch(5, 2, a, b);
}

TEST(Mismatch, OverShmAndTcpAlike) {
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    SpawnOptions so;
    so.options.transport = t;
    so.options.timeout = std::chrono::seconds(30);
    spawn(
        3,
        [](Communicator& comm) {
          std::vector<float> buf(10);
          try {
            comm.allReduce(buf.data(), buf.data(), comm.rank() == 1 ? 9 : 10, DataType::kFloat32,
                           ReduceOp::kSum);
          } catch (const Error& e) {
            check(e.code() == ErrorCode::kMismatch, "rank {}: {}", comm.rank(), e.what());
            return;
          }
          check(false, "unnoticed");
        },
        so);
  }
}

TEST(Mismatch, SkippedCallIsASequenceMismatch) {
  // Rank 1 skips call #1: its next call (#1 for it) meets everyone's #1 of another size.
  SpawnOptions so;
  so.options.timeout = std::chrono::seconds(30);
  spawn(
      3,
      [](Communicator& comm) {
        std::vector<float> small(3), large(50);
        try {
          if (comm.rank() != 1) {
            comm.allReduce(small.data(), small.data(), 3, DataType::kFloat32, ReduceOp::kSum);
          }
          comm.allReduce(large.data(), large.data(), 50, DataType::kFloat32, ReduceOp::kSum);
          check(false, "rank {}: unnoticed", comm.rank());
        } catch (const Error& e) {
          check(e.code() == ErrorCode::kMismatch, "rank {}: {}", comm.rank(), e.what());
          check(std::string(e.what()).find("#0") != std::string::npos, "{}", e.what());
        }
      },
      so);
}

// Roots travel in the fingerprint too (no rooted collective exists yet): a slice of a
// call with another root is refused, naming both.
TEST(Mismatch, RootIsPartOfTheFingerprint) {
  const std::string name = fmt::format("/gyre-mismatch-test-{}", ::getpid());
  auto rx = ShmRecvPipe::create(name, 2, 4096, 0, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 0);
  PrimitiveContext ctx;
  ctx.left = rx.get();
  ctx.right = tx.get();
  ctx.timeout = std::chrono::seconds(5);
  ctx.rank = 0;
  CollectiveCall a;
  a.kind = CollectiveKind::kAllReduce;
  a.count = 4;
  a.root = 0;
  CollectiveCall b = a;
  b.root = 1;
  float data[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  Primitives(ctx, a, 1).send(data, 4);
  try {
    Primitives(ctx, b, 1).recv(out, 4);
    FAIL() << "a slice of another root was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMismatch);
    EXPECT_NE(std::string(e.what()).find("root 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("root 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(out[0], 0.0f) << "wrote a refused slice";
}

}  // namespace
}  // namespace gyre
