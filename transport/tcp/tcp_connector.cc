#include "transport/tcp/tcp_connector.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "base/error.h"
#include "base/log.h"

namespace gyre {
namespace {

// A handshake must arrive quickly once a connection is accepted; a client that
// connects and says nothing must not hold up the job.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// Connections whose handshake is still arriving, at most; beyond it the oldest is
// dropped. A real peer sends its 64 bytes right after connecting, so it is never the
// oldest for long; a flood of silent clients costs only these slots.
constexpr size_t kMaxPendingHandshakes = 64;
// Refusals logged one by one; the rest are counted and summed up once.
constexpr int kMaxLoggedRefusals = 10;

std::string rankList(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

std::string peerName(int fd) {
  SocketAddress a;
  a.length = sizeof(a.storage);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) return "?";
  return a.toString();
}

// An accepted connection whose handshake is under way: its Hello arriving, then (after
// our challenge went out) its proof.
struct PendingHandshake {
  Fd fd;
  std::string from;
  Hello hello;
  size_t got = 0;  // of the Hello, then of the proof
  bool challenged = false;
  Nonce nonce{};  // ours, in the challenge
  HelloProof proof;
  Clock::time_point deadline;
};

// One of our connections to a receiver: its challenge arriving, then its reply.
struct Outgoing {
  int peer = -1;
  uint32_t channel = 0;
  std::string where;
  Fd fd;
  Hello hello;
  bool proven = false;  // we checked its challenge and sent our proof
  bool done = false;    // it accepted
  Nonce acceptorNonce{};
  std::array<uint8_t, sizeof(HelloChallenge)> buf{};
  size_t got = 0;
};

// Logs refused connections, the first few in full, then only a count.
class RefusalLog {
 public:
  explicit RefusalLog(int rank) : rank_(rank) {}
  ~RefusalLog() {
    if (unlogged_ > 0) {
      log(LogLevel::kWarn, rank_, "refused {} more connections (not logged one by one)",
          unlogged_);
    }
  }
  void refuse(const std::string& from, const std::string& why) {
    if (logged_ < kMaxLoggedRefusals) {
      ++logged_;
      log(LogLevel::kWarn, rank_, "refused a connection from {}: {}", from, why);
    } else {
      ++unlogged_;
    }
  }

 private:
  const int rank_;
  int logged_ = 0;
  long unlogged_ = 0;
};

// Answers a handshake without waiting: the reply is 8 bytes on an empty socket. A
// refusal is best effort (a stray client may already be gone).
bool sendReply(int fd, uint32_t status) {
  HelloReply reply;
  reply.status = status;
  ssize_t w = ::send(fd, &reply, sizeof(reply), MSG_NOSIGNAL | MSG_DONTWAIT);
  return w == static_cast<ssize_t>(sizeof(reply));
}

// A Hello we refuse before challenging it is answered with a challenge that carries the
// refusal (no nonce, no MAC), the message its connector reads at that point.
void sendRefusal(int fd) {
  HelloChallenge refusal;
  refusal.status = 1;
  ssize_t ignored = ::send(fd, &refusal, sizeof(refusal), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

// Runs both sides of every handshake until our connections are accepted and one valid
// connection from every expected sender has arrived. Handshakes are read concurrently,
// so a silent, slow or flooding client delays nobody.
void handshakes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline,
                std::vector<Outgoing>& outgoing, TcpConnections& conns) {
  HelloExpectation expect;
  expect.commId = ep.commId;
  expect.receiver = ep.self;
  expect.worldSize = ep.worldSize;
  expect.flags = ep.encrypt ? Hello::kEncrypt : 0;
  expect.channels = static_cast<uint32_t>(ep.channels);
  // (sender, channel) pairs still to come.
  std::vector<std::pair<int, uint32_t>> missing;
  for (int peer : ep.recvFrom) {
    conns.in[peer].resize(static_cast<size_t>(ep.channelsFor(peer)));
    if (ep.encrypt) conns.inKeys[peer].resize(static_cast<size_t>(ep.channelsFor(peer)));
    for (int c = 0; c < ep.channelsFor(peer); ++c) missing.emplace_back(peer, c);
  }
  size_t unanswered = outgoing.size();
  std::deque<PendingHandshake> pending;
  RefusalLog refusals(ep.self);
  setNonBlocking(listenFd, true);
  for (Outgoing& o : outgoing) setNonBlocking(o.fd.get(), true);
  std::vector<pollfd> fds;
  while (!missing.empty() || unanswered > 0) {
    auto now = Clock::now();
    if (now >= deadline) {
      std::vector<int> ranks;
      for (const auto& m : missing) {
        if (std::find(ranks.begin(), ranks.end(), m.first) == ranks.end()) ranks.push_back(m.first);
      }
      std::vector<int> silent;
      for (const Outgoing& o : outgoing) {
        if (!o.done && std::find(silent.begin(), silent.end(), o.peer) == silent.end()) {
          silent.push_back(o.peer);
        }
      }
      if (!ranks.empty()) {
        fail(ErrorCode::kTimeout, "rank {}: ranks [{}] did not connect before the timeout",
             ep.self, rankList(ranks));
      }
      fail(ErrorCode::kTimeout, "rank {}: ranks [{}] did not answer our handshake before the "
           "timeout", ep.self, rankList(silent));
    }
    // Drop handshakes that took too long (truncated, or a client that says nothing).
    auto wake = deadline;
    for (auto it = pending.begin(); it != pending.end();) {
      if (now >= it->deadline) {
        refusals.refuse(it->from,
                        it->challenged
                            ? fmt::format("no proof within {} s of our challenge (rank {} "
                                          "claimed; replayed or without the secret?)",
                                          kHandshakeTimeout.count(), it->hello.sender)
                            : fmt::format("no complete handshake within {} s ({} of {} bytes)",
                                          kHandshakeTimeout.count(), it->got, sizeof(Hello)));
        it = pending.erase(it);
      } else {
        wake = std::min(wake, it->deadline);
        ++it;
      }
    }
    fds.assign(1, pollfd{listenFd, static_cast<short>(missing.empty() ? 0 : POLLIN), 0});
    for (const PendingHandshake& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    for (const Outgoing& o : outgoing) {
      fds.push_back({o.done ? -1 : o.fd.get(), POLLIN, 0});
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(ms, 1, 1000)));
    if (rc < 0 && errno != EINTR) failSystem(errno, "poll");
    if (rc <= 0) continue;

    // Our own connections: the receiver's challenge, then its reply.
    for (size_t i = 0; i < outgoing.size(); ++i) {
      Outgoing& o = outgoing[i];
      if (o.done || (fds[1 + pending.size() + i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
        continue;
      }
      const size_t want = o.proven ? sizeof(HelloReply) : sizeof(HelloChallenge);
      ssize_t r = ::recv(o.fd.get(), o.buf.data() + o.got, want - o.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) {
        fail(ErrorCode::kRemoteError,
             "rank {}: rank {} at {} closed our connection during the handshake ({}; a "
             "different secret, communicator or GYRE_NSOCKS? its log says why)",
             ep.self, o.peer, o.where, r == 0 ? "end of stream" : std::strerror(errno));
      }
      o.got += static_cast<size_t>(r);
      if (o.got < want) continue;
      o.got = 0;
      if (!o.proven) {
        HelloChallenge challenge;
        if (auto why = checkChallenge(o.buf.data(), sizeof(HelloChallenge), ep.key, o.hello,
                                      &challenge)) {
          fail(ErrorCode::kRemoteError,
               "rank {}: the listener at {}, published as rank {}'s, failed the handshake: {} "
               "(a rank given another GYRE_TOKEN/GYRE_TOKEN_FILE, or not rank {} at all: "
               "refusing the connection)",
               ep.self, o.where, o.peer, *why, o.peer);
        }
        HelloProof proof;
        proof.mac = connectorMac(ep.key, o.hello, challenge.nonce);
        o.acceptorNonce = challenge.nonce;
        writeExact(o.fd.get(), &proof, sizeof(proof), deadline);
        o.proven = true;
        continue;
      }
      HelloReply reply;
      std::memcpy(&reply, o.buf.data(), sizeof(reply));
      if (reply.magic != HelloReply{}.magic || reply.status != 0) {
        fail(ErrorCode::kRemoteError,
             "rank {}: rank {} refused our connection (a different secret, communicator or "
             "GYRE_NSOCKS? its log says why)",
             ep.self, o.peer);
      }
      o.done = true;
      --unanswered;
    }

    // Incoming: a Hello, then (after our challenge) the proof.
    for (size_t i = pending.size(); i-- > 0;) {
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      PendingHandshake& p = pending[i];
      auto* buf = p.challenged ? reinterpret_cast<char*>(&p.proof) : reinterpret_cast<char*>(&p.hello);
      const size_t want = p.challenged ? sizeof(HelloProof) : sizeof(Hello);
      ssize_t r = ::recv(p.fd.get(), buf + p.got, want - p.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) {
        refusals.refuse(p.from, p.challenged
                                    ? fmt::format("closed instead of answering our challenge "
                                                  "(claimed rank {}; without the secret?)",
                                                  p.hello.sender)
                                    : fmt::format("closed after {} of {} handshake bytes", p.got,
                                                  sizeof(Hello)));
        pending.erase(pending.begin() + static_cast<long>(i));
        continue;
      }
      p.got += static_cast<size_t>(r);
      std::optional<std::string> why;
      bool badMagic = false;
      if (!p.challenged) {
        // Garbage is turned away as soon as its first bytes show it.
        const size_t seen = std::min(p.got, sizeof(Hello{}.magic));
        badMagic = std::memcmp(buf, Hello{}.magic.data(), seen) != 0;
        if (!badMagic && p.got < sizeof(Hello)) continue;
        Hello checked;
        why = badMagic ? std::optional<std::string>("wrong magic (not a gyre connection)")
                       : checkHello(&p.hello, sizeof(Hello), expect, &checked);
        if (!why && std::find(missing.begin(), missing.end(),
                              std::pair<int, uint32_t>(checked.sender, checked.channel)) ==
                        missing.end()) {
          why = fmt::format("rank {} (connection {}) is not expected to connect (or already did)",
                            checked.sender, checked.channel);
        }
        if (!why) {
          HelloChallenge challenge;
          challenge.nonce = randomNonce();
          challenge.mac = acceptorMac(ep.key, p.hello, challenge.nonce);
          ssize_t w = ::send(p.fd.get(), &challenge, sizeof(challenge), MSG_NOSIGNAL | MSG_DONTWAIT);
          if (w != static_cast<ssize_t>(sizeof(challenge))) {
            why = "could not send our challenge";
          } else {
            p.nonce = challenge.nonce;
            p.challenged = true;
            p.got = 0;
            continue;
          }
        }
      } else {
        if (p.got < sizeof(HelloProof)) continue;
        why = checkProof(&p.proof, sizeof(HelloProof), ep.key, p.hello, p.nonce);
        const std::pair<int, uint32_t> pair(p.hello.sender, p.hello.channel);
        auto it = std::find(missing.begin(), missing.end(), pair);
        if (!why && it == missing.end()) {
          why = fmt::format("rank {} (connection {}) already connected", pair.first, pair.second);
        }
        if (!why && !sendReply(p.fd.get(), 0)) why = "could not answer its handshake";
        if (!why) {
          missing.erase(it);
          if (ep.encrypt) {
            conns.inKeys[pair.first][pair.second] = deriveConnectionKeys(ep.key, p.hello, p.nonce);
          }
          conns.in[pair.first][pair.second] = std::move(p.fd);
        } else {
          why = fmt::format("claimed rank {}: {}", p.hello.sender, *why);
        }
      }
      if (why) {
        if (!badMagic && !p.challenged) sendRefusal(p.fd.get());  // a gyre peer learns it
        refusals.refuse(p.from, *why);
      }
      pending.erase(pending.begin() + static_cast<long>(i));
    }

    if ((fds[0].revents & POLLIN) == 0) continue;
    // A bounded batch per round: handshakes accepted now are read next round, before a
    // flood behind them could push them out of the pending set.
    for (size_t batch = 0; batch < kMaxPendingHandshakes / 4; ++batch) {
      int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors (a flood): make room by dropping the oldest handshake.
          if (pending.empty()) failSystem(errno, "accept");
          refusals.refuse(pending.front().from, "dropped: out of file descriptors");
          pending.pop_front();
          continue;
        }
        failSystem(errno, "accept");
      }
      if (pending.size() >= kMaxPendingHandshakes) {
        refusals.refuse(pending.front().from,
                        fmt::format("dropped: more than {} handshakes at once",
                                    kMaxPendingHandshakes));
        pending.pop_front();
      }
      PendingHandshake p;
      p.fd = Fd(fd);
      p.from = peerName(fd);
      p.deadline = std::min(deadline, Clock::now() + kHandshakeTimeout);
      pending.push_back(std::move(p));
    }
  }
  for (const PendingHandshake& p : pending) {
    refusals.refuse(p.from, "still without a handshake when every peer had connected");
  }
  for (Outgoing& o : outgoing) setNonBlocking(o.fd.get(), false);
}

}  // namespace

TcpConnections connectPipes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline) {
  TcpConnections conns;
  // 1. Connect to every receiver and send our Hello. Listeners exist before their
  // addresses are published, so connect() lands in the backlog even before the peer
  // accepts; the rest of both sides' handshakes runs in one poll loop, so two ranks
  // connecting to each other cannot deadlock.
  std::vector<Outgoing> outgoing;
  for (const auto& [peer, addr] : ep.sendTo) {
    for (int c = 0; c < ep.channelsFor(peer); ++c) {
      Outgoing o;
      o.peer = peer;
      o.channel = static_cast<uint32_t>(c);
      o.where = addr.toString();
      o.fd = connectWithRetry(addr, deadline);
      o.hello.commId = ep.commId;
      o.hello.sender = ep.self;
      o.hello.receiver = peer;
      o.hello.channel = o.channel;
      o.hello.flags = ep.encrypt ? Hello::kEncrypt : 0;
      o.hello.nonce = randomNonce();
      try {
        writeExact(o.fd.get(), &o.hello, sizeof(o.hello), deadline);
      } catch (const Error& e) {
        fail(e.code(), "rank {}: sending the handshake to rank {} at {} failed: {}", ep.self,
             peer, o.where, e.what());
      }
      outgoing.push_back(std::move(o));
    }
  }

  // 2. Both sides of every handshake until all are done.
  handshakes(listenFd, ep, deadline, outgoing, conns);

  for (Outgoing& o : outgoing) {
    if (ep.encrypt) {
      conns.outKeys[o.peer].push_back(deriveConnectionKeys(ep.key, o.hello, o.acceptorNonce));
    }
    conns.out[o.peer].push_back(std::move(o.fd));
  }
  return conns;
}

}  // namespace gyre
