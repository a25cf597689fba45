// Tests of how a shared-memory pipe fails, with real forked processes: timeouts naming
// the peer rank, a peer killed with SIGKILL (found within a sleeping slice, not at the
// timeout), a creator that dies before the open, slices posted before an exit still
// delivered, and abort from another thread.
#include <gtest/gtest.h>

#include "shm_pipe_harness.h"

namespace gyre {
namespace {

using namespace shm_test;
using namespace std::chrono_literals;

// ---- Failures: timeout, dead peer, closed peer, abort ---------------------------------------

TEST_F(ShmPipeTest, ReceiverTimesOutNamingThePeerRank) {
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    child.stayAlive();  // alive, never posts
  });
  auto rx = ShmRecvPipe::create(name(1, 0), 4, 64, 1, child.pid(0));
  auto start = Clock::now();
  Error e = expectError([&] { rx->wait(within(200ms)); });
  double ms = msSince(start);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("peer rank 1"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("posted slice"), std::string::npos) << e.what();
  EXPECT_GE(ms, 190);
  EXPECT_LT(ms, 1000);
}

TEST_F(ShmPipeTest, SenderTimesOutWaitingForACredit) {
  auto rx = ShmRecvPipe::create(name(2, 3), 2, 64, 2, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 3);
  for (size_t i = 0; i < 2; ++i) {
    tx->acquire(within(1s));
    tx->post(1, tagOf(i, 1));
  }
  Error e = expectError([&] { tx->acquire(within(100ms)); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("peer rank 3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("free slot"), std::string::npos) << e.what();
}

// Kills `child` `after` from now on another thread; returns when it was killed. The
// wait lets the test block in the call under test first: nothing signals from inside it.
class DelayedKill {
 public:
  DelayedKill(ForkedRanks& child, Clock::duration after)
      : thread_([this, &child, after] {
          std::this_thread::sleep_for(after);  // see above
          killedAt_ = Clock::now();
          child.kill(0);
        }) {}
  Clock::time_point join() {
    thread_.join();
    return killedAt_;
  }

 private:
  Clock::time_point killedAt_;
  std::thread thread_;
};

TEST_F(ShmPipeTest, ReceiverLearnsOfAKilledSenderPromptly) {
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    tx->acquire(within(20s));
    tx->post(0, tagOf(0, 0));  // "ready"
    child.stayAlive();
  });
  auto rx = ShmRecvPipe::create(name(1, 0), 4, 64, 1, child.pid(0));
  rx->wait(within(20s));
  rx->release();
  DelayedKill killer(child, 100ms);
  Error e = expectError([&] { rx->wait(within(20s)); });
  double ms = msSince(killer.join());
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find(fmt::format("peer rank 1 (pid {}) exited", child.pid(0))),
            std::string::npos)
      << e.what();
  EXPECT_LT(ms, 100) << "a dead peer must be found at once, not at the timeout";
}

TEST_F(ShmPipeTest, SenderLearnsOfAKilledReceiverPromptly) {
  constexpr size_t kSlots = 2;
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto rx = ShmRecvPipe::create(name(0, 1), kSlots, 64, 0, parent);
    child.stayAlive();  // never releases
  });
  auto tx = ShmSendPipe::open(name(0, 1), 1, child.pid(0), within(20s));
  for (size_t i = 0; i < kSlots; ++i) {
    tx->acquire(within(20s));
    tx->post(0, tagOf(i, 0));
  }
  DelayedKill killer(child, 100ms);
  Error e = expectError([&] { tx->acquire(within(20s)); });
  double ms = msSince(killer.join());
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find("peer rank 1"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("exited"), std::string::npos) << e.what();
  EXPECT_LT(ms, 100);
}

TEST_F(ShmPipeTest, OpenFailsPromptlyWhenTheCreatorDies) {
  ForkedRanks child(1);
  child.start([&](int) { child.stayAlive(); });  // never creates
  DelayedKill killer(child, 100ms);
  Error e = expectError([&] { ShmSendPipe::open(name(0, 1), 1, child.pid(0), within(20s)); });
  double ms = msSince(killer.join());
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_LT(ms, 100);
}

TEST_F(ShmPipeTest, ReceiverKilledBeforeTheSenderOpenedLeavesNothingOnceOpened) {
  // A receiver that dies between create and the sender's open cannot unlink; the sender
  // still maps and unlinks the name, then finds the receiver gone when it blocks.
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto rx = ShmRecvPipe::create(name(0, 1), 1, 64, 0, parent);
    child.say("created");
    child.stayAlive();
  });
  const pid_t receiverPid = child.pid(0);
  child.waitFor(0, "created");
  child.kill(0);
  EXPECT_TRUE(child.join(0, Clock::now() + 20s).killedBy(SIGKILL));
  auto tx = ShmSendPipe::open(name(0, 1), 1, receiverPid, within(20s));
  EXPECT_FALSE(ShmSegment::exists(name(0, 1)));
  tx->acquire(within(20s));
  tx->post(0, Tag{});
  Error e = expectError([&] { tx->acquire(within(20s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
}

TEST_F(ShmPipeTest, SlicesPostedBeforeTheSenderExitsAreStillDelivered) {
  const pid_t parent = ::getpid();
  ForkedRanks child(1);
  child.start([&](int) {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    sendStream(*tx, 3, 4);
  });  // exits normally: the ShmSendPipe destructor marks the pipe closed
  auto rx = ShmRecvPipe::create(name(1, 0), 4, 128, 1, child.pid(0));
  const RankResult sender = child.join(0, Clock::now() + 30s);
  EXPECT_TRUE(sender.ok) << sender.describe();
  EXPECT_EQ(recvStream(*rx, 3, 4), "");
  Error e = expectError([&] { rx->wait(within(20s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
}

TEST_F(ShmPipeTest, AbortFromAnotherThreadEndsAWait) {
  auto rx = ShmRecvPipe::create(name(2, 3), 1, 64, 2, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 3);
  std::atomic<bool> aborted{false};
  Clock::time_point abortedAt;
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);  // time for the wait to block: nothing signals from inside it
    abortedAt = Clock::now();
    aborted.store(true);
  });
  Error e = expectError([&] { rx->wait(within(20s, &aborted)); });
  aborter.join();
  EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
  EXPECT_LT(msSince(abortedAt), 100);
  // The sending side too, blocked on a credit.
  tx->acquire(within(1s));
  tx->post(0, Tag{});
  e = expectError([&] { tx->acquire(within(20s, &aborted)); });
  EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
}

}  // namespace
}  // namespace gyre
