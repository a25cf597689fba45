// Tests of the shared-memory pipe's segments: names unlinked by whichever side comes
// first, bogus and corrupted segments refused (errors, never out-of-bounds accesses), a
// /dev/shm too small reported at creation, and the segment names.
#include <gtest/gtest.h>

#include "shm_pipe_harness.h"

namespace gyre {
namespace {

using namespace shm_test;
using namespace std::chrono_literals;

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
    Error e = expectError([&] { ShmSendPipe::open(n, 3, ::getpid(), within(5s)); });
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
  Error e = expectError([&] { rx->wait(within(1s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  // More slices posted than there are slots.
  h.posted.store(100);
  e = expectError([&] { rx->wait(within(1s)); });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  // A sender whose receiver "released" more than was posted.
  auto tx = ShmSendPipe::attach(*rx, 3);
  h.released.store(50);
  e = expectError([&] {
    for (int i = 0; i < 5; ++i) {
      tx->acquire(within(1s));
      tx->post(0, Tag{});
    }
  });
  EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
}

TEST_F(ShmPipeTest, TooSmallDevShmIsReportedAtCreation) {
  size_t huge = size_t{1} << 50;  // 1 PiB: larger than any /dev/shm
  Error e = expectError([&] { ShmSegment::create(name(0, 1), huge); });
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
  Error e = expectError([&] { ShmSegment::create(name(0, 1), 100); });
  EXPECT_EQ(e.code(), ErrorCode::kSystemError);
  EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  EXPECT_TRUE(ShmSegment::unlink(name(0, 1)));
  EXPECT_FALSE(ShmSegment::unlink(name(0, 1)));
  EXPECT_EQ(seg.size(), 100u) << "the mapping outlives the name";
  seg.data()[99] = std::byte{1};
  e = expectError([&] { ShmSegment::open(name(5, 6), Clock::now() + 50ms); });
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  e = expectError([&] { ShmSegment::create("no-slash", 10); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  e = expectError([&] { ShmRecvPipe::create(name(0, 1), 0, 64, 0, ::getpid()); });
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

}  // namespace
}  // namespace gyre
