// The outsider of the authentication tests (tests/auth_attack_test.cc over tcp pipes,
// tests/rdma_auth_test.cc over rdma pipes and their tcp control links): a forked process
// that knows where the job is (every rank's listening address, read from the claims in
// the store; the communicator id) but holds no key. It gets only bytes: recordings of
// genuine handshakes, which the test makes with the secret, and frames it made up.
//
// What is here:
//  - Attack / runAttacker(): the attacker process. It connects and sends every attack at
//    once, opens `gate` (if given) once all went out, then reads each connection until
//    the other side closes or `window` passes, and reports what it received.
//  - LateGate: holds the job's last rank back until the attacker has sent, so every
//    listener still expects that rank when the attacks arrive (by construction, not by
//    timing: the rdma VM is 10-30x slower than the host).
//  - readClaims(), jobCommId(), recordedPipeHandshake(), tagFrame(): what the attacker
//    knows and what it replays.
//  - exactAllReduces(), expectOnlyAChallenge(), expectRefusalsLogged(),
//    expectNoSecretPrinted(): the shared checks.
//
// Contract: header-only (every tests/*_test.cc is one program); the attacker process
// uses no key; the checks report through gtest and never print a secret.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
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

// A one-shot signal from the attacker process to a rank process (both forked from the
// test): created before the ranks are forked, opened by the attacker, awaited by a rank.
class LateGate {
 public:
  LateGate() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) throw std::runtime_error(std::strerror(errno));
  }
  ~LateGate() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  LateGate(const LateGate&) = delete;
  LateGate& operator=(const LateGate&) = delete;
  void open() const {
    ssize_t w = ::write(fds_[1], "g", 1);
    (void)w;
  }
  // True once opened; false when `limit` passed first (the caller goes on regardless).
  bool wait(std::chrono::milliseconds limit) const {
    pollfd p{fds_[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
    char c;
    return ::read(fds_[0], &c, 1) == 1;
  }

 private:
  int fds_[2] = {-1, -1};
};

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
  const LateGate* gate = nullptr;         // opened once every attack went out
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
  if (opts.gate) opts.gate->open();
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
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const std::string report = runAttacks(attacks, opts);
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

// The claims (check-ins) of the first communicator, by rank, once `expected` ranks have
// checked in or `limit` passed: what anyone who reads the store learns, addresses included.
inline std::map<int, Claim> readClaims(Store& store, int expected, std::chrono::milliseconds limit) {
  std::map<int, Claim> claims;
  const auto until = Clock::now() + limit;
  while (claims.size() < static_cast<size_t>(expected) && Clock::now() < until) {
    for (int seq = 1; seq <= expected; ++seq) {
      const std::string key = fmt::format("gyre/comm0/join/claim/{}", seq);
      Claim c;
      if (store.check({key}) && Claim::decode(store.getString(key), &c)) claims[c.rank] = c;
    }
    std::this_thread::sleep_for(20ms);
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
inline void expectRefusalsLogged(const RankReport& rank, int claimed, size_t times) {
  EXPECT_EQ(count(rank.log,
                  fmt::format("claimed rank {}: its proof is not signed with this job's secret",
                              claimed)),
            times)
      << "rank " << rank.rank << "'s log:\n" << rank.log;
}

inline void expectNoSecretPrinted(const std::vector<RankReport>& reports, const std::string& secret) {
  for (const RankReport& r : reports) {
    EXPECT_EQ(r.log.find(secret), std::string::npos) << "rank " << r.rank;
    EXPECT_EQ(r.message.find(secret), std::string::npos) << "rank " << r.rank;
  }
}

}  // namespace gyre::testing::attack
