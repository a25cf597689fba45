// What a remote can send, checked in one process: the pure wire checks (frame headers,
// status records), a TcpRecvPipe fed hostile byte streams through a socketpair, the
// return path of a TcpSendPipe, and GYRE_SOCKET_IFNAME's interface filter.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "ring/host_identity.h"
#include "transport/tcp/tcp_pipe.h"
#include "transport/tcp/tcp_progress.h"
#include "transport/wire.h"
#include "tcp_pair.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::tcpPair;

WaitContext within(Clock::duration d) {
  WaitContext ctx;
  ctx.deadline = Clock::now() + d;
  ctx.spin = 0us;
  return ctx;
}

PeerStatus aborted(int suspect, const std::string& reason) {
  PeerStatus s;
  s.state = PeerStatus::State::kAborted;
  s.code = ErrorCode::kTimeout;
  s.writer = 2;
  s.suspect = suspect;
  s.reporter = 3;
  s.seq = 17;
  s.reason = reason;
  return s;
}

TEST(WireChecks, FrameHeaders) {
  FrameHeader h, out;
  h.bytes = 4096;
  EXPECT_FALSE(checkFrameHeader(&h, sizeof(h), 4096, &out));
  h.bytes = 4097;
  EXPECT_TRUE(checkFrameHeader(&h, sizeof(h), 4096, &out));
  h.magic = FrameHeader::kControlMagic;
  h.bytes = sizeof(StatusRecord);
  EXPECT_FALSE(checkFrameHeader(&h, sizeof(h), 64, &out)) << "control frames need no slot";
  h.bytes = sizeof(StatusRecord) + 1;
  EXPECT_TRUE(checkFrameHeader(&h, sizeof(h), 1 << 20, &out));
  h.magic = 0x12345678;
  EXPECT_TRUE(checkFrameHeader(&h, sizeof(h), 1 << 20, &out));
  EXPECT_TRUE(checkFrameHeader(&h, sizeof(h) - 1, 1 << 20, &out));
}

TEST(WireChecks, StatusRecordsRoundTripAndRefuseNonsense) {
  PeerStatus in = aborted(1, "rank 3 saw \x1b[31mred\x7f text");
  StatusRecord r = encodeStatus(in);
  PeerStatus out;
  ASSERT_FALSE(checkStatusRecord(&r, sizeof(r), 8, &out));
  EXPECT_EQ(out.suspect, 1);
  EXPECT_EQ(out.reporter, 3);
  EXPECT_EQ(out.seq, 17u);
  EXPECT_EQ(out.code, ErrorCode::kTimeout);
  EXPECT_EQ(out.reason, "rank 3 saw ?[31mred? text") << "control bytes must not reach a log";

  auto refused = [&](auto edit) {
    StatusRecord bad = encodeStatus(in);
    edit(bad);
    return checkStatusRecord(&bad, sizeof(bad), 8, &out).has_value();
  };
  EXPECT_TRUE(refused([](StatusRecord& b) { b.magic = 1; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.state = 0; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.state = 4; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.code = 0; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.code = 200; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.suspect = 8; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.reporter = -2; }));
  EXPECT_TRUE(refused([](StatusRecord& b) { b.reasonBytes = 225; }));
  EXPECT_TRUE(checkStatusRecord(&r, sizeof(r) - 1, 8, &out).has_value());
  PeerStatus longReason = aborted(1, std::string(1000, 'x'));
  StatusRecord cut = encodeStatus(longReason);
  ASSERT_FALSE(checkStatusRecord(&cut, sizeof(cut), 0, &out));
  EXPECT_EQ(out.reason.size(), PeerStatus::kMaxReasonBytes);
}

// A receiving pipe on one end of a socketpair; the test writes raw bytes to the other.
struct HostileStream : ::testing::Test {
  void SetUp() override {
    auto [a, b] = tcpPair();
    rx = std::make_unique<TcpRecvPipe>(std::move(a), 1, 2, 64, 4);
    peer = std::move(b);
  }
  void send(const void* p, size_t n) { ASSERT_EQ(::write(peer.get(), p, n), ssize_t(n)); }
  void sendFrame(uint32_t magic, const std::vector<uint8_t>& payload, uint32_t bytes) {
    FrameHeader h;
    h.magic = magic;
    h.bytes = bytes;
    send(&h, sizeof(h));
    if (!payload.empty()) send(payload.data(), payload.size());
  }
  std::string errorOf(ErrorCode* code = nullptr) {
    try {
      rx->wait(within(2s));
    } catch (const Error& e) {
      if (code) *code = e.code();
      return e.what();
    }
    return "";
  }
  std::unique_ptr<TcpRecvPipe> rx;
  Fd peer;
};

TEST_F(HostileStream, GarbageIsABadFrame) {
  send("GET / HTTP/1.0\r\n\r\nAAAAAAAAAAAAAAAAAAAAAAAAAAA", 45);
  EXPECT_NE(errorOf().find("bad frame from peer rank 1"), std::string::npos);
}

TEST_F(HostileStream, AFrameLargerThanTheSlotIsRefused) {
  sendFrame(FrameHeader::kMagic, std::vector<uint8_t>(65, 1), 65);
  EXPECT_NE(errorOf().find("exceeds the slot size 64"), std::string::npos);
}

TEST_F(HostileStream, AControlFrameOfTheWrongSizeIsRefused) {
  sendFrame(FrameHeader::kControlMagic, std::vector<uint8_t>(8, 0), 8);
  EXPECT_NE(errorOf().find("control frame of 8 bytes"), std::string::npos);
}

TEST_F(HostileStream, AStatusWithARankOutsideTheWorldIsRefused) {
  StatusRecord r = encodeStatus(aborted(4, "x"));  // world of 4: rank 4 does not exist
  sendFrame(FrameHeader::kControlMagic,
            std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&r),
                                 reinterpret_cast<uint8_t*>(&r) + sizeof(r)),
            sizeof(r));
  EXPECT_NE(errorOf().find("bad status from peer rank 1"), std::string::npos);
}

TEST_F(HostileStream, FramesBeforeAnAbortAreDeliveredThenTheAbortIsNamed) {
  sendFrame(FrameHeader::kMagic, {1, 2, 3}, 3);
  StatusRecord r = encodeStatus(aborted(0, "peer rank 0 closed the connection"));
  sendFrame(FrameHeader::kControlMagic,
            std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&r),
                                 reinterpret_cast<uint8_t*>(&r) + sizeof(r)),
            sizeof(r));
  peer.reset();
  Slice s = rx->wait(within(2s));
  ASSERT_EQ(s.bytes, 3u);
  EXPECT_EQ(s.data[2], std::byte{3});
  rx->release();
  try {
    rx->wait(within(2s));
    FAIL() << "no error after the abort";
  } catch (const PeerAbortError& e) {
    EXPECT_EQ(e.status().suspect, 0);
    EXPECT_EQ(e.status().reporter, 3);
    EXPECT_NE(std::string(e.what()).find("peer rank 1 aborted"), std::string::npos) << e.what();
  }
}

TEST_F(HostileStream, EofInTheMiddleOfAFrameIsNamed) {
  sendFrame(FrameHeader::kMagic, {1, 2}, 10);
  peer.reset();
  EXPECT_NE(errorOf().find("in the middle of a frame"), std::string::npos);
}

TEST_F(HostileStream, DirectReceiveSkipsStatusesAndChecksLengths) {
  PeerStatus waiting;
  waiting.state = PeerStatus::State::kWaiting;
  waiting.writer = 1;
  waiting.suspect = 0;
  StatusRecord r = encodeStatus(waiting);
  sendFrame(FrameHeader::kControlMagic,
            std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&r),
                                 reinterpret_cast<uint8_t*>(&r) + sizeof(r)),
            sizeof(r));
  sendFrame(FrameHeader::kMagic, {9, 9, 9, 9}, 4);
  uint8_t out[8] = {0};
  Slice s = rx->waitInto(out, 4, Tag{}, within(2s));
  EXPECT_EQ(s.data, reinterpret_cast<std::byte*>(out));
  EXPECT_EQ(out[3], 9);
  EXPECT_EQ(out[4], 0) << "wrote past the expected length";
  // A frame longer than expected is not placed: the caller sees it and refuses it.
  sendFrame(FrameHeader::kMagic, std::vector<uint8_t>(6, 7), 6);
  Slice t = rx->waitInto(out, 4, Tag{}, within(2s));
  EXPECT_NE(t.data, reinterpret_cast<std::byte*>(out));
  EXPECT_EQ(t.bytes, 6u);
  EXPECT_EQ(out[4], 0);
}

TEST(TcpReturnPath, ASenderLearnsThatItsReceiverAborted) {
  auto [a, b] = tcpPair();
  TcpProgress progress;
  TcpSendPipe tx(std::move(a), 1, 2, 4096, &progress, 4);
  TcpRecvPipe rx(std::move(b), 0, 2, 4096, 4);
  rx.publish(aborted(2, "rank 3 found rank 2 stalled"));
  // Credits are free, so posting works; a wait for what only the peer can give fails.
  std::byte* slot = tx.acquire(within(2s));
  std::memset(slot, 0, 4096);
  tx.post(4096, Tag{});
  try {
    for (int i = 0; i < 1000; ++i) {
      tx.acquire(within(2s));
      tx.post(4096, Tag{});
    }
    FAIL() << "the sender never noticed";
  } catch (const PeerAbortError& e) {
    EXPECT_EQ(e.status().suspect, 2);
  } catch (const Error& e) {
    // The abort status may lose the race with the reset of a closed socket.
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
  }
}

TEST(InterfaceFilter, NcclSyntax) {
  auto f = InterfaceFilter::parse("eth,ib");
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("ib1"));
  EXPECT_FALSE(f.matches("lo"));
  f = InterfaceFilter::parse("^docker,lo");
  EXPECT_FALSE(f.matches("docker0"));
  EXPECT_FALSE(f.matches("lo"));
  EXPECT_TRUE(f.matches("eth0"));
  f = InterfaceFilter::parse("=eth0");
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_FALSE(f.matches("eth01"));
  f = InterfaceFilter::parse("^=eth0");
  EXPECT_FALSE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("eth01"));
}

TEST(InterfaceFilter, PicksTheNamedInterfaceOrFailsNamingTheSpec) {
  EXPECT_EQ(listenAddress("=lo", "127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(listenAddress("", "127.0.0.1"), "127.0.0.1");
  try {
    listenAddress("=gyre-no-such-if", "127.0.0.1");
    FAIL() << "a name that matches nothing was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("gyre-no-such-if"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lo 127.0.0.1"), std::string::npos) << e.what();
  }
  std::string other = [] {
    try {
      return listenAddress("^lo", "127.0.0.1");
    } catch (const Error&) {
      return std::string();  // a host with loopback only
    }
  }();
  if (!other.empty()) {
    EXPECT_NE(other, "127.0.0.1");
  }
}

}  // namespace
}  // namespace gyre
