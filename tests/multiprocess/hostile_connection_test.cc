// Hostile connections to a rank's data listener while its communicator forms: garbage,
// an old protocol version, another communicator, a truncated handshake and a flood of
// silent connections (replayed handshakes and outsiders without the secret:
// auth_attack_test.cc). Each must be refused and logged, a gyre
// peer must be told it was refused, and the job must still form and compute.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "fork_ranks.h"
#include "ring/communicator.h"
#include "ring/join.h"
#include "transport/handshake.h"
#include "transport/wire.h"

namespace gyre {
namespace {

using namespace std::chrono_literals;
using testing::CommRanks;

HelloExpectation expectation() {
  HelloExpectation e;
  e.commId = 42;
  e.receiver = 1;
  e.worldSize = 4;
  return e;
}

Hello goodHello() {
  Hello h;
  h.commId = 42;
  h.sender = 0;
  h.receiver = 1;
  return h;
}

TEST(HandshakeChecks, EveryFieldIsChecked) {
  Hello out;
  Hello h = goodHello();
  EXPECT_FALSE(checkHello(&h, sizeof(h), expectation(), &out));
  auto reason = [&](auto edit) {
    Hello bad = goodHello();
    edit(bad);
    auto why = checkHello(&bad, sizeof(bad), expectation(), &out);
    return why ? *why : std::string("accepted");
  };
  EXPECT_NE(reason([](Hello& b) { b.magic[0] = 'X'; }).find("magic"), std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.version = 0; }).find("protocol version 0"), std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.flags = Hello::kEncrypt; }).find("GYRE_ENCRYPT"),
            std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.commId = 43; }).find("communicator id"), std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.sender = 4; }).find("sender rank 4"), std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.sender = -1; }).find("sender rank -1"), std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.receiver = 2; }).find("addressed to rank 2"),
            std::string::npos);
  EXPECT_NE(reason([](Hello& b) { b.channel = 1; }).find("channel"), std::string::npos);
  EXPECT_TRUE(checkHello(&h, sizeof(h) - 1, expectation(), &out).has_value());
}

// A client connection to `addr` that sends `bytes` and stays open.
Fd attack(const SocketAddress& addr, const void* bytes, size_t n) {
  Fd fd = connectWithRetry(addr, Clock::now() + 5s);
  if (n) writeExact(fd.get(), bytes, n, Clock::now() + 5s);
  return fd;
}

// What the rank answered before closing: the bytes it sent, then EOF (true) or not.
std::pair<std::string, bool> answer(int fd) {
  setNonBlocking(fd, true);
  std::string got;
  for (;;) {
    char buf[64];
    ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
    if (r > 0) {
      got.append(buf, static_cast<size_t>(r));
      continue;
    }
    return {got, r == 0 || (r < 0 && errno == ECONNRESET)};
  }
}

TEST(HostileConnections, AreRefusedLoggedAndTheJobCompletes) {
  Options o;
  o.timeout = 30s;
  o.transport = TransportKind::kTcp;
  o.token = "hostile-test-token";
  CommRanks group(3, o);
  // Rank 2 comes once the attacks went out, so rank 0's listener (it receives from rank 2)
  // has them queued ahead of the real connection.
  group.beforeCreate = [&group](int rank) {
    if (rank == 2) group.waitFor(-1, "attacked");
  };
  group.start([](Communicator& comm, int) {
    std::vector<int32_t> v(1000, comm.rank() + 1);
    comm.allReduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
    for (int32_t x : v) {
      if (x != 6) throw std::runtime_error(fmt::format("wrong sum {}", x));
    }
  });
  // Rank 0's listening address, from its check-in (ring/join.h): ranks 0 and 1 check in
  // at once, rank 2 late.
  std::string addrText;
  for (int seq = 1; seq <= 2 && addrText.empty(); ++seq) {
    Claim claim;
    ASSERT_TRUE(Claim::decode(
        group.store().getString(fmt::format("gyre/comm0/join/claim/{}", seq)), &claim));
    if (claim.rank == 0) addrText = claim.address;
  }
  ASSERT_FALSE(addrText.empty());
  const auto colon = addrText.rfind(':');
  const SocketAddress addr = SocketAddress::resolve(
      addrText.substr(0, colon), static_cast<uint16_t>(std::stoi(addrText.substr(colon + 1))));

  const std::string garbage = "GET / HTTP/1.0\r\nHost: gyre\r\n\r\n" + std::string(64, 'A');
  Hello wrongRank;
  wrongRank.sender = 7;
  Hello oldVersion;
  oldVersion.version = 0;
  Hello otherComm;
  otherComm.commId = 0x1234;
  otherComm.sender = 2;
  otherComm.receiver = 0;
  std::vector<Fd> answered;
  answered.push_back(attack(addr, garbage.data(), garbage.size()));
  answered.push_back(attack(addr, &wrongRank, sizeof(wrongRank)));
  answered.push_back(attack(addr, &oldVersion, sizeof(oldVersion)));
  answered.push_back(attack(addr, &otherComm, sizeof(otherComm)));
  std::vector<Fd> silent;
  silent.push_back(attack(addr, &wrongRank, 20));  // truncated, then silence
  for (int i = 0; i < 100; ++i) silent.push_back(attack(addr, nullptr, 0));  // a flood
  group.say("attacked");

  auto reports = group.join(Clock::now() + 30s);
  for (const auto& r : reports) {
    ASSERT_TRUE(r.ok && !r.hung) << "rank " << r.rank << ": " << r.message << "\n" << r.log;
  }
  const std::string& log = reports[0].log;
  std::printf("[hostile] rank 0's log:\n%s", log.c_str());
  for (const char* why : {"wrong magic", "protocol version 0",
                          "communicator id 0x1234", "handshakes at once"}) {
    EXPECT_NE(log.find(why), std::string::npos) << "no '" << why << "' in rank 0's log:\n" << log;
  }
  EXPECT_NE(log.find("more connections (not logged one by one)"), std::string::npos) << log;

  // Garbage is cut off without an answer; a gyre-speaking client learns it was refused.
  auto [garbageAnswer, garbageClosed] = answer(answered[0].get());
  EXPECT_TRUE(garbageClosed);
  EXPECT_EQ(garbageAnswer, "");
  for (size_t i = 1; i < answered.size(); ++i) {
    auto [text, closed] = answer(answered[i].get());
    EXPECT_TRUE(closed) << "attack " << i;
    ASSERT_EQ(text.size(), sizeof(HelloChallenge)) << "attack " << i;
    HelloChallenge reply;
    std::memcpy(&reply, text.data(), sizeof(reply));
    EXPECT_EQ(reply.magic, HelloChallenge{}.magic);
    EXPECT_NE(reply.status, 0u) << "attack " << i << " was accepted";
  }
  // Every silent connection was dropped by the rank (none is still held open).
  for (const Fd& fd : silent) EXPECT_TRUE(answer(fd.get()).second);
}

}  // namespace
}  // namespace gyre
