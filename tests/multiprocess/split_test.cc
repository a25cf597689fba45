// split(color, key) across real processes: NCCL's ncclCommSplit semantics (groups by
// color, ranks ordered by key then by parent rank, a negative color joins none), exact
// collectives on the children, children and parent used concurrently from two
// threads, nested splits, and a rank that does not split failing the others by timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::check;

SpawnOptions options(TransportKind transport) {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(30);
  o.options.transport = transport;
  o.options.slotBytes = 16 * 1024;
  return o;
}

int64_t sumOver(Communicator& comm, int64_t mine) {
  comm.allReduce(&mine, &mine, 1, DataType::kInt64, ReduceOp::kSum);
  return mine;
}

class SplitRanks : public ::testing::TestWithParam<TransportKind> {};

TEST_P(SplitRanks, ColorsGroupAndKeysOrder) {
  spawn(6, [](Communicator& comm) {
    const int r = comm.rank();
    // Two colors by parity; keys reverse the order inside each.
    auto child = comm.split(r % 2, -r);
    check(child != nullptr, "rank {}: no communicator for color {}", r, r % 2);
    check(child->size() == 3, "rank {}: child size {}", r, child->size());
    const int want = (r % 2 == 0 ? 4 - r : 5 - r) / 2;  // 4,2,0 and 5,3,1 become 0,1,2
    check(child->rank() == want, "rank {}: child rank {}, want {}", r, child->rank(), want);
    // Exact sums of parent ranks within each color, and the parent still works.
    const int64_t colorSum = r % 2 == 0 ? 0 + 2 + 4 : 1 + 3 + 5;
    check(sumOver(*child, r) == colorSum, "rank {}: child sum", r);
    check(sumOver(comm, r) == 15, "rank {}: parent sum after split", r);
    std::vector<int32_t> big(50000, r);
    child->broadcast(big.data(), big.size(), DataType::kInt32, 0);  // child rank 0: parent 4 or 5
    for (int32_t v : big) check(v == (r % 2 == 0 ? 4 : 5), "rank {}: broadcast got {}", r, v);
    // Equal keys: parent order.
    auto same = comm.split(0, 7);
    check(same->size() == 6 && same->rank() == r, "rank {}: equal keys gave rank {}", r, same->rank());
  }, options(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Transports, SplitRanks,
                         ::testing::Values(TransportKind::kTcp, TransportKind::kShm),
                         [](const auto& info) {
                           return info.param == TransportKind::kTcp ? "tcp" : "shm";
                         });

TEST(Split, NoColorJoinsNoneAndTheOthersProceed) {
  spawn(4, [](Communicator& comm) {
    const int r = comm.rank();
    auto child = comm.split(r == 2 ? Communicator::kNoColor : 1, r);
    if (r == 2) {
      check(child == nullptr, "rank 2: got a communicator for kNoColor");
    } else {
      check(child && child->size() == 3, "rank {}: child missing or wrong size", r);
      check(sumOver(*child, r) == 0 + 1 + 3, "rank {}: child sum", r);
    }
    check(sumOver(comm, 1) == 4, "rank {}: parent sum", r);
  }, options(TransportKind::kAuto));
}

TEST(Split, ChildAndParentRunConcurrentlyFromTwoThreads) {
  spawn(4, [](Communicator& comm) {
    const int r = comm.rank();
    auto child = comm.split(r / 2, r);  // {0,1} and {2,3}
    std::vector<float> a(70000), b(70000);
    std::thread other([&] {
      for (int it = 0; it < 5; ++it) {
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r + i % 3);
        child->allReduce(a.data(), a.data(), a.size(), DataType::kFloat32, ReduceOp::kSum);
      }
    });
    for (int it = 0; it < 5; ++it) {
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(r + i % 3);
      comm.allReduce(b.data(), b.data(), b.size(), DataType::kFloat32, ReduceOp::kSum);
    }
    other.join();
    const int pair = r / 2 * 4 + 1;  // 0+1 or 2+3
    for (size_t i = 0; i < a.size(); ++i) {
      check(a[i] == static_cast<float>(pair + 2 * (i % 3)), "rank {}: child [{}] = {}", r, i, a[i]);
      check(b[i] == static_cast<float>(6 + 4 * (i % 3)), "rank {}: parent [{}] = {}", r, i, b[i]);
    }
  }, options(TransportKind::kAuto));
}

TEST(Split, NestedSplitsAndAsyncOnChildren) {
  spawn(5, [](Communicator& comm) {
    const int r = comm.rank();
    auto half = comm.split(r < 3 ? 0 : 1, r);  // {0,1,2}, {3,4}
    auto quarter = half->split(half->rank() == 0 ? 0 : 1, 0);
    const int want = r < 3 ? (r == 0 ? 1 : 2) : 1;
    check(quarter->size() == want, "rank {}: nested size {}, want {}", r, quarter->size(), want);
    int64_t v = r;
    Work w = quarter->allReduceAsync(&v, &v, 1, DataType::kInt64, ReduceOp::kMax);
    w.wait();
    const int64_t wantMax = r == 0 ? 0 : r < 3 ? 2 : (r == 3 ? 3 : 4);
    check(v == wantMax, "rank {}: nested max {}, want {}", r, v, wantMax);
    // Rank 0's process serves the store the others' splits still use: it must not leave
    // before they are done (rank 0 is alone in its quarter and finishes first).
    comm.barrier();
  }, options(TransportKind::kAuto));
}

TEST(Split, ARankThatDoesNotSplitFailsTheOthersByTheTimeout) {
  SpawnOptions o = options(TransportKind::kAuto);
  o.options.timeout = std::chrono::seconds(2);
  testing::Signals signals;
  try {
    spawn(3, [&signals](Communicator& comm) {
      if (comm.rank() == 1) {  // alive, never splitting, until the others have failed
        signals.await("failed", 2, 10s);
        return;
      }
      try {
        auto child = comm.split(0, 0);
      } catch (const Error&) {
        signals.post("failed");
        throw;
      }
      check(false, "rank {}: split returned without rank 1", comm.rank());
    }, o);
    FAIL() << "spawn succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("split returned without"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gyre
