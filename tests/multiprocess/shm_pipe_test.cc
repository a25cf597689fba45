// Tests of the shared-memory pipe's data path with real forked processes: streams in
// both directions, a sender that comes before its receiver, back-pressure, and waiters
// that sleep instead of spinning when there are more processes than cores. The
// in-process tests (ShmSendPipe::attach) are the ones ThreadSanitizer can check, since
// it only sees one process. Failures are shm_pipe_failure_test.cc; the segments
// (cleanup, bogus contents) shm_segment_test.cc.
#include <gtest/gtest.h>

#include "shm_pipe_harness.h"

namespace gyre {
namespace {

using namespace shm_test;
using namespace std::chrono_literals;

// ---- Data path -----------------------------------------------------------------------------

TEST_F(ShmPipeTest, StreamsBothWaysBetweenProcesses) {
  constexpr size_t kSlots = 4, kSlotBytes = 1000, kSlices = 1000;  // 1000: not a line multiple
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto rx = ShmRecvPipe::create(name(0, 1), kSlots, kSlotBytes, 0, parent);
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    sendStream(*tx, kSlices, 1);
    std::string err = recvStream(*rx, kSlices, 2);
    require(err.empty(), err);
    rx->unlinkName();
  });
  auto rx = ShmRecvPipe::create(name(1, 0), kSlots, kSlotBytes, 1, child.pid(0));
  auto tx = ShmSendPipe::open(name(0, 1), 1, child.pid(0), within(20s));
  EXPECT_FALSE(ShmSegment::exists(name(0, 1))) << "the sender unlinks once it has mapped";
  EXPECT_EQ(recvStream(*rx, kSlices, 1), "");
  sendStream(*tx, kSlices, 2);
  const RankResult peer = child.join(0, Clock::now() + 30s);
  EXPECT_TRUE(peer.ok) << peer.describe();
  EXPECT_EQ(rx->peer(), 1);
  EXPECT_EQ(tx->slotBytes(), kSlotBytes);
}

TEST_F(ShmPipeTest, StreamsBetweenThreadsUnderOneMapping) {
  // The one test ThreadSanitizer can fully check: both ends share one mapping.
  auto rx = ShmRecvPipe::create(name(2, 3), 4, 256, 2, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 3);
  std::thread sender([&] { sendStream(*tx, 20000, 5); });
  EXPECT_EQ(recvStream(*rx, 20000, 5), "");
  sender.join();
}

TEST_F(ShmPipeTest, SenderWaitsForCreatorThatComesLate) {
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    std::this_thread::sleep_for(100ms);  // models a late creator: open() waits meanwhile
    auto rx = ShmRecvPipe::create(name(0, 1), 2, 64, 0, parent);
    std::string err = recvStream(*rx, 10, 9);
    require(err.empty(), err);
  });
  auto tx = ShmSendPipe::open(name(0, 1), 1, child.pid(0), within(20s));
  sendStream(*tx, 10, 9);
  const RankResult creator = child.join(0, Clock::now() + 30s);
  EXPECT_TRUE(creator.ok) << creator.describe();
}

// ---- Flow control --------------------------------------------------------------------------

TEST_F(ShmPipeTest, SenderBlocksWhenSlotsAreFullAndResumesOnRelease) {
  // CLOCK_MONOTONIC (steady_clock) is one clock for every process on the host, so the
  // child can report when its acquire() returned and the parent can compare.
  constexpr size_t kSlots = 4;
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    for (size_t i = 0; i <= kSlots; ++i) {
      std::byte* slot = tx->acquire(within(20s));
      int64_t now = Clock::now().time_since_epoch().count();
      std::memcpy(slot, &now, sizeof now);
      tx->post(sizeof now, tagOf(i, sizeof now));
    }
  });
  auto rx = ShmRecvPipe::create(name(1, 0), kSlots, 64, 1, child.pid(0));
  auto stampOf = [](const Slice& s) {
    int64_t t;
    std::memcpy(&t, s.data, sizeof t);
    return t;
  };
  std::vector<int64_t> acquiredAt{stampOf(rx->wait(within(20s)))};
  // Hold slice 0: the child fills the other K-1 slots, then its K+1-th acquire waits (time
  // passes, measured below: no signal comes from inside the wait).
  std::this_thread::sleep_for(300ms);  // measured below
  const int64_t releasedAt = Clock::now().time_since_epoch().count();
  rx->release();
  for (size_t i = 1; i <= kSlots; ++i) {
    Slice s = rx->wait(within(20s));
    ASSERT_EQ(s.tag.seq, i);
    acquiredAt.push_back(stampOf(s));
    rx->release();
  }
  const int64_t ms = std::chrono::nanoseconds(1ms).count() / Clock::duration(1).count();
  for (size_t i = 1; i < kSlots; ++i) {
    EXPECT_LT(acquiredAt[i], releasedAt - 200 * ms) << "slot " << i << " should not wait";
  }
  EXPECT_GE(acquiredAt[kSlots], releasedAt) << "slot K must wait for the first release";
  const RankResult sender = child.join(0, Clock::now() + 30s);
  EXPECT_TRUE(sender.ok) << sender.describe();
}

TEST_F(ShmPipeTest, BlockedSenderResumesWhenAThreadReleases) {
  constexpr size_t kSlots = 3;
  auto rx = ShmRecvPipe::create(name(2, 3), kSlots, 64, 2, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 3);
  std::atomic<size_t> posted{0};
  std::thread sender([&] {
    for (size_t i = 0; i < 2 * kSlots; ++i) {
      tx->acquire(within(20s));
      tx->post(0, tagOf(i, 0));
      posted.fetch_add(1);
    }
  });
  std::this_thread::sleep_for(100ms);  // time passes: the sender must still be waiting then
  EXPECT_EQ(posted.load(), kSlots) << "K slots posted, then the sender must wait";
  for (size_t i = 0; i < 2 * kSlots; ++i) {
    EXPECT_EQ(rx->wait(within(20s)).tag.seq, i);
    rx->release();
  }
  sender.join();
  EXPECT_EQ(posted.load(), 2 * kSlots);
}

// ---- Waiting on a small machine ------------------------------------------------------------

double threadCpuMs() {
  timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

TEST_F(ShmPipeTest, AnIdleWaiterSleepsInsteadOfSpinning) {
  auto rx = ShmRecvPipe::create(name(2, 3), 2, 64, 2, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 3);
  std::thread late([&] {
    std::this_thread::sleep_for(300ms);  // time passes: the waiter must sleep meanwhile
    tx->acquire(within(1s));
    tx->post(0, tagOf(42, 0));
  });
  double cpu0 = threadCpuMs();
  auto start = Clock::now();
  Slice s = rx->wait(within(20s));
  double wall = msSince(start), cpu = threadCpuMs() - cpu0;
  late.join();
  EXPECT_EQ(s.tag.seq, 42u);
  EXPECT_GE(wall, 250);
  EXPECT_LT(cpu, 30) << "a waiter may spin 50 us, then must sleep; it used " << cpu << " ms";
}

TEST_F(ShmPipeTest, FourPingPongPairsOnTwoCoresFinishQuickly) {
  // 8 processes on the 2 cores, each pair bouncing an 8-byte slice. If waiters spun
  // until their slice came, each round trip would cost scheduler time slices
  // (milliseconds); spinning 50 us then sleeping on the futex keeps it near the wake-up
  // latency.
  constexpr int kPairs = 4;
  constexpr size_t kRounds = 2000;
  auto start = Clock::now();
  // Rank 2p leads pair p (its rank 0), rank 2p+1 is its partner (rank 1).
  ForkedRanks ranks(2 * kPairs);
  ranks.start([&](int rank) {
    const int p = rank / 2;
    if (rank % 2 == 1) {
      const pid_t leader = ranks.pidOf(rank - 1);
      auto rx = ShmRecvPipe::create(name(0, 1, p), 2, 64, 0, leader);
      auto tx = ShmSendPipe::open(name(1, 0, p), 0, leader, within(20s));
      for (size_t i = 0; i < kRounds; ++i) {
        Slice s = rx->wait(within(20s));
        uint64_t v;
        std::memcpy(&v, s.data, 8);
        rx->release();
        std::byte* slot = tx->acquire(within(20s));
        v += 1;
        std::memcpy(slot, &v, 8);
        tx->post(8, tagOf(i, 8));
      }
      return;
    }
    const pid_t partner = ranks.pidOf(rank + 1);
    auto rx = ShmRecvPipe::create(name(1, 0, p), 2, 64, 1, partner);
    auto tx = ShmSendPipe::open(name(0, 1, p), 1, partner, within(20s));
    uint64_t v = 0;
    for (size_t i = 0; i < kRounds; ++i) {
      std::byte* slot = tx->acquire(within(20s));
      std::memcpy(slot, &v, 8);
      tx->post(8, tagOf(i, 8));
      Slice s = rx->wait(within(20s));
      std::memcpy(&v, s.data, 8);
      rx->release();
      require(v == i + 1, "ping-pong value");
    }
  });
  testing::expectAllOk(ranks.join(start + 60s));
  double ms = msSince(start);
  std::fprintf(stderr, "%d pairs x %zu round trips on %u cores: %.0f ms (%.1f us per round trip)\n",
               kPairs, kRounds, std::thread::hardware_concurrency(), ms, ms * 1e3 / kRounds);
  EXPECT_LT(ms, 10000);
}

}  // namespace
}  // namespace gyre
