// Several TCP connections per pipe (GYRE_NSOCKS): the striped pipe over loopback TCP
// (slices of every size, both send paths and both receive paths, checked byte for byte
// and tag for tag in order; a lane closed under it; an abort reaching a receiver on any
// lane), then communicators with GYRE_NSOCKS=2 and 4 running the collectives over tcp
// with exact checks at counts that cross the slot and lane boundaries, and a rank that
// shuts down one of its many data sockets mid-stream: every rank must fail promptly
// naming a peer and the collective, none may hang.
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collective_test_support.h"
#include "data_sockets.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "store/tcp_store.h"
#include "tcp_pair.h"
#include "transport/tcp/tcp_progress.h"
#include "transport/tcp/tcp_striped_pipe.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::dataSockets;
using testing::tcpPair;
using testing::CommRanks;
using testing::RankResult;

constexpr size_t kSlot = 4096;

WaitContext within(Clock::duration d) {
  WaitContext c;
  c.deadline = Clock::now() + d;
  return c;
}

// A striped pipe from rank 0 to rank 1 over `lanes` loopback connections; `spy` gets a
// duplicate of each receiving socket, so a test can shut one down under the pipe.
struct StripedPair {
  StripedPair(size_t lanes, size_t slots, std::vector<Fd>* spy = nullptr) {
    std::vector<Fd> out, in;
    for (size_t i = 0; i < lanes; ++i) {
      auto [a, b] = tcpPair();
      if (spy) spy->emplace_back(::dup(b.get()));
      out.push_back(std::move(a));
      in.push_back(std::move(b));
    }
    tx = makeTcpSendPipe(std::move(out), 1, slots, kSlot, &progress, 2);
    rx = makeTcpRecvPipe(std::move(in), 0, slots, kSlot, 2);
  }
  TcpProgress progress;
  std::unique_ptr<SendPipe> tx;
  std::unique_ptr<RecvPipe> rx;
};

// Slice i: its size (0, 1, odd, a full slot, ...) and its bytes.
size_t sliceBytes(uint32_t i) {
  const size_t sizes[] = {kSlot, 1, 0, 4095, 777, kSlot, 64, 3000};
  return sizes[i % 8];
}
std::byte sliceByte(uint32_t i, size_t k) { return std::byte((i * 131 + k * 7 + 1) & 0xff); }
Tag sliceTag(uint32_t i) {
  Tag t;
  t.seq = i;
  t.count = sliceBytes(i);
  t.coll = 1;
  return t;
}

class StripedPipe : public ::testing::TestWithParam<size_t> {};

TEST_P(StripedPipe, SlicesArriveInOrderExactly) {
  const size_t lanes = GetParam();
  StripedPair p(lanes, 4);
  EXPECT_EQ(p.tx->slotBytes(), kSlot);
  EXPECT_EQ(p.rx->peer(), 0);
  constexpr uint32_t kSlices = 400;
  std::vector<std::byte> src(kSlot);
  std::thread sender([&] {
    for (uint32_t i = 0; i < kSlices; ++i) {
      const size_t n = sliceBytes(i);
      if (i % 3 == 0) {
        // The direct path: src must stay unchanged until the slice has left; flush.
        for (size_t k = 0; k < n; ++k) src[k] = sliceByte(i, k);
        p.tx->postDirect(src.data(), n, sliceTag(i), within(20s));
        p.tx->flush(within(20s));
      } else {
        std::byte* slot = p.tx->acquire(within(20s));
        for (size_t k = 0; k < n; ++k) slot[k] = sliceByte(i, k);
        p.tx->post(n, sliceTag(i));
      }
    }
    p.tx->flush(within(20s));
  });
  std::vector<std::byte> dst(kSlot);
  size_t wrong = 0;
  for (uint32_t i = 0; i < kSlices; ++i) {
    const size_t n = sliceBytes(i);
    Slice s;
    if (i % 2 == 0) {
      s = p.rx->waitInto(dst.data(), n, sliceTag(i), within(20s));
      ASSERT_EQ(s.data, dst.data()) << "slice " << i << " was not placed";
    } else {
      s = p.rx->wait(within(20s));
    }
    ASSERT_EQ(s.tag, sliceTag(i)) << "slice " << i << " out of order";
    ASSERT_EQ(s.bytes, n) << "slice " << i;
    for (size_t k = 0; k < n; ++k) wrong += s.data[k] != sliceByte(i, k);
    if (i % 2 != 0) p.rx->release();
  }
  sender.join();
  EXPECT_EQ(wrong, 0u);
}

TEST_P(StripedPipe, AClosedLaneFailsThePipeNamingThePeer) {
  const size_t lanes = GetParam();
  std::vector<Fd> spy;
  StripedPair p(lanes, 4, &spy);
  // One round over every lane works.
  for (uint32_t i = 0; i < lanes; ++i) {
    std::memset(p.tx->acquire(within(5s)), 1, kSlot);
    p.tx->post(kSlot, sliceTag(i));
  }
  for (uint32_t i = 0; i < lanes; ++i) {
    Slice s = p.rx->wait(within(5s));
    EXPECT_EQ(s.tag, sliceTag(i));
    p.rx->release();
  }
  // The last lane's connection is shut down at the receiving end.
  ::shutdown(spy.back().get(), SHUT_RDWR);
  const auto start = Clock::now();
  // The receiver gets the slices of the healthy lanes, then fails on the dead one.
  std::thread sender([&] {
    try {
      for (uint32_t i = 0; i < 1000; ++i) {
        std::memset(p.tx->acquire(within(10s)), 2, kSlot);
        p.tx->post(kSlot, sliceTag(i));
      }
      p.tx->flush(within(10s));
      ADD_FAILURE() << "the sender never noticed the closed connection";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
      EXPECT_NE(std::string(e.what()).find("peer rank 1"), std::string::npos) << e.what();
    }
  });
  try {
    for (size_t i = 0; i < lanes; ++i) {
      p.rx->wait(within(10s));
      p.rx->release();
    }
    ADD_FAILURE() << "the receiver read past the closed lane";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
    EXPECT_NE(std::string(e.what()).find("peer rank 0"), std::string::npos) << e.what();
  }
  // A real rank aborts now; the sender sees that on every lane.
  PeerStatus abort;
  abort.state = PeerStatus::State::kAborted;
  abort.writer = abort.reporter = abort.suspect = 1;
  abort.reason = "the test closed a lane";
  p.rx->publish(abort);
  sender.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
}

TEST_P(StripedPipe, AnAbortReachesTheReceiverAfterWhatWasSent) {
  const size_t lanes = GetParam();
  StripedPair p(lanes, 4);
  // Fewer slices than lanes + 1: the receiver's next wait is on a lane that carries
  // nothing but the status.
  const uint32_t sent = static_cast<uint32_t>(lanes) + 1;
  for (uint32_t i = 0; i < sent; ++i) {
    std::memset(p.tx->acquire(within(5s)), 3, kSlot);
    p.tx->post(kSlot, sliceTag(i));
  }
  PeerStatus abort;
  abort.state = PeerStatus::State::kAborted;
  abort.writer = abort.reporter = 0;
  abort.suspect = 0;
  abort.reason = "rank 0 gave up";
  p.tx->publish(abort);
  for (uint32_t i = 0; i < sent; ++i) {
    Slice s = p.rx->wait(within(5s));
    EXPECT_EQ(s.tag, sliceTag(i));
    EXPECT_EQ(s.data[kSlot - 1], std::byte{3});
    p.rx->release();
  }
  try {
    p.rx->wait(within(5s));
    ADD_FAILURE() << "a slice after the abort";
  } catch (const PeerAbortError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 gave up"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p.tx->acquire(within(1s)), Error);
}

INSTANTIATE_TEST_SUITE_P(Lanes, StripedPipe, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return fmt::format("{}lanes", info.param); });

TEST(StripedPipeSlots, EachLaneHoldsItsShare) {
  EXPECT_EQ(slotsPerLane(4, 1), 4u);
  EXPECT_EQ(slotsPerLane(4, 2), 2u);
  EXPECT_EQ(slotsPerLane(4, 4), 2u);
  EXPECT_EQ(slotsPerLane(16, 4), 4u);
  EXPECT_EQ(slotsPerLane(5, 2), 3u);
}

// ---- Communicators with several sockets per pipe ----

struct NsocksCase {
  int nsocks;
  int ranks;
  AllReduceAlgo algo;
};

class NsocksCollectives : public ::testing::TestWithParam<NsocksCase> {};

// Every collective over tcp, counts crossing slots (16 KiB: 4096 int32) and lanes;
// every value exact (int32 sums that cannot overflow).
TEST_P(NsocksCollectives, ExactOverTcp) {
  const NsocksCase c = GetParam();
  SpawnOptions o = testing::collectiveOptions(TransportKind::kTcp);
  o.options.nsocks = c.nsocks;
  o.options.algo = c.algo;
  spawn(c.ranks, [&](Communicator& comm) {
    const int n = comm.size(), r = comm.rank();
    const size_t counts[] = {1, 4095, 4096, 4097, 4 * 4096 + 5, 100000};
    for (size_t count : counts) {
      std::vector<int32_t> buf(count), want(count);
      for (size_t i = 0; i < count; ++i) {
        buf[i] = static_cast<int32_t>(i % 1000) * (r + 1);
        want[i] = static_cast<int32_t>(i % 1000) * (n * (n + 1) / 2);
      }
      comm.allReduce(buf.data(), buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      testing::check(buf == want, "rank {}: allreduce of {} wrong", r, count);

      std::vector<int32_t> b(count);
      for (size_t i = 0; i < count; ++i) b[i] = r == 1 ? static_cast<int32_t>(i * 3 + 1) : -1;
      comm.broadcast(b.data(), count, DataType::kInt32, 1);
      for (size_t i = 0; i < count; ++i) {
        testing::check(b[i] == static_cast<int32_t>(i * 3 + 1), "rank {}: broadcast[{}]", r, i);
      }

      std::vector<int32_t> mine(count), all(count * n);
      for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(r * 1000003 + i);
      comm.allGather(mine.data(), all.data(), count, DataType::kInt32);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) {
          testing::check(all[q * count + i] == static_cast<int32_t>(q * 1000003 + i),
                         "rank {}: allgather from {} at {}", r, q, i);
        }
      }

      std::vector<int32_t> full(count * n), part(count);
      for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<int32_t>(i % 977 + r);
      comm.reduceScatter(full.data(), part.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const size_t at = r * count + i;
        testing::check(part[i] == static_cast<int32_t>(n * (at % 977) + n * (n - 1) / 2),
                       "rank {}: reducescatter at {}", r, i);
      }

      std::vector<int32_t> red(count, -1);
      comm.reduce(mine.data(), red.data(), count, DataType::kInt32, ReduceOp::kSum, n - 1);
      if (r == n - 1) {
        for (size_t i = 0; i < count; ++i) {
          testing::check(red[i] == static_cast<int32_t>(1000003 * (n * (n - 1) / 2) + n * i),
                         "rank {}: reduce at {}", r, i);
        }
      }

      std::vector<int32_t> blocks(count * n), got(count * n, -1);
      for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(r * 5000011 + i);
      comm.allToAll(blocks.data(), got.data(), count, DataType::kInt32);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) {
          testing::check(got[q * count + i] == static_cast<int32_t>(q * 5000011 + r * count + i),
                         "rank {}: alltoall from {} at {}", r, q, i);
        }
      }

      std::vector<int32_t> out(count), in(count, -7);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(r * 7 + i);
      const int right = (r + 1) % n, left = (r + n - 1) % n;
      comm.sendRecv(out.data(), count, right, in.data(), count, left, DataType::kInt32);
      for (size_t i = 0; i < count; ++i) {
        testing::check(in[i] == static_cast<int32_t>(left * 7 + i), "rank {}: sendrecv at {}", r,
                       i);
      }
    }
  }, o);
}

INSTANTIATE_TEST_SUITE_P(
    Nsocks, NsocksCollectives,
    ::testing::Values(NsocksCase{2, 2, AllReduceAlgo::kRing}, NsocksCase{2, 3, AllReduceAlgo::kTree},
                      NsocksCase{4, 3, AllReduceAlgo::kRing}, NsocksCase{4, 4, AllReduceAlgo::kAuto}),
    [](const auto& info) {
      return fmt::format("nsocks{}_{}ranks_{}", info.param.nsocks, info.param.ranks,
                         algoName(info.param.algo));
    });

TEST(NsocksCreation, RanksThatDisagreeFailNamingTheSetting) {
  CommRanks group(2, [] {
    Options o;
    o.transport = TransportKind::kTcp;
    o.timeout = 20s;
    o.joinTimeout = 20s;
    return o;
  }());
  group.perRank = [](int rank, Options& o) { o.nsocks = rank == 0 ? 1 : 2; };
  group.start([](Communicator&, int) {});
  auto reports = group.join(Clock::now() + 30s);
  for (const RankResult& r : reports) {
    EXPECT_FALSE(r.hung);
    EXPECT_FALSE(r.ok) << "rank " << r.rank << " formed a communicator";
    EXPECT_NE(r.message.find("GYRE_NSOCKS"), std::string::npos) << r.message;
  }
}

class KilledSocket : public ::testing::TestWithParam<int> {};

// 3 ranks, 3 sockets per pipe; rank 1 shuts down one of its data sockets (the first or
// the last it opened) between collectives that use every pipe and every lane.
TEST_P(KilledSocket, EveryRankFailsPromptlyNamingAPeer) {
  const int which = GetParam();
  Options o;
  o.transport = TransportKind::kTcp;
  o.nsocks = 3;
  o.slotBytes = 16 * 1024;
  o.timeout = 30s;  // far above the bound checked: no waiting it out
  Fd listener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  const uint16_t port = SocketAddress::ofSocket(listener.get()).port();
  CommRanks group(3, o);
  group.makeStore = [&](int) { return TcpStore::connect("127.0.0.1", port, 30s); };
  group.start([&](Communicator& comm, int rank) {
    const int n = comm.size();
    std::vector<int32_t> out(100000), in(100000);
    for (int i = 0;; ++i) {
      if (rank == 1 && i == 5) {
        std::vector<int> fds = dataSockets(port);
        testing::check(fds.size() >= 12, "rank 1 has {} data sockets, expected 4 pipes x 3",
                       fds.size());
        const int fd = which == 0 ? fds.front() : fds.back();
        group.note("killed_ns", std::to_string(Clock::now().time_since_epoch().count()));
        ::shutdown(fd, SHUT_RDWR);
      }
      std::fill(out.begin(), out.end(), rank + 1);
      comm.sendRecv(out.data(), out.size(), (rank + 1) % n, in.data(), in.size(),
                    (rank + n - 1) % n, DataType::kInt32);
      comm.sendRecv(out.data(), out.size(), (rank + n - 1) % n, in.data(), in.size(),
                    (rank + 1) % n, DataType::kInt32);
      comm.allReduce(out.data(), in.data(), out.size(), DataType::kInt32, ReduceOp::kSum);
      testing::check(in[99999] == n * (n + 1) / 2, "rank {}: wrong sum", rank);
    }
  });
  auto store = TcpStore::serveOn(std::move(listener), 30s);
  ASSERT_TRUE(group.waitReady(30s));
  auto reports = group.join(Clock::now() + 20s);
  const std::string killedText = reports[1].note("killed_ns");
  ASSERT_FALSE(killedText.empty()) << "rank 1 never shut a socket down";
  const long long killedNs = std::stoll(killedText);
  const auto killedAt = Clock::time_point(std::chrono::nanoseconds(killedNs));
  for (const RankResult& r : reports) {
    SCOPED_TRACE(fmt::format("rank {}: code {} message '{}'\nlog:\n{}", r.rank, r.code, r.message,
                             r.log));
    EXPECT_FALSE(r.hung);
    ASSERT_TRUE(r.reported && !r.ok);
    EXPECT_TRUE(r.code == static_cast<int>(ErrorCode::kRemoteError) ||
                r.code == static_cast<int>(ErrorCode::kAborted));
    EXPECT_NE(r.message.find(fmt::format("rank {}: ", r.rank)), std::string::npos);
    EXPECT_NE(r.message.find("peer rank"), std::string::npos);
    // The collective it failed in, with its sequence number, and what the socket did.
    EXPECT_TRUE(r.message.find("send/recv #") != std::string::npos ||
                r.message.find("allreduce #") != std::string::npos);
    EXPECT_TRUE(r.message.find("closed") != std::string::npos ||
                r.message.find("reset") != std::string::npos);
    EXPECT_LT(testing::secondsBetween(killedAt, r.endedAt), 3.0);
  }
}

INSTANTIATE_TEST_SUITE_P(FirstOrLast, KilledSocket, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param ? "last" : "first"; });

}  // namespace
}  // namespace gyre
