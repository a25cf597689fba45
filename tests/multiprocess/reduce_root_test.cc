// Reduce to a root across real processes over loopback (tcp and shm): every root,
// dtype and op, counts 0, 1, odd and larger than all slots, in place and out of place.
// The root's result is exact and nothing past it is written; no other rank's buffer
// changes; the root's share of the ring matches ringAllReduce bit for bit; ranks that
// disagree on the root or the count fail promptly instead of hanging or delivering.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
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



// One reduce to `root`, checked exactly on the root (guard bytes past the output
// intact); the other ranks pass a buffer that must stay untouched (out of place) or
// null (in place: the API allows it off the root), and no sendbuf may change.
void checkReduce(Communicator& comm, DataType t, ReduceOp op, size_t count, int root,
                 bool inPlace) {
  const size_t bytes = count * dtypeSize(t);
  const bool isRoot = comm.rank() == root;
  std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), count);
  input.resize(bytes);
  input.resize(bytes + kGuardBytes, kGuard);
  const std::vector<std::byte> original = input;
  std::vector<std::byte> output(bytes + kGuardBytes, kGuard);
  void* recv = inPlace ? (isRoot ? input.data() : nullptr) : output.data();
  comm.reduce(input.data(), recv, count, t, op, root);

  const std::string what =
      fmt::format("rank {}/{}: reduce {} {} count {} to root {} {}", comm.rank(), comm.size(),
                  dtypeName(t), opName(op), count, root, inPlace ? "in place" : "out of place");
  if (isRoot) {
    std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), count);
    auto* out = static_cast<std::byte*>(recv);
    check(std::memcmp(out, expected.data(), bytes) == 0, "{}: wrong result", what);
    for (size_t i = 0; i < kGuardBytes; ++i) {
      check(out[bytes + i] == kGuard, "{}: wrote past the end of recvbuf", what);
    }
  }
  if (!isRoot || !inPlace) {
    check(input == original, "{}: sendbuf was modified", what);
  }
  if (!isRoot && !inPlace) {
    for (std::byte b : output) check(b == kGuard, "{}: wrote into a non-root's recvbuf", what);
  }
}

class ReduceRanks : public ::testing::TestWithParam<testing::TransportRanks> {};

TEST_P(ReduceRanks, EveryRootDtypeOpAndCount) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    comm.reduce(nullptr, nullptr, 0, DataType::kInt32, ReduceOp::kAvg, 0);  // null: count 0
    const size_t counts[] = {0, 1, 7, 1009};
    // Every root with every dtype and op, in place and out of place; the count rotates
    // with them so that every root meets every count in both modes.
    for (int root = 0; root < comm.size(); ++root) {
      size_t k = static_cast<size_t>(root);
      for (DataType t : testing::kAllTypes) {
        for (ReduceOp op : testing::kAllOps) {
          checkReduce(comm, t, op, counts[k % 4], root, false);
          checkReduce(comm, t, op, counts[(k + 1) % 4], root, true);
          ++k;
        }
      }
    }
  }, collectiveOptions(transport));
}

TEST_P(ReduceRanks, LargerThanAllSlots) {
  const auto [transport, n] = GetParam();
  spawn(n, [](Communicator& comm) {
    const size_t count = 100003;  // odd, and 6 to 48 times all slots of a pipe
    const int last = comm.size() - 1;
    checkReduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0, false);
    checkReduce(comm, DataType::kBFloat16, ReduceOp::kAvg, count, last, true);
    checkReduce(comm, DataType::kInt8, ReduceOp::kMax, count, comm.size() / 2, true);
    checkReduce(comm, DataType::kFloat64, ReduceOp::kProd, count, last, false);
  }, collectiveOptions(transport));
}

INSTANTIATE_TEST_SUITE_P(Transports, ReduceRanks, testing::everyTransportAndRankCount(),
                         testing::transportRanksName);

// Inexact float inputs: the root's elements in ringAllReduce's chunk `root` were summed
// in the same order (from root + 1 around to the root), so they carry the same bits.
TEST(Reduce, RootsChunkMatchesRingAllReduceBitForBit) {
  SpawnOptions o = collectiveOptions(TransportKind::kTcp);
  o.options.algo = AllReduceAlgo::kRing;
  spawn(5, [](Communicator& comm) {
    const int n = comm.size();
    const size_t count = 5 * 4099;  // chunks of 4099: each spans several slices
    const size_t chunk = count / static_cast<size_t>(n);
    std::vector<float> in(count), all(count), mine(count);
    for (size_t i = 0; i < count; ++i) {
      in[i] = 1.0f / static_cast<float>(3 + (i * 7 + static_cast<size_t>(comm.rank()) * 13) % 97);
    }
    comm.allReduce(in.data(), all.data(), count, DataType::kFloat32, ReduceOp::kSum);
    for (int root = 0; root < n; ++root) {
      comm.reduce(in.data(), mine.data(), count, DataType::kFloat32, ReduceOp::kSum, root);
      if (comm.rank() != root) continue;
      const size_t b = static_cast<size_t>(root) * chunk;
      check(std::memcmp(mine.data() + b, all.data() + b, chunk * sizeof(float)) == 0,
            "root {}: its chunk differs from the ring all-reduce's", root);
      // Outside the chunk the orders differ: the inputs are chosen so that this shows in
      // the bits (else the check above would prove nothing), but only in the last bits.
      double err = 0;
      size_t differ = 0;
      for (size_t i = 0; i < count; ++i) {
        err = std::max(err, std::fabs(static_cast<double>(mine[i]) - all[i]));
        differ += std::memcmp(&mine[i], &all[i], sizeof(float)) != 0;
      }
      check(err < 1e-5, "root {}: result off by {}", root, err);
      check(differ > 0, "root {}: the inputs do not show the reduction order", root);
    }
  }, o);
}

// Runs `call` (a reduce with the root from rootOf) on every rank, where the ranks
// disagree. A reduce is a chain, so a rank upstream of the disagreement may finish its
// part before anyone sees it; what must hold: some rank sees the mismatch, no rank
// that names itself the root gets a result, and every rank fails within the 30 s
// timeout, in the reduce or at the latest in its next call (barrier), which finds the
// communicator aborted.
void expectFailsOnEveryRank(int n, TransportKind transport,
                            const std::function<int(int rank)>& rootOf,
                            const std::function<void(Communicator&)>& call) {
  spawn(n, [&](Communicator& comm) {
    const auto start = std::chrono::steady_clock::now();
    auto took = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    auto expectFailure = [&](const Error& e, const char* when) {
      check(e.code() == ErrorCode::kMismatch || e.code() == ErrorCode::kRemoteError ||
                e.code() == ErrorCode::kAborted,
            "rank {}: unexpected error in {}: {}", comm.rank(), when, e.what());
      check(took() < 10.0, "rank {}: failed only after {} s: {}", comm.rank(), took(), e.what());
    };
    bool reduceFailed = false;
    try {
      call(comm);
    } catch (const Error& e) {
      expectFailure(e, "the reduce");
      reduceFailed = true;
    }
    check(reduceFailed || rootOf(comm.rank()) != comm.rank(),
          "rank {}: a mismatched reduce delivered a result on its root", comm.rank());
    try {
      comm.barrier();
    } catch (const Error& e) {
      expectFailure(e, "the barrier after it");
      check(!reduceFailed || e.code() == ErrorCode::kAborted, "rank {}: after a failure: {}",
            comm.rank(), e.what());
      return;
    }
    check(false, "rank {}: the communicator still works after the mismatch", comm.rank());
  }, collectiveOptions(transport));
}

// A reduce of more than the pipes hold (so a schedule that waits for a neighbour to
// drain its sends would hang) with the root chosen per rank.
void reduceWithRoots(TransportKind transport, int n, const std::function<int(int rank)>& rootOf,
                     const std::function<size_t(int rank)>& countOf = nullptr) {
  expectFailsOnEveryRank(n, transport, rootOf, [&](Communicator& comm) {
    const size_t count = countOf ? countOf(comm.rank()) : 100000;
    std::vector<float> in(count, 1.0f), out(count + 1, -1.0f);
    comm.reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum,
                rootOf(comm.rank()));
  });
}

TEST(Reduce, TwoGroupsWithDifferentRootsFail) {
  reduceWithRoots(TransportKind::kTcp, 4, [](int r) { return r < 2 ? 0 : 2; });
}

TEST(Reduce, RootThatNamesAnotherRootFails) {
  // Everyone says root 1, rank 1 says its left neighbour 0: it then starts a chain of
  // its own towards rank 2, which starts the chain for root 1.
  // Over shm the pipes hold 64 KiB, far less than the reduce: a schedule in which the
  // two chains each wait for the other to drain would hang here.
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    reduceWithRoots(t, 4, [](int r) { return r == 1 ? 0 : 1; });
    reduceWithRoots(t, 4, [](int r) { return r == 1 ? 3 : 1; });
  }
}

TEST(Reduce, FirstRankOfTheChainNamingAnotherRootFails) {
  // Root 1 by everyone but rank 2, which would start the chain: nobody sends data first.
  for (TransportKind t : {TransportKind::kTcp, TransportKind::kShm}) {
    reduceWithRoots(t, 4, [](int r) { return r == 2 ? 3 : 1; });
    reduceWithRoots(t, 3, [](int r) { return r == 1 ? 1 : 0; });
  }
}

TEST(Reduce, DifferentCountFails) {
  reduceWithRoots(
      TransportKind::kTcp, 3, [](int) { return 0; },
      [](int r) -> size_t { return r == 2 ? 100001 : 100000; });
  reduceWithRoots(
      TransportKind::kShm, 2, [](int) { return 1; },
      [](int r) -> size_t { return r == 0 ? 0 : 3; });
}

TEST(Reduce, RejectsABadRoot) {
  spawn(2, [](Communicator& comm) {
    float x = 1, y = 0;
    for (int root : {-1, 2}) {
      try {
        comm.reduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum, root);
        check(false, "root {} of 2 was accepted", root);
      } catch (const Error& e) {
        check(e.code() == ErrorCode::kInvalidArgument, "root {}: wrong code: {}", root, e.what());
      }
    }
    // Still usable: nothing was sent.
    comm.reduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum, 1);
    check(comm.rank() != 1 || y == 2, "after rejected calls: got {}", y);
  }, collectiveOptions(TransportKind::kTcp));
}

}  // namespace
}  // namespace gyre
