// The rdma pipe on a real verbs device (soft-RoCE in the VM: tools/rdma_vm.sh): flow
// control and slot reuse, tags and sizes across the slot boundary, the peer's abort,
// a closed and a killed peer, a QP forced into the error state. Both ends live in this
// process (two QPs, on RDMA_DEV_A and RDMA_DEV_B when set), except where a peer is killed.
// Without a device every case skips saying why (fails under GYRE_REQUIRE_RDMA=1).
#include <gtest/gtest.h>

#include "rdma_test_support.h"

#ifdef GYRE_HAVE_VERBS
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "transport/rdma/rdma_pipe.h"
#include "transport/rdma/verbs_device.h"

namespace gyre {
namespace {

using Ms = std::chrono::milliseconds;

WaitContext within(Ms ms) { return WaitContext{Clock::now() + ms, nullptr, std::chrono::microseconds(20)}; }

std::shared_ptr<RdmaDevice> openSide(int side) {
  Options o;
  o.ibHca = testing::rdmaHcaFor(side);
  std::string why;
  auto d = RdmaDevice::open(o, &why);
  if (!d) throw Error(ErrorCode::kSystemError, why);
  return d;
}

struct Pair {
  std::unique_ptr<RdmaSendPipe> tx;  // rank 0 -> rank 1
  std::unique_ptr<RdmaRecvPipe> rx;
};

Pair makePair(size_t slots, size_t slotBytes) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) failSystem(errno, "socketpair");
  Pair p;
  p.tx = std::make_unique<RdmaSendPipe>(openSide(0), 1, slots, slotBytes, 2);
  p.rx = std::make_unique<RdmaRecvPipe>(openSide(1), 0, slots, slotBytes, 2);
  std::string te = p.tx->endpoint().encode(), re = p.rx->endpoint().encode();
  p.tx->connect(re, Fd(sv[0]));
  p.rx->connect(te, Fd(sv[1]));
  return p;
}

Tag tagOf(uint32_t seq, uint64_t count) {
  Tag t;
  t.seq = seq;
  t.count = count;
  t.coll = 3;
  return t;
}

std::byte pattern(size_t slice, size_t i) { return std::byte(static_cast<uint8_t>(slice * 31 + i * 7 + 1)); }

TEST(RdmaPipe, FlowControlSlotReuseTagsAndSizes) {
  GYRE_SKIP_WITHOUT_RDMA();
  constexpr size_t kSlots = 4, kBytes = 4096, kSlices = 300;
  Pair p = makePair(kSlots, kBytes);
  // Credits: K posts go out with nobody releasing; the next acquire waits and times out.
  for (size_t s = 0; s < kSlots; ++s) {
    std::byte* slot = p.tx->acquire(within(Ms(5000)));
    for (size_t i = 0; i < kBytes; ++i) slot[i] = pattern(s, i);
    p.tx->post(kBytes, tagOf(static_cast<uint32_t>(s), kBytes));
  }
  try {
    p.tx->acquire(within(Ms(300)));
    FAIL() << "acquire succeeded without a credit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 1"), std::string::npos) << e.what();
  }
  // Then a stream of varying sizes (0 .. B) through the same K slots, checked byte by byte.
  std::thread sender([&] {
    for (size_t s = kSlots; s < kSlices; ++s) {
      const size_t bytes = (s * 977) % (kBytes + 1);
      std::byte* slot = p.tx->acquire(within(Ms(30000)));
      for (size_t i = 0; i < bytes; ++i) slot[i] = pattern(s, i);
      p.tx->post(bytes, tagOf(static_cast<uint32_t>(s), bytes));
    }
    p.tx->flush(within(Ms(30000)));
  });
  size_t bad = 0;
  for (size_t s = 0; s < kSlices; ++s) {
    Slice sl = p.rx->wait(within(Ms(30000)));
    const size_t bytes = s < kSlots ? kBytes : (s * 977) % (kBytes + 1);
    EXPECT_EQ(sl.bytes, bytes) << "slice " << s;
    EXPECT_TRUE(sl.tag == tagOf(static_cast<uint32_t>(s), bytes)) << "slice " << s;
    for (size_t i = 0; i < std::min(bytes, sl.bytes); ++i) bad += sl.data[i] != pattern(s, i);
    // wait() again before release() is the same slice.
    EXPECT_EQ(p.rx->wait(within(Ms(1000))).data, sl.data);
    p.rx->release();
  }
  sender.join();
  EXPECT_EQ(bad, 0u);
}

TEST(RdmaPipe, PeerAbortArrivesAfterTheSlicesBeforeIt) {
  GYRE_SKIP_WITHOUT_RDMA();
  Pair p = makePair(4, 4096);
  for (uint32_t s = 0; s < 3; ++s) {
    std::byte* slot = p.tx->acquire(within(Ms(5000)));
    std::memset(slot, int(s), 100);
    p.tx->post(100, tagOf(s, 100));
  }
  PeerStatus st;
  st.state = PeerStatus::State::kAborted;
  st.writer = 0;
  st.reporter = 0;
  st.reason = "test abort";
  p.tx->publish(st);
  for (uint32_t s = 0; s < 3; ++s) {
    Slice sl = p.rx->wait(within(Ms(5000)));
    EXPECT_EQ(sl.tag.seq, s);
    p.rx->release();
  }
  try {
    p.rx->wait(within(Ms(5000)));
    FAIL() << "no abort";
  } catch (const PeerAbortError& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p.tx->acquire(within(Ms(100))), Error);  // this end is closed for good
}

TEST(RdmaPipe, ReceiverAbortFailsAWaitingSender) {
  GYRE_SKIP_WITHOUT_RDMA();
  Pair p = makePair(2, 4096);
  for (uint32_t s = 0; s < 2; ++s) {
    p.tx->acquire(within(Ms(5000)));
    p.tx->post(10, tagOf(s, 10));
  }
  PeerStatus st;
  st.state = PeerStatus::State::kAborted;
  st.writer = 1;
  st.reporter = 1;
  st.reason = "receiver gave up";
  p.rx->publish(st);
  auto t0 = Clock::now();
  EXPECT_THROW(p.tx->acquire(within(Ms(20000))), PeerAbortError);
  EXPECT_LT(Clock::now() - t0, Ms(5000));
}

TEST(RdmaPipe, ClosedPeerIsAnErrorNotATimeout) {
  GYRE_SKIP_WITHOUT_RDMA();
  Pair p = makePair(4, 4096);
  p.tx->acquire(within(Ms(5000)));
  p.tx->post(8, tagOf(0, 8));
  p.tx->flush(within(Ms(5000)));
  p.tx.reset();
  EXPECT_EQ(p.rx->wait(within(Ms(5000))).bytes, 8u);  // delivered before the close
  p.rx->release();
  auto t0 = Clock::now();
  try {
    p.rx->wait(within(Ms(20000)));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, Ms(5000));
}

TEST(RdmaPipe, QpForcedIntoErrorFailsBothEnds) {
  GYRE_SKIP_WITHOUT_RDMA();
  Pair p = makePair(4, 4096);
  p.rx->forceError();
  try {
    p.rx->wait(within(Ms(10000)));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("error state"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 0"), std::string::npos) << e.what();
  }
  // The sender learns it within seconds, not at its timeout.
  auto t0 = Clock::now();
  try {
    for (uint32_t s = 0; s < 8; ++s) {
      p.tx->acquire(within(Ms(30000)));
      p.tx->post(10, tagOf(s, 10));
    }
    p.tx->flush(within(Ms(30000)));
    FAIL() << "the sender did not notice";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 1"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, Ms(5000));
}

// A sender process killed with SIGKILL mid-stream: the receiver fails naming it, within
// seconds (the control connection's EOF), after the slices that had arrived.
TEST(RdmaPipe, KilledPeerProcessIsNamed) {
  GYRE_SKIP_WITHOUT_RDMA();
  int ctl[2], ex[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ex), 0);
  auto rx = std::make_unique<RdmaRecvPipe>(openSide(1), 0, 4, 4096, 2);
  testing::ForkedRanks sender(1);
  sender.start([&](int) {
    ::close(ctl[1]);
    ::close(ex[1]);
    RdmaSendPipe tx(openSide(0), 1, 4, 4096, 2);
    std::string mine = tx.endpoint().encode(), theirs(mine.size(), '\0');
    writeExact(ex[0], mine.data(), mine.size(), Clock::now() + Ms(10000));
    readExact(ex[0], theirs.data(), theirs.size(), Clock::now() + Ms(10000));
    tx.connect(theirs, Fd(ctl[0]));
    for (uint32_t s = 0;; ++s) {
      tx.acquire(within(Ms(60000)));
      tx.post(64, tagOf(s, 64));
    }
  });
  ::close(ctl[0]);
  ::close(ex[0]);
  std::string mine = rx->endpoint().encode(), theirs(mine.size(), '\0');
  writeExact(ex[1], mine.data(), mine.size(), Clock::now() + Ms(10000));
  readExact(ex[1], theirs.data(), theirs.size(), Clock::now() + Ms(10000));
  ::close(ex[1]);
  rx->connect(theirs, Fd(ctl[1]));
  for (int s = 0; s < 20; ++s) {
    rx->wait(within(Ms(30000)));
    rx->release();
  }
  sender.kill(0);
  EXPECT_TRUE(sender.join(0, Clock::now() + Ms(10000)).killedBy(SIGKILL));
  auto t0 = Clock::now();
  try {
    for (int s = 0; s < 100; ++s) {  // what was in flight, then the error
      rx->wait(within(Ms(20000)));
      rx->release();
    }
    FAIL() << "no error after the peer was killed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - t0, Ms(5000));
}

TEST(RdmaPipe, DisagreeingSlotGeometryFailsAtConnect) {
  GYRE_SKIP_WITHOUT_RDMA();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  RdmaSendPipe tx(openSide(0), 1, 4, 4096, 2);
  RdmaRecvPipe rx(openSide(1), 0, 4, 8192, 2);
  try {
    tx.connect(rx.endpoint().encode(), Fd(sv[0]));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GYRE_SLOT_BYTES"), std::string::npos) << e.what();
  }
  ::close(sv[1]);
}

}  // namespace
}  // namespace gyre
#endif  // GYRE_HAVE_VERBS

// Pure parts, on every machine.
#include "base/error.h"
#include "transport/rdma/hca_filter.h"
#ifdef GYRE_HAVE_VERBS
#include "transport/rdma/verbs_device.h"
#endif

namespace gyre {
namespace {

TEST(RdmaSetup, HcaFilterHasNcclSyntax) {
  HcaFilter all = HcaFilter::parse("");
  EXPECT_TRUE(all.allows("mlx5_0", 1));
  HcaFilter some = HcaFilter::parse("mlx5_0:1,mlx5_1");
  EXPECT_TRUE(some.allows("mlx5_0", 1));
  EXPECT_FALSE(some.allows("mlx5_0", 2));
  EXPECT_TRUE(some.allows("mlx5_1", 2));
  EXPECT_TRUE(some.allows("mlx5_10", 1));  // a prefix
  EXPECT_FALSE(some.allows("rxe0", 1));
  HcaFilter exact = HcaFilter::parse("=mlx5_1");
  EXPECT_TRUE(exact.allows("mlx5_1", 1));
  EXPECT_FALSE(exact.allows("mlx5_10", 1));
  HcaFilter excl = HcaFilter::parse("^mlx5_1");
  EXPECT_FALSE(excl.allows("mlx5_1", 1));
  EXPECT_FALSE(excl.allows("mlx5_12", 1));
  EXPECT_TRUE(excl.allows("rxe0", 1));
  HcaFilter exclExact = HcaFilter::parse("^=rxe_a");
  EXPECT_FALSE(exclExact.allows("rxe_a", 1));
  EXPECT_TRUE(exclExact.allows("rxe_ab", 1));
  EXPECT_THROW(HcaFilter::parse("mlx5_0:x"), Error);
  EXPECT_THROW(HcaFilter::parse(",mlx5_0"), Error);
  EXPECT_THROW(HcaFilter::parse("^"), Error);
}

#ifdef GYRE_HAVE_VERBS
TEST(RdmaSetup, RegistrationFailureNamesTheMemlockLimit) {
  std::string m = registrationFailure(ENOMEM, 1 << 20, "rdma receive slots from peer rank 2");
  EXPECT_NE(m.find("RLIMIT_MEMLOCK"), std::string::npos) << m;
  EXPECT_NE(m.find("ulimit -l"), std::string::npos) << m;
  EXPECT_NE(m.find("LimitMEMLOCK"), std::string::npos) << m;
  EXPECT_NE(m.find("peer rank 2"), std::string::npos) << m;
}
#endif


}  // namespace
}  // namespace gyre
