// The outsider scenario of tests/auth_attack_test.cc (tcp pipes) and
// tests/rdma_auth_test.cc (rdma pipes, whose tcp control links pass the same handshake):
// an outsider on the same machine who knows where the job is (the store's port, every
// rank's listening port, the communicator id) but not its secret. An attacker process,
// forked while the job forms, reads and writes the store, replays a store exchange and a
// pipe handshake recorded from genuine ones, and follows the replayed handshake with a
// frame of a correct-looking tag. outsiderGetsNothing() checks that the job completes
// with exact results, that the attacker gets nothing but challenges (no value from the
// store, no accepted connection), that no key changes, that each refusal is logged once
// and that nothing prints the secret; it hands the ranks' reports back for the caller's
// own checks (the transport the pipes got).
//
// The recording: the test, which holds the secret, makes a genuine exchange for the same
// ranks and communicator (byte for byte what a rank sends, with its own fresh nonces) and
// hands only the bytes to the attacker, which holds no key. Replaying them is what a
// recorder on the path could do; the fresh nonce of the other side must defeat it.
//
// Header-only: every tests/*_test.cc is one program.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/crypto.h"
#include "base/error.h"
#include "base/secret.h"
#include "rank_harness.h"
#include "ring/bootstrap.h"
#include "ring/communicator.h"
#include "ring/join.h"
#include "store/store_auth.h"
#include "store/store_protocol.h"
#include "transport/handshake.h"
#include "transport/wire.h"

namespace gyre::attack {

using namespace std::chrono_literals;

constexpr int kRanks = 4;
constexpr int kLate = 3;  // the rank that comes late: every listener still expects it

inline SocketAddress parse(const std::string& text) {
  const auto colon = text.rfind(':');
  return SocketAddress::resolve(text.substr(0, colon),
                                static_cast<uint16_t>(std::stoi(text.substr(colon + 1))));
}

template <typename T>
inline void append(std::vector<uint8_t>& out, const T& value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}
inline void append(std::vector<uint8_t>& out, const std::vector<uint8_t>& bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

struct Attack {
  std::string name;
  SocketAddress to;
  std::vector<uint8_t> bytes;  // sent at once, as fast as the socket takes them
};

// In the attacker process: connects and sends every attack at once (while the job is
// still forming), then reads each until the other side closes (or 8 s). Reports "name
// bytes-received closed hex" lines; no key is in this process's use, only the bytes.
inline std::string runAttacks(const std::vector<Attack>& attacks) {
  std::vector<int> fds;
  for (const Attack& a : attacks) {
    int fd = ::socket(a.to.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 &&
        ::connect(fd, reinterpret_cast<const sockaddr*>(&a.to.storage), a.to.length) != 0) {
      ::close(fd);
      fd = -1;
    }
    size_t sent = 0;
    while (fd >= 0 && sent < a.bytes.size()) {
      ssize_t w = ::send(fd, a.bytes.data() + sent, a.bytes.size() - sent, MSG_NOSIGNAL);
      if (w <= 0) break;  // closed on us mid-way: the refusal came before the rest
      sent += static_cast<size_t>(w);
    }
    fds.push_back(fd);
  }
  std::string report;
  const auto deadline = std::chrono::steady_clock::now() + 8s;
  for (size_t i = 0; i < attacks.size(); ++i) {
    const int fd = fds[i];
    if (fd < 0) {
      report += attacks[i].name + " 0 0 connect-failed\n";
      continue;
    }
    std::string got;
    bool closed = false;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
      if (r <= 0) {
        closed = true;
        break;
      }
      got.append(buf, static_cast<size_t>(r));
    }
    ::close(fd);
    std::string hex;
    for (unsigned char c : got) hex += fmt::format("{:02x}", c);
    report += fmt::format("{} {} {} {}\n", attacks[i].name, got.size(), closed ? 1 : 0,
                          hex.empty() ? "-" : hex);
  }
  return report;
}

struct Result {
  size_t bytes = 0;
  bool closed = false;
  std::vector<uint8_t> received;
};

inline std::map<std::string, Result> runAttacker(const std::vector<Attack>& attacks) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string report = runAttacks(attacks);
    size_t off = 0;
    while (off < report.size()) {
      ssize_t w = ::write(fds[1], report.data() + off, report.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, static_cast<size_t>(r));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::map<std::string, Result> out;
  std::istringstream in(text);
  std::string name, hex;
  Result r;
  int closed = 0;
  while (in >> name >> r.bytes >> closed >> hex) {
    r.closed = closed == 1;
    r.received.clear();
    for (size_t i = 0; hex != "-" && i + 1 < hex.size(); i += 2) {
      r.received.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    out[name] = r;
  }
  return out;
}

inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

inline void outsiderGetsNothing(Options o, std::function<void(int, Options&)> perRank,
                                std::vector<testing::RankReport>* reportsOut) {
  const std::string secret = fmt::format("attack-test-secret-{}", ::getpid());
  o.token = secret;
  testing::RankGroup group(kRanks, o);
  group.perRank = std::move(perRank);
  group.beforeCreate = [](int rank) {
    if (rank == kLate) std::this_thread::sleep_for(2500ms);
  };
  ::testing::internal::CaptureStderr();  // the store's log (this process serves it)
  group.start([](Communicator& comm, int) {
    for (size_t count : {size_t{1}, size_t{1000}, size_t{300000}}) {
      std::vector<int64_t> v(count);
      for (size_t i = 0; i < count; ++i) v[i] = comm.rank() * 1000003 + static_cast<int64_t>(i);
      comm.allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const int64_t want = 1000003 * (kRanks * (kRanks - 1) / 2) + kRanks * static_cast<int64_t>(i);
        if (v[i] != want) throw std::runtime_error(fmt::format("element {}: {} != {}", i, v[i], want));
      }
    }
  });

  // Ranks 0-2 check in at once; their claims carry their listening addresses.
  std::map<int, Claim> claims;
  const auto until = Clock::now() + 10s;
  while (claims.size() < kRanks - 1 && Clock::now() < until) {
    for (int seq = 1; seq <= kRanks - 1; ++seq) {
      const std::string key = fmt::format("gyre/comm0/join/claim/{}", seq);
      Claim c;
      if (group.store().check({key}) && Claim::decode(group.store().getString(key), &c)) {
        claims[c.rank] = c;
      }
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(claims.size(), size_t{kRanks - 1});
  ASSERT_EQ(claims.count(kLate), 0u);
  const std::string claim1Before = group.store().getString("gyre/comm0/join/claim/1");

  // The recordings (made with the secret; the attacker gets only their bytes).
  const Key key = authKey(secret);
  const uint64_t commId =
      fnv1a64(nameTag(secret) + "/" + "gyre/comm0" + "/" + claims.at(0).process);
  std::vector<Attack> attacks;
  const auto* storeAddr = dynamic_cast<TcpStore*>(&group.store());
  ASSERT_NE(storeAddr, nullptr);
  const SocketAddress store = SocketAddress::resolve("127.0.0.1", storeAddr->port());
  StoreRequest set;
  set.command = StoreCommand::kSet;
  set.keys = {"gyre/comm0/join/claim/2"};
  set.value = {'r', 'e', 'w', 'r', 'i', 't', 't', 'e', 'n'};
  StoreRequest get;
  get.command = StoreCommand::kGet;
  get.keys = {"gyre/comm0/join/claim/1"};
  {
    // Reads without any proof: the request where the proof should be.
    Attack a{"store-read", store, encodeStoreHello()};
    StoreAuthHello h;
    h.rank = -1;
    append(a.bytes, h);
    append(a.bytes, encodeStoreRequest(get));
    attacks.push_back(a);
  }
  {
    // Writes another rank's entry behind a made-up proof.
    Attack a{"store-write", store, encodeStoreHello()};
    StoreAuthHello h;
    h.rank = 1;
    append(a.bytes, h);
    append(a.bytes, StoreAuthProof{});
    append(a.bytes, encodeStoreRequest(set));
    attacks.push_back(a);
  }
  {
    // A genuine exchange, recorded, replayed: the store's nonce is new this time.
    StoreAuthHello h;
    h.rank = 1;
    h.nonce = randomNonce();
    StoreAuthProof recorded;
    recorded.mac = storeClientMac(key, h, randomNonce());
    Attack a{"store-replay", store, encodeStoreHello()};
    append(a.bytes, h);
    append(a.bytes, recorded);
    append(a.bytes, encodeStoreRequest(set));
    attacks.push_back(a);
  }
  for (const auto& [rank, claim] : claims) {
    // rank 3's connection to `rank`, recorded with an acceptor nonce of that time, then
    // a data frame with a tag of the first collective.
    Hello h;
    h.commId = commId;
    h.sender = kLate;
    h.receiver = rank;
    h.nonce = randomNonce();
    HelloProof recorded;
    recorded.mac = connectorMac(key, h, randomNonce());
    FrameHeader frame;
    frame.bytes = 64;
    Attack a{fmt::format("pipe-replay-{}", rank), parse(claim.address), {}};
    append(a.bytes, h);
    append(a.bytes, recorded);
    append(a.bytes, frame);
    a.bytes.resize(a.bytes.size() + 64, 0x5a);
    attacks.push_back(a);
  }
  std::map<std::string, Result> results = runAttacker(attacks);

  auto reports = group.join(Clock::now() + 60s);
  if (reportsOut) *reportsOut = reports;
  const std::string storeLog = ::testing::internal::GetCapturedStderr();
  for (const auto& r : reports) {
    ASSERT_TRUE(r.ok && !r.hung) << "rank " << r.rank << ": " << r.message << "\n" << r.log;
  }

  // The attacker learned nothing: from the store, its hello and a challenge (a nonce and
  // a MAC over the attacker's own bytes), then the door; from each rank, a challenge.
  for (const char* name : {"store-read", "store-write", "store-replay"}) {
    ASSERT_EQ(results.count(name), 1u) << name;
    const Result& r = results[name];
    EXPECT_TRUE(r.closed) << name;
    EXPECT_EQ(r.bytes, kStoreHelloBytes + sizeof(StoreAuthChallenge)) << name;
  }
  for (const auto& [rank, claim] : claims) {
    const std::string name = fmt::format("pipe-replay-{}", rank);
    ASSERT_EQ(results.count(name), 1u) << name;
    const Result& r = results[name];
    EXPECT_TRUE(r.closed) << name;
    ASSERT_EQ(r.bytes, sizeof(HelloChallenge)) << name << ": never a HelloReply";
    HelloChallenge c;
    std::memcpy(&c, r.received.data(), sizeof(c));
    EXPECT_EQ(c.status, 0u) << name << ": the replay reached the proof, as a recording would";
    // Rank `rank` logged this refusal once, naming what was claimed and why.
    const std::string& log = reports[static_cast<size_t>(rank)].log;
    EXPECT_EQ(count(log, "claimed rank 3: its proof is not signed with this job's secret"), 1u)
        << "rank " << rank << "'s log:\n" << log;
  }
  // No key changed: the attacker's set never ran.
  EXPECT_EQ(group.store().getString("gyre/comm0/join/claim/1"), claim1Before);
  EXPECT_NE(group.store().getString("gyre/comm0/join/claim/2"), "rewritten");
  // The store logged each refusal once.
  EXPECT_EQ(count(storeLog, "refused client"), 3u) << storeLog;
  EXPECT_EQ(count(storeLog, "claimed rank 1, but its proof is not signed"), 2u) << storeLog;
  // Nothing printed the secret.
  EXPECT_EQ(storeLog.find(secret), std::string::npos);
  for (const auto& r : reports) EXPECT_EQ(r.log.find(secret), std::string::npos) << r.rank;
  std::printf("[auth] store log:\n%s", storeLog.c_str());
}

}  // namespace gyre::attack
