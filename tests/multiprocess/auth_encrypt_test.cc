// GYRE_ENCRYPT=1: every tcp pipe carries sealed records (transport/tcp/tcp_records.h).
// - Every collective stays exact over sealed pipes, with small slots (many records per
//   call), one and two connections per pipe.
// - A byte flipped on the wire (a proxy between rank 0 and rank 1, playing the network)
//   fails the pipe naming the peer, on both ranks, and no rank returns data.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/join.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::CommRanks;

Options sealedOptions(const std::string& secret) {
  Options o;
  o.timeout = 30s;
  o.transport = TransportKind::kTcp;
  o.token = secret;
  o.encrypt = true;
  return o;
}

void expectEqual(const std::vector<int64_t>& got, const std::vector<int64_t>& want,
                 const char* what) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      throw std::runtime_error(fmt::format("{}: element {} is {}, want {}", what, i, got[i], want[i]));
    }
  }
}

// Every collective on int64 values whose results are exact, at a few sizes.
void everyCollective(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (size_t count : {size_t{1}, size_t{1000}, size_t{70000}}) {
    {
      std::vector<int64_t> v(count), want(count);
      for (size_t i = 0; i < count; ++i) {
        v[i] = r * 7919 + static_cast<int64_t>(i);
        want[i] = 7919 * (n * (n - 1) / 2) + n * static_cast<int64_t>(i);
      }
      comm.allReduce(v.data(), v.data(), count, DataType::kInt64, ReduceOp::kSum);
      expectEqual(v, want, "allReduce");
    }
    std::vector<int64_t> b(count, r == 1 ? 42 : -1), bw(count, 42);
    comm.broadcast(b.data(), count, DataType::kInt64, 1);
    expectEqual(b, bw, "broadcast");

    std::vector<int64_t> mine(count, r + 1), all(count * n), allWant(count * n);
    for (int k = 0; k < n; ++k) std::fill_n(allWant.begin() + k * static_cast<long>(count), count, k + 1);
    comm.allGather(mine.data(), all.data(), count, DataType::kInt64);
    expectEqual(all, allWant, "allGather");

    std::vector<int64_t> rsIn(count * n), rsOut(count), rsWant(count);
    for (size_t i = 0; i < rsIn.size(); ++i) rsIn[i] = static_cast<int64_t>(i) + r;
    for (size_t i = 0; i < count; ++i) {
      rsWant[i] = n * static_cast<int64_t>(r * count + i) + n * (n - 1) / 2;
    }
    comm.reduceScatter(rsIn.data(), rsOut.data(), count, DataType::kInt64, ReduceOp::kSum);
    expectEqual(rsOut, rsWant, "reduceScatter");

    std::vector<int64_t> a2aIn(count * n), a2aOut(count * n), a2aWant(count * n);
    for (int k = 0; k < n; ++k) {
      std::fill_n(a2aIn.begin() + k * static_cast<long>(count), count, r * 100 + k);
      std::fill_n(a2aWant.begin() + k * static_cast<long>(count), count, k * 100 + r);
    }
    comm.allToAll(a2aIn.data(), a2aOut.data(), count, DataType::kInt64);
    expectEqual(a2aOut, a2aWant, "allToAll");
  }
  comm.barrier();
}

class Sealed : public ::testing::TestWithParam<int> {};

TEST_P(Sealed, EveryCollectiveIsExact) {
  Options o = sealedOptions(fmt::format("sealed-{}", ::getpid()));
  o.slotBytes = 4096;  // many records per call
  o.nsocks = GetParam();
  CommRanks group(4, o);
  group.start([](Communicator& comm, int) { everyCollective(comm); });
  for (const auto& r : group.join(Clock::now() + 120s)) {
    EXPECT_TRUE(r.ok && !r.hung) << "rank " << r.rank << ": " << r.message << "\n" << r.log;
  }
}

INSTANTIATE_TEST_SUITE_P(Connections, Sealed, ::testing::Values(1, 2));

// Forwards one connection both ways between `client` and `server`, flipping the byte at
// offset `flipAt` of the client-to-server stream (none if < 0).
void relay(int client, int server, long flipAt, std::atomic<bool>& stop) {
  long forwarded = 0;
  pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
  char buf[65536];
  while (!stop.load()) {
    if (::poll(p, 2, 50) <= 0) continue;
    for (int side = 0; side < 2; ++side) {
      if ((p[side].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      ssize_t r = ::recv(p[side].fd, buf, sizeof(buf), 0);
      if (r <= 0) return;
      if (side == 0 && flipAt >= forwarded && flipAt < forwarded + r) {
        buf[flipAt - forwarded] ^= 0x01;
      }
      if (side == 0) forwarded += r;
      const int to = side == 0 ? server : client;
      for (ssize_t sent = 0; sent < r;) {
        ssize_t w = ::send(to, buf + sent, static_cast<size_t>(r - sent), MSG_NOSIGNAL);
        if (w <= 0) return;
        sent += w;
      }
    }
  }
}

TEST(SealedWire, AFlippedByteFailsThePipeNamingThePeerNeverWrongData) {
  const std::string secret = fmt::format("flip-{}", ::getpid());
  Options o = sealedOptions(secret);
  CommRanks group(2, o);
  // Rank 1 checks in first; the "network" then routes rank 0's connection to rank 1
  // through the proxy (the test holds the secret, so it can re-sign the check-in as a
  // path under its control would, in effect, be); rank 0 comes once that is done.
  group.beforeCreate = [&group](int rank) {
    if (rank == 0) group.waitFor(-1, "rerouted");
  };
  group.start([](Communicator& comm, int) {
    std::vector<int64_t> v(1 << 17, comm.rank() + 1);
    comm.allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    for (int64_t x : v) {
      if (x != 3) throw std::runtime_error(fmt::format("WRONG DATA: {}", x));
    }
  });
  Fd proxyListener = listenOn(SocketAddress::resolve("127.0.0.1", 0));
  const std::string proxyAddress = SocketAddress::ofSocket(proxyListener.get()).toString();
  Claim rank1;
  const std::string key = "gyre/comm0/join/claim/1";
  const std::string text = group.store().getString(key);  // waits for it (30 s at most)
  ASSERT_TRUE(Claim::decode(text, &rank1));
  ASSERT_EQ(rank1.rank, 1);
  const std::string real = rank1.address;
  rank1.address = proxyAddress;
  group.store().setString(key, signedClaimText(secret, "gyre/comm0", 1, rank1.encode()));
  group.say("rerouted");

  std::atomic<bool> stop{false};
  std::thread proxy([&] {
    Fd client = acceptUntil(proxyListener.get(), Clock::now() + 20s);
    const auto colon = real.rfind(':');
    Fd server = connectWithRetry(
        SocketAddress::resolve(real.substr(0, colon),
                               static_cast<uint16_t>(std::stoi(real.substr(colon + 1)))),
        Clock::now() + 5s);
    // Past the handshake (Hello 64 + proof 40) and the first frame's header (32): a byte
    // of the first slice's ciphertext.
    relay(client.get(), server.get(), 64 + 40 + 32 + 100, stop);
  });
  auto reports = group.join(Clock::now() + 60s);
  stop = true;
  proxy.join();
  for (const auto& r : reports) {
    EXPECT_FALSE(r.ok) << "rank " << r.rank << " finished although its data was altered";
    EXPECT_FALSE(r.hung) << "rank " << r.rank;
    EXPECT_EQ(r.message.find("WRONG DATA"), std::string::npos) << r.message;
  }
  const std::string& m1 = reports[1].message;
  EXPECT_NE(m1.find("from peer rank 0 failed authentication (GYRE_ENCRYPT)"), std::string::npos)
      << m1 << "\n" << reports[1].log;
  EXPECT_NE(reports[0].message.find("rank 1"), std::string::npos) << reports[0].message;
  std::printf("[encrypt] flipped byte: rank 1: %s\n[encrypt] rank 0: %s\n", m1.c_str(),
              reports[0].message.c_str());
}

}  // namespace
}  // namespace gyre
