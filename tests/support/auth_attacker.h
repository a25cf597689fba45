// The outsider of the authentication tests (auth_attack_test.cc over tcp pipes,
// rdma_auth_test.cc over rdma pipes and their tcp control links): a forked process
// that knows where the job is (every rank's listening address, read from the claims in
// the store; the communicator id) but holds no key. It gets only bytes: recordings of
// genuine handshakes, which the test makes with the secret, and frames it made up.
//
// What is here:
//  - Attack / runAttacker(): the attacker process. It connects and sends every attack at
//    once, says kAttacksSent on `gate` (the job's group, if given) once all went out, then
//    reads each connection until the other side closes or `window` passes, and reports
//    what it received.
//  - waitForTheAttacks(): holds the job's last rank back until the attacker has sent, so
//    every listener still expects that rank when the attacks arrive (by construction,
//    not by timing: the rdma VM is 10-30x slower than the host).
//  - readClaims(), jobCommId(), recordedPipeHandshake(), tagFrame(): what the attacker
//    knows and what it replays.
//  - exactAllReduces(), expectOnlyAChallenge(), expectRefusalsLogged(),
//    expectNoSecretPrinted(): the shared checks.
//
// Contract: header-only (every tests/*_test.cc is one program); the attacker process
// uses no key; the checks report through gtest and never print a secret.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/crypto.h"
#include "base/error.h"
#include "base/secret.h"
#include "fork_ranks.h"
#include "ring/bootstrap.h"
#include "ring/communicator.h"
#include "ring/join.h"
#include "transport/handshake.h"
#include "transport/wire.h"

namespace gyre::testing::attack {

using namespace std::chrono_literals;

inline SocketAddress parse(const std::string& text) {
  const auto colon = text.rfind(':');
  return SocketAddress::resolve(text.substr(0, colon),
                                static_cast<uint16_t>(std::stoi(text.substr(colon + 1))));
}

template <typename T>
void append(std::vector<uint8_t>& out, const T& value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}
inline void append(std::vector<uint8_t>& out, const std::vector<uint8_t>& bytes) {
  out.insert(out.end(), bytes.begin(), bytes.end());
}

inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// What the attacker process says on the job's group (from the parent's side, as it is
// forked by the test) once every attack went out.
inline const std::string kAttacksSent = "attacks sent";

// In a rank (its beforeCreate): true once the attacker has sent everything; false when
// `limit` passed first (the rank goes on regardless).
inline bool waitForTheAttacks(ForkedRanks& job, std::chrono::milliseconds limit) {
  return job.tryWaitFor(-1, kAttacksSent, limit);
}

struct Attack {
  std::string name;
  SocketAddress to;
  std::vector<uint8_t> bytes;  // sent at once, as fast as the socket takes them
};

struct Result {
  size_t bytes = 0;
  bool closed = false;
  std::vector<uint8_t> received;
};

struct AttackerOptions {
  std::chrono::milliseconds window = 8s;  // how long it reads, at most (a close ends it)
  ForkedRanks* gate = nullptr;            // the job's group: told once every attack went out
};

// In the attacker process: connects and sends every attack at once (while the job is
// still forming), then reads each until the other side closes (or the window ends).
// Reports "name bytes-received closed hex" lines; no key is in this process's use.
inline std::string runAttacks(const std::vector<Attack>& attacks, const AttackerOptions& opts) {
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
  if (opts.gate) opts.gate->say(kAttacksSent);
  std::string report;
  const auto deadline = std::chrono::steady_clock::now() + opts.window;
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

// Forks the attacker, waits for its report and parses it, by attack name.
inline std::map<std::string, Result> runAttacker(const std::vector<Attack>& attacks,
                                                 const AttackerOptions& opts = {}) {
  ForkedRanks attacker(1, opts.window + 60s);
  attacker.start([&](int) { attacker.note("report", runAttacks(attacks, opts)); });
  const RankResult ended = attacker.join(Clock::now() + opts.window + 60s)[0];
  EXPECT_TRUE(ended.ok) << "the attacker: " << ended.describe();
  std::map<std::string, Result> out;
  std::istringstream in(ended.note("report"));
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

// The claims (check-ins) of the first communicator, by rank, once `expected` ranks have
// checked in or `limit` passed: what anyone who reads the store learns, addresses included.
inline std::map<int, Claim> readClaims(Store& store, int expected, std::chrono::milliseconds limit) {
  std::vector<std::string> keys;
  for (int seq = 1; seq <= expected; ++seq) keys.push_back(fmt::format("gyre/comm0/join/claim/{}", seq));
  const std::chrono::milliseconds before = store.timeout();
  store.setTimeout(limit);
  try {
    store.wait(keys);
  } catch (const Error&) {
    // Those that came in time: the caller checks how many.
  }
  store.setTimeout(before);
  std::map<int, Claim> claims;
  for (const std::string& key : keys) {
    Claim c;
    if (store.check({key}) && Claim::decode(store.getString(key), &c)) claims[c.rank] = c;
  }
  return claims;
}

// The id the ranks of the first communicator derive (ring/bootstrap.cc).
inline uint64_t jobCommId(const std::string& secret, const Claim& rank0) {
  return fnv1a64(nameTag(secret) + "/" + "gyre/comm0" + "/" + rank0.process);
}

// `sender`'s connection to `receiver`, as it went on the wire once: its Hello and its
// proof for an acceptor nonce of that time. Made with the key; the attacker gets bytes.
inline std::vector<uint8_t> recordedPipeHandshake(const Key& key, uint64_t commId, int sender,
                                                  int receiver) {
  Hello h;
  h.commId = commId;
  h.sender = sender;
  h.receiver = receiver;
  h.nonce = randomNonce();
  HelloProof recorded;
  recorded.mac = connectorMac(key, h, randomNonce());
  std::vector<uint8_t> bytes;
  append(bytes, h);
  append(bytes, recorded);
  return bytes;
}

// A data frame with the tag of a first collective, and 64 bytes of made-up slice.
inline std::vector<uint8_t> tagFrame() {
  FrameHeader frame;
  frame.bytes = 64;
  std::vector<uint8_t> bytes;
  append(bytes, frame);
  bytes.resize(bytes.size() + 64, 0x5a);
  return bytes;
}

// A rank's body: exact int64 all-reduces of each count (the sums fit without rounding).
inline void exactAllReduces(Communicator& comm, const std::vector<size_t>& counts) {
  const int64_t n = comm.size();
  for (size_t count : counts) {
    std::vector<int64_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = comm.rank() * 1000003 + static_cast<int64_t>(i);
    comm.allReduce(v.data(), v.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) {
      const int64_t want = 1000003 * (n * (n - 1) / 2) + n * static_cast<int64_t>(i);
      if (v[i] != want) throw std::runtime_error(fmt::format("element {}: {} != {}", i, v[i], want));
    }
  }
}

// What a rank's listener gave the attack `name`: one challenge (status 0: the Hello was
// plausible, so the refusal came at the proof), then the door; never a HelloReply.
inline void expectOnlyAChallenge(const std::map<std::string, Result>& results,
                                 const std::string& name) {
  auto it = results.find(name);
  ASSERT_NE(it, results.end()) << name;
  const Result& r = it->second;
  EXPECT_TRUE(r.closed) << name;
  ASSERT_EQ(r.bytes, sizeof(HelloChallenge)) << name << ": never a HelloReply";
  HelloChallenge c;
  std::memcpy(&c, r.received.data(), sizeof(c));
  EXPECT_EQ(c.status, 0u) << name << ": the replay reached the proof, as a recording would";
}

// The rank logged each refusal at the proof once: `times` attacks claimed rank `claimed`.
inline void expectRefusalsLogged(const RankResult& rank, int claimed, size_t times) {
  EXPECT_EQ(count(rank.log,
                  fmt::format("claimed rank {}: its proof is not signed with this job's secret",
                              claimed)),
            times)
      << "rank " << rank.rank << "'s log:\n" << rank.log;
}

inline void expectNoSecretPrinted(const std::vector<RankResult>& reports, const std::string& secret) {
  for (const RankResult& r : reports) {
    EXPECT_EQ(r.log.find(secret), std::string::npos) << "rank " << r.rank;
    EXPECT_EQ(r.message.find(secret), std::string::npos) << "rank " << r.rank;
  }
}

}  // namespace gyre::testing::attack
