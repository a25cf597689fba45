// Tests of the shared-memory pipe with real forked processes: streams in both
// directions, back-pressure, timeouts, a peer killed with SIGKILL, abort, bogus
// segments, nothing left in /dev/shm, and waiters that sleep instead of spinning when
// there are more processes than cores. The in-process tests (ShmSendPipe::attach) are
// the ones ThreadSanitizer can check, since it only sees one process.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "transport/shm/shm_pipe.h"
#include "transport/shm/shm_segment.h"

namespace gyre {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

WaitContext within(Clock::duration d, const std::atomic<bool>* aborted = nullptr,
                   std::chrono::microseconds spin = 50us) {
  WaitContext ctx;
  ctx.deadline = Clock::now() + d;
  ctx.aborted = aborted;
  ctx.spin = spin;
  return ctx;
}

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The Error that f() throws; a test failure if it throws none.
template <typename F>
Error errorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a gyre::Error";
  return Error(ErrorCode::kInternal, "(none thrown)");
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// A forked process running body(); its exit status is 0 when body returns normally.
// Children report failures on stderr and through the status, never through gtest.
class Child {
 public:
  explicit Child(std::function<void()> body) {
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      int rc = 0;
      try {
        body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", ::getpid(), e.what());
        rc = 2;
      }
      ::_exit(rc);  // no atexit handlers, no gtest teardown in the child
    }
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void kill() { ::kill(pid_, SIGKILL); }

  // The exit code, -1 if killed by a signal, -2 if it did not end within `limit`.
  int join(Clock::duration limit = 30s) {
    auto until = Clock::now() + limit;
    for (;;) {
      int status = 0;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (Clock::now() >= until) return -2;
      std::this_thread::sleep_for(1ms);
    }
  }

 private:
  pid_t pid_ = -1;
};

// The stream both directions check: slice i has a size that varies over [0, B] (both
// ends included), a tag that numbers it, and bytes that depend on i and the offset.
size_t sliceSize(size_t i, size_t slotBytes) {
  if (i % 7 == 0) return slotBytes;
  return (i * 7919) % (slotBytes + 1);
}
std::byte pattern(size_t i, size_t j, uint32_t seed) {
  return static_cast<std::byte>((i * 131 + j * 7 + seed * 29 + (j >> 8)) & 0xff);
}
Tag tagOf(size_t i, size_t bytes) {
  Tag t;
  t.seq = static_cast<uint32_t>(i);
  t.count = bytes;
  t.coll = 3;
  t.root = static_cast<int32_t>(i % 5);
  return t;
}

void sendStream(SendPipe& tx, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    std::byte* slot = tx.acquire(within(20s));
    size_t bytes = sliceSize(i, tx.slotBytes());
    for (size_t j = 0; j < bytes; ++j) slot[j] = pattern(i, j, seed);
    tx.post(bytes, tagOf(i, bytes));
  }
  tx.flush(within(20s));
}

// "" when the n slices arrive in order with the right sizes, tags and bytes.
std::string recvStream(RecvPipe& rx, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    Slice s = rx.wait(within(20s));
    size_t bytes = sliceSize(i, rx.slotBytes());
    if (s.bytes != bytes) return fmt::format("slice {}: {} bytes, expected {}", i, s.bytes, bytes);
    if (!(s.tag == tagOf(i, bytes)))
      return fmt::format("slice {}: wrong tag (seq {})", i, s.tag.seq);
    for (size_t j = 0; j < bytes; ++j) {
      if (s.data[j] != pattern(i, j, seed)) return fmt::format("slice {}: byte {} differs", i, j);
    }
    rx.release();
  }
  return "";
}

class ShmPipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    token_ = fmt::format("t{}{}", ::getpid(), info->name());
  }

  // Every test must leave nothing in /dev/shm; remove leftovers so one failure does
  // not spill into the next run.
  void TearDown() override {
    std::vector<std::string> left = leftovers();
    EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
    for (const auto& f : left) ShmSegment::unlink("/" + f);
  }

  std::vector<std::string> leftovers() const {
    std::vector<std::string> found;
    std::string prefix = shmSegmentName(token_, 0, 0, 0).substr(1);
    prefix = prefix.substr(0, prefix.find('-', 5) + 1);  // "gyre-<token>-"
    if (DIR* d = ::opendir("/dev/shm")) {
      while (dirent* e = ::readdir(d)) {
        if (std::string(e->d_name).rfind(prefix, 0) == 0) found.push_back(e->d_name);
      }
      ::closedir(d);
    }
    return found;
  }

  std::string name(int sender, int receiver, uint64_t comm = 7) const {
    return shmSegmentName(token_, comm, sender, receiver);
  }

  std::string token_;
};

// ---- Data path -----------------------------------------------------------------------------

TEST_F(ShmPipeTest, StreamsBothWaysBetweenProcesses) {
  constexpr size_t kSlots = 4, kSlotBytes = 1000, kSlices = 1000;  // 1000: not a line multiple
  const pid_t parent = ::getpid();
  Child child([&] {
    auto rx = ShmRecvPipe::create(name(0, 1), kSlots, kSlotBytes, 0, parent);
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    sendStream(*tx, kSlices, 1);
    std::string err = recvStream(*rx, kSlices, 2);
    require(err.empty(), err);
    rx->unlinkName();
  });
  auto rx = ShmRecvPipe::create(name(1, 0), kSlots, kSlotBytes, 1, child.pid());
  auto tx = ShmSendPipe::open(name(0, 1), 1, child.pid(), within(20s));
  EXPECT_FALSE(ShmSegment::exists(name(0, 1))) << "the sender unlinks once it has mapped";
  EXPECT_EQ(recvStream(*rx, kSlices, 1), "");
  sendStream(*tx, kSlices, 2);
  EXPECT_EQ(child.join(), 0);
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
  Child child([&] {
    std::this_thread::sleep_for(100ms);
    auto rx = ShmRecvPipe::create(name(0, 1), 2, 64, 0, parent);
    std::string err = recvStream(*rx, 10, 9);
    require(err.empty(), err);
  });
  auto tx = ShmSendPipe::open(name(0, 1), 1, child.pid(), within(20s));
  sendStream(*tx, 10, 9);
  EXPECT_EQ(child.join(), 0);
}

// ---- Flow control --------------------------------------------------------------------------

TEST_F(ShmPipeTest, SenderBlocksWhenSlotsAreFullAndResumesOnRelease) {
  // CLOCK_MONOTONIC (steady_clock) is one clock for every process on the host, so the
  // child can report when its acquire() returned and the parent can compare.
  constexpr size_t kSlots = 4;
  const pid_t parent = ::getpid();
  Child child([&] {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    for (size_t i = 0; i <= kSlots; ++i) {
      std::byte* slot = tx->acquire(within(20s));
      int64_t now = Clock::now().time_since_epoch().count();
      std::memcpy(slot, &now, sizeof now);
      tx->post(sizeof now, tagOf(i, sizeof now));
    }
  });
  auto rx = ShmRecvPipe::create(name(1, 0), kSlots, 64, 1, child.pid());
  auto stampOf = [](const Slice& s) {
    int64_t t;
    std::memcpy(&t, s.data, sizeof t);
    return t;
  };
  std::vector<int64_t> acquiredAt{stampOf(rx->wait(within(20s)))};
  // Hold slice 0: the child fills the other K-1 slots, then its K+1-th acquire waits.
  std::this_thread::sleep_for(300ms);
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
  EXPECT_EQ(child.join(), 0);
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
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(posted.load(), kSlots) << "K slots posted, then the sender must wait";
  for (size_t i = 0; i < 2 * kSlots; ++i) {
    EXPECT_EQ(rx->wait(within(20s)).tag.seq, i);
    rx->release();
  }
  sender.join();
  EXPECT_EQ(posted.load(), 2 * kSlots);
}

// ---- Failures: timeout, dead peer, closed peer, abort ---------------------------------------

TEST_F(ShmPipeTest, ReceiverTimesOutNamingThePeerRank) {
  const pid_t parent = ::getpid();
  Child child([&] {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    std::this_thread::sleep_for(60s);  // alive, never posts
  });
  auto rx = ShmRecvPipe::create(name(1, 0), 4, 64, 1, child.pid());
  auto start = Clock::now();
  Error e = errorOf([&] { rx->wait(within(200ms)); });
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
  Error e = errorOf([&] { tx->acquire(within(100ms)); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("peer rank 3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("free slot"), std::string::npos) << e.what();
}

// Kills `child` `after` from now on another thread; returns when it was killed.
class DelayedKill {
 public:
  DelayedKill(Child& child, Clock::duration after)
      : thread_([this, &child, after] {
          std::this_thread::sleep_for(after);
          killedAt_ = Clock::now();
          child.kill();
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
  Child child([&] {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    tx->acquire(within(20s));
    tx->post(0, tagOf(0, 0));  // "ready"
    std::this_thread::sleep_for(60s);
  });
  auto rx = ShmRecvPipe::create(name(1, 0), 4, 64, 1, child.pid());
  rx->wait(within(20s));
  rx->release();
  DelayedKill killer(child, 100ms);
  Error e = errorOf([&] { rx->wait(within(20s)); });
  double ms = msSince(killer.join());
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find(fmt::format("peer rank 1 (pid {}) exited", child.pid())),
            std::string::npos)
      << e.what();
  EXPECT_LT(ms, 100) << "a dead peer must be found at once, not at the timeout";
}

TEST_F(ShmPipeTest, SenderLearnsOfAKilledReceiverPromptly) {
  constexpr size_t kSlots = 2;
  const pid_t parent = ::getpid();
  Child child([&] {
    auto rx = ShmRecvPipe::create(name(0, 1), kSlots, 64, 0, parent);
    std::this_thread::sleep_for(60s);  // never releases
  });
  auto tx = ShmSendPipe::open(name(0, 1), 1, child.pid(), within(20s));
  for (size_t i = 0; i < kSlots; ++i) {
    tx->acquire(within(20s));
    tx->post(0, tagOf(i, 0));
  }
  DelayedKill killer(child, 100ms);
  Error e = errorOf([&] { tx->acquire(within(20s)); });
  double ms = msSince(killer.join());
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find("peer rank 1"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("exited"), std::string::npos) << e.what();
  EXPECT_LT(ms, 100);
}

TEST_F(ShmPipeTest, OpenFailsPromptlyWhenTheCreatorDies) {
  Child child([&] { std::this_thread::sleep_for(60s); });  // never creates
  DelayedKill killer(child, 100ms);
  Error e = errorOf([&] { ShmSendPipe::open(name(0, 1), 1, child.pid(), within(20s)); });
  double ms = msSince(killer.join());
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_LT(ms, 100);
}

TEST_F(ShmPipeTest, ReceiverKilledBeforeTheSenderOpenedLeavesNothingOnceOpened) {
  // A receiver that dies between create and the sender's open cannot unlink; the sender
  // still maps and unlinks the name, then finds the receiver gone when it blocks.
  const pid_t parent = ::getpid();
  Child child([&] {
    auto rx = ShmRecvPipe::create(name(0, 1), 1, 64, 0, parent);
    std::this_thread::sleep_for(60s);
  });
  const pid_t receiverPid = child.pid();
  while (!ShmSegment::exists(name(0, 1))) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // let it finish writing the header
  child.kill();
  EXPECT_EQ(child.join(), -1);
  auto tx = ShmSendPipe::open(name(0, 1), 1, receiverPid, within(20s));
  EXPECT_FALSE(ShmSegment::exists(name(0, 1)));
  tx->acquire(within(20s));
  tx->post(0, Tag{});
  Error e = errorOf([&] { tx->acquire(within(20s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
}

TEST_F(ShmPipeTest, SlicesPostedBeforeTheSenderExitsAreStillDelivered) {
  const pid_t parent = ::getpid();
  Child child([&] {
    auto tx = ShmSendPipe::open(name(1, 0), 0, parent, within(20s));
    sendStream(*tx, 3, 4);
  });  // exits normally: the ShmSendPipe destructor marks the pipe closed
  auto rx = ShmRecvPipe::create(name(1, 0), 4, 128, 1, child.pid());
  EXPECT_EQ(child.join(), 0);
  EXPECT_EQ(recvStream(*rx, 3, 4), "");
  Error e = errorOf([&] { rx->wait(within(20s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
}

TEST_F(ShmPipeTest, AbortFromAnotherThreadEndsAWait) {
  auto rx = ShmRecvPipe::create(name(2, 3), 1, 64, 2, ::getpid());
  auto tx = ShmSendPipe::attach(*rx, 3);
  std::atomic<bool> aborted{false};
  Clock::time_point abortedAt;
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    abortedAt = Clock::now();
    aborted.store(true);
  });
  Error e = errorOf([&] { rx->wait(within(20s, &aborted)); });
  aborter.join();
  EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
  EXPECT_LT(msSince(abortedAt), 100);
  // The sending side too, blocked on a credit.
  tx->acquire(within(1s));
  tx->post(0, Tag{});
  e = errorOf([&] { tx->acquire(within(20s, &aborted)); });
  EXPECT_EQ(e.code(), ErrorCode::kAborted) << e.what();
}

// ---- Segments: cleanup, bogus contents, /dev/shm size ---------------------------------------

TEST_F(ShmPipeTest, NamesAreUnlinkedByWhicheverSideComesFirst) {
  {
    auto rx = ShmRecvPipe::create(name(2, 3), 2, 64, 2, ::getpid());
    EXPECT_TRUE(ShmSegment::exists(name(2, 3)));
  }  // a receiver whose sender never came: its destructor unlinks
  EXPECT_FALSE(ShmSegment::exists(name(2, 3)));
  auto rx = ShmRecvPipe::create(name(2, 3), 2, 64, 2, ::getpid());
  auto tx = ShmSendPipe::open(name(2, 3), 3, ::getpid(), within(1s));
  EXPECT_FALSE(ShmSegment::exists(name(2, 3)));
  rx->unlinkName();  // after the init barrier: already gone, not an error
  rx->unlinkName();
  sendStream(*tx, 2, 0);
  EXPECT_EQ(recvStream(*rx, 2, 0), "");
}

TEST_F(ShmPipeTest, BogusSegmentsAreRefusedOnOpen) {
  using namespace shm_layout;
  auto refused = [&](const std::string& n, const char* why) {
    auto start = Clock::now();
    Error e = errorOf([&] { ShmSendPipe::open(n, 3, ::getpid(), within(5s)); });
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << why << ": " << e.what();
    EXPECT_LT(msSince(start), 1000) << why << ": refused at once, not at the deadline";
    return std::string(e.what());
  };
  {  // garbage
    auto seg = ShmSegment::create(name(9, 1), 65536);
    std::memset(seg.data(), 0xab, seg.size());
    EXPECT_NE(refused(name(9, 1), "garbage").find("magic"), std::string::npos);
    ShmSegment::unlink(name(9, 1));
  }
  {  // shorter than a header
    auto seg = ShmSegment::create(name(9, 2), 16);
    refused(name(9, 2), "short");
    ShmSegment::unlink(name(9, 2));
  }
  // Valid pipes, then one field forged through a second mapping.
  auto forge = [&](int id, const std::function<void(Header&)>& edit) {
    auto rx = ShmRecvPipe::create(name(id, 3), 4, 4096, 3, ::getpid());
    ShmSegment other = ShmSegment::open(name(id, 3), Clock::now() + 1s);
    edit(*reinterpret_cast<Header*>(other.data()));
    return rx;
  };
  {
    auto rx = forge(10, [](Header& h) { h.version = kVersion + 1; });
    EXPECT_NE(refused(name(10, 3), "version").find("version"), std::string::npos);
  }
  {
    auto rx = forge(11, [](Header& h) { h.slots = size_t{1} << 40; });
    EXPECT_NE(refused(name(11, 3), "too many slots").find("out of bounds"), std::string::npos);
  }
  {
    auto rx = forge(12, [](Header& h) { h.slotBytes = 8192; });  // offsets no longer fit
    refused(name(12, 3), "inconsistent");
  }
  {
    // Consistent with itself but far larger than the segment.
    auto rx = forge(13, [](Header& h) {
      Geometry g = geometry(64, size_t{1} << 30);
      h.slots = g.slots;
      h.slotBytes = g.slotBytes;
      h.slotStride = g.slotStride;
      h.descOffset = g.descOffset;
      h.dataOffset = g.dataOffset;
      h.segmentBytes = g.segmentBytes;
    });
    EXPECT_NE(refused(name(13, 3), "too big").find("segment has"), std::string::npos);
  }
  {
    auto rx = forge(14, [](Header& h) { h.receiverPid = h.receiverPid + 1; });
    EXPECT_NE(refused(name(14, 3), "creator pid").find("created by pid"), std::string::npos);
  }
  {
    auto rx = forge(15, [](Header& h) { h.senderPid = h.senderPid + 1; });
    EXPECT_NE(refused(name(15, 3), "sender pid").find("made for sender pid"), std::string::npos);
  }
}

TEST_F(ShmPipeTest, CorruptCountersAndSizesAreErrorsNotOutOfBounds) {
  using namespace shm_layout;
  auto rx = ShmRecvPipe::create(name(2, 3), 4, 64, 2, ::getpid());
  ShmSegment other = ShmSegment::open(name(2, 3), Clock::now() + 1s);
  auto& h = *reinterpret_cast<Header*>(other.data());
  auto* descs = reinterpret_cast<SlotDesc*>(other.data() + h.descOffset);
  // A slice claiming more bytes than a slot holds.
  descs[0].bytes = 1 << 20;
  h.posted.store(1);
  Error e = errorOf([&] { rx->wait(within(1s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  // More slices posted than there are slots.
  h.posted.store(100);
  e = errorOf([&] { rx->wait(within(1s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  // A sender whose receiver "released" more than was posted.
  auto tx = ShmSendPipe::attach(*rx, 3);
  h.released.store(50);
  e = errorOf([&] {
    for (int i = 0; i < 5; ++i) {
      tx->acquire(within(1s));
      tx->post(0, Tag{});
    }
  });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
}

TEST_F(ShmPipeTest, TooSmallDevShmIsReportedAtCreation) {
  size_t huge = size_t{1} << 50;  // 1 PiB: larger than any /dev/shm
  Error e = errorOf([&] { ShmSegment::create(name(0, 1), huge); });
  EXPECT_EQ(e.code(), ErrorCode::kSystemError);
  EXPECT_NE(std::string(e.what()).find("/dev/shm is too small"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
  EXPECT_FALSE(ShmSegment::exists(name(0, 1)));
  auto free = shmFreeBytes();
  ASSERT_TRUE(free.has_value());
  EXPECT_GT(*free, 0u);
}

TEST_F(ShmPipeTest, SegmentBasics) {
  auto seg = ShmSegment::create(name(0, 1), 100);
  EXPECT_EQ(seg.size(), 100u);
  Error e = errorOf([&] { ShmSegment::create(name(0, 1), 100); });
  EXPECT_EQ(e.code(), ErrorCode::kSystemError);
  EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  EXPECT_TRUE(ShmSegment::unlink(name(0, 1)));
  EXPECT_FALSE(ShmSegment::unlink(name(0, 1)));
  EXPECT_EQ(seg.size(), 100u) << "the mapping outlives the name";
  seg.data()[99] = std::byte{1};
  e = errorOf([&] { ShmSegment::open(name(5, 6), Clock::now() + 50ms); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  e = errorOf([&] { ShmSegment::create("no-slash", 10); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  e = errorOf([&] { ShmRecvPipe::create(name(0, 1), 0, 64, 0, ::getpid()); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

TEST(ShmSegmentName, IsShortSanitisedAndUnique) {
  EXPECT_EQ(shmSegmentName("abc", 0x1f, 2, 3), "/gyre-abc-1f-2-3");
  std::string odd = shmSegmentName("a/b c", 1, 0, 1);
  EXPECT_EQ(odd.find('/', 1), std::string::npos) << odd;
  EXPECT_EQ(odd.find(' '), std::string::npos) << odd;
  EXPECT_NE(shmSegmentName("a.b", 1, 0, 1), shmSegmentName("a_b", 1, 0, 1));
  std::string longToken(500, 'x');
  std::string n = shmSegmentName(longToken, ~uint64_t{0}, 1023, 1022);
  EXPECT_LT(n.size(), 80u) << n;
  EXPECT_NE(n, shmSegmentName(longToken + "y", ~uint64_t{0}, 1023, 1022));
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
    std::this_thread::sleep_for(300ms);
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
  std::vector<std::unique_ptr<Child>> leaders;
  for (int p = 0; p < kPairs; ++p) {
    leaders.push_back(std::make_unique<Child>([this, p] {
      // The leader (rank 0) forks its partner (rank 1), so each knows the other's pid.
      const pid_t leader = ::getpid();
      Child partner([&] {
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
      });
      auto rx = ShmRecvPipe::create(name(1, 0, p), 2, 64, 1, partner.pid());
      auto tx = ShmSendPipe::open(name(0, 1, p), 1, partner.pid(), within(20s));
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
      require(partner.join() == 0, "partner failed");
    }));
  }
  for (auto& l : leaders) EXPECT_EQ(l->join(60s), 0);
  double ms = msSince(start);
  std::fprintf(stderr, "%d pairs x %zu round trips on %u cores: %.0f ms (%.1f us per round trip)\n",
               kPairs, kRounds, std::thread::hardware_concurrency(), ms, ms * 1e3 / kRounds);
  EXPECT_LT(ms, 10000);
}

}  // namespace
}  // namespace gyre
