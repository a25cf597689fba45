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

bool readable(const pollfd& f) { return (f.revents & (POLLIN | POLLHUP | POLLERR)) != 0; }

bool wouldBlock(ssize_t r) {
  return r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK);
}

// The connector's first step: connects to a receiver's listener and sends our Hello.
// Listeners exist before their addresses are published, so connect() lands in the
// backlog even before the peer accepts.
Outgoing dial(const TcpPipeEndpoints& ep, int peer, uint32_t channel, const SocketAddress& addr,
              Clock::time_point deadline) {
  Outgoing o;
  o.peer = peer;
  o.channel = channel;
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
    fail(e.code(), "rank {}: sending the handshake to rank {} at {} failed: {}", ep.self, peer,
         o.where, e.what());
  }
  return o;
}

// Both sides of every handshake in one poll loop, until our connections are accepted and
// one valid connection from every expected sender has arrived. Handshakes are read
// concurrently, so a silent, slow or flooding client delays nobody. Per connection:
//   connector (Outgoing):         dial -> answerChallenge -> readConfirmation
//   acceptor (PendingHandshake):  acceptNew -> challengeHello -> confirmProof
class Handshakes {
 public:
  Handshakes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline,
             std::vector<Outgoing>& outgoing, TcpConnections& conns);
  void run();

 private:
  bool finished() const { return missing_.empty() && unanswered_ == 0; }
  void failIfLate(Clock::time_point now) const;
  Clock::time_point dropExpired(Clock::time_point now);
  bool waitForEvents(Clock::time_point now, Clock::time_point wake);
  // The connector's side.
  void advanceOutgoing(Outgoing& o);
  void answerChallenge(Outgoing& o);
  void readConfirmation(Outgoing& o);
  // The acceptor's side: each returns whether the connection stays pending.
  bool advanceIncoming(PendingHandshake& p);
  bool challengeHello(PendingHandshake& p);
  std::optional<std::string> expectedHello(const Hello& hello) const;
  std::optional<std::string> sendChallenge(PendingHandshake& p) const;
  bool confirmProof(PendingHandshake& p);
  void acceptNew();

  const int listenFd_;
  const TcpPipeEndpoints& ep_;
  const Clock::time_point deadline_;
  std::vector<Outgoing>& outgoing_;
  TcpConnections& conns_;
  HelloExpectation expect_;
  std::vector<std::pair<int, uint32_t>> missing_;  // (sender, channel) pairs still to come
  size_t unanswered_;                              // our connections not yet accepted
  std::deque<PendingHandshake> pending_;
  RefusalLog refusals_;
  std::vector<pollfd> fds_;  // the listener, pending_, then outgoing_
};

Handshakes::Handshakes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline,
                       std::vector<Outgoing>& outgoing, TcpConnections& conns)
    : listenFd_(listenFd),
      ep_(ep),
      deadline_(deadline),
      outgoing_(outgoing),
      conns_(conns),
      unanswered_(outgoing.size()),
      refusals_(ep.self) {
  expect_.commId = ep.commId;
  expect_.receiver = ep.self;
  expect_.worldSize = ep.worldSize;
  expect_.flags = ep.encrypt ? Hello::kEncrypt : 0;
  expect_.channels = static_cast<uint32_t>(ep.maxChannels());
  for (int peer : ep.recvFrom) {
    const auto channels = static_cast<size_t>(ep.channelsFor(peer));
    conns_.in[peer].resize(channels);
    if (ep.encrypt) conns_.inKeys[peer].resize(channels);
    for (uint32_t c = 0; c < channels; ++c) missing_.emplace_back(peer, c);
  }
  setNonBlocking(listenFd_, true);
  for (Outgoing& o : outgoing_) setNonBlocking(o.fd.get(), true);
}

void Handshakes::run() {
  while (!finished()) {
    const auto now = Clock::now();
    failIfLate(now);
    if (!waitForEvents(now, dropExpired(now))) continue;
    for (size_t i = 0; i < outgoing_.size(); ++i) {
      if (!outgoing_[i].done && readable(fds_[1 + pending_.size() + i])) {
        advanceOutgoing(outgoing_[i]);
      }
    }
    for (size_t i = pending_.size(); i-- > 0;) {
      if (readable(fds_[i + 1]) && !advanceIncoming(pending_[i])) {
        pending_.erase(pending_.begin() + static_cast<long>(i));
      }
    }
    if ((fds_[0].revents & POLLIN) != 0) acceptNew();
  }
  for (const PendingHandshake& p : pending_) {
    refusals_.refuse(p.from, "still without a handshake when every peer had connected");
  }
  for (Outgoing& o : outgoing_) setNonBlocking(o.fd.get(), false);
}

void Handshakes::failIfLate(Clock::time_point now) const {
  if (now < deadline_) return;
  std::vector<int> ranks;
  for (const auto& m : missing_) {
    if (std::find(ranks.begin(), ranks.end(), m.first) == ranks.end()) ranks.push_back(m.first);
  }
  std::vector<int> silent;
  for (const Outgoing& o : outgoing_) {
    if (!o.done && std::find(silent.begin(), silent.end(), o.peer) == silent.end()) {
      silent.push_back(o.peer);
    }
  }
  if (!ranks.empty()) {
    fail(ErrorCode::kTimeout, "rank {}: ranks [{}] did not connect before the timeout", ep_.self,
         rankList(ranks));
  }
  fail(ErrorCode::kTimeout, "rank {}: ranks [{}] did not answer our handshake before the "
       "timeout", ep_.self, rankList(silent));
}

// Drops handshakes that took too long (truncated, or a client that says nothing);
// returns when the next one expires (or the deadline).
Clock::time_point Handshakes::dropExpired(Clock::time_point now) {
  auto wake = deadline_;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now >= it->deadline) {
      refusals_.refuse(it->from,
                       it->challenged
                           ? fmt::format("no proof within {} s of our challenge (rank {} "
                                         "claimed; replayed or without the secret?)",
                                         kHandshakeTimeout.count(), it->hello.sender)
                           : fmt::format("no complete handshake within {} s ({} of {} bytes)",
                                         kHandshakeTimeout.count(), it->got, sizeof(Hello)));
      it = pending_.erase(it);
    } else {
      wake = std::min(wake, it->deadline);
      ++it;
    }
  }
  return wake;
}

// Polls the listener (while senders are missing), every pending handshake and our
// unanswered connections until `wake` (at most 1 s); false when nothing is ready.
bool Handshakes::waitForEvents(Clock::time_point now, Clock::time_point wake) {
  fds_.assign(1, pollfd{listenFd_, static_cast<short>(missing_.empty() ? 0 : POLLIN), 0});
  for (const PendingHandshake& p : pending_) fds_.push_back({p.fd.get(), POLLIN, 0});
  for (const Outgoing& o : outgoing_) fds_.push_back({o.done ? -1 : o.fd.get(), POLLIN, 0});
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
  int rc = ::poll(fds_.data(), fds_.size(), static_cast<int>(std::clamp<long long>(ms, 1, 1000)));
  if (rc < 0 && errno != EINTR) failSystem(errno, "poll");
  return rc > 0;
}

// Our own connection: the receiver's challenge, then its reply.
void Handshakes::advanceOutgoing(Outgoing& o) {
  const size_t want = o.proven ? sizeof(HelloReply) : sizeof(HelloChallenge);
  ssize_t r = ::recv(o.fd.get(), o.buf.data() + o.got, want - o.got, MSG_DONTWAIT);
  if (wouldBlock(r)) return;
  if (r <= 0) {
    fail(ErrorCode::kRemoteError,
         "rank {}: rank {} at {} closed our connection during the handshake ({}; a "
         "different secret, communicator or GYRE_NSOCKS? its log says why)",
         ep_.self, o.peer, o.where, r == 0 ? "end of stream" : std::strerror(errno));
  }
  o.got += static_cast<size_t>(r);
  if (o.got < want) return;
  o.got = 0;
  if (!o.proven) {
    answerChallenge(o);
  } else {
    readConfirmation(o);
  }
}

// Authenticates the acceptor (its challenge is signed with the secret) before sending
// anything that depends on the secret, then proves that we hold it too.
void Handshakes::answerChallenge(Outgoing& o) {
  HelloChallenge challenge;
  if (auto why = checkChallenge(o.buf.data(), sizeof(HelloChallenge), ep_.key, o.hello,
                                &challenge)) {
    fail(ErrorCode::kRemoteError,
         "rank {}: the listener at {}, published as rank {}'s, failed the handshake: {} "
         "(a rank given another GYRE_TOKEN/GYRE_TOKEN_FILE, or not rank {} at all: "
         "refusing the connection)",
         ep_.self, o.where, o.peer, *why, o.peer);
  }
  HelloProof proof;
  proof.mac = connectorMac(ep_.key, o.hello, challenge.nonce);
  o.acceptorNonce = challenge.nonce;
  writeExact(o.fd.get(), &proof, sizeof(proof), deadline_);
  o.proven = true;
}

void Handshakes::readConfirmation(Outgoing& o) {
  HelloReply reply;
  std::memcpy(&reply, o.buf.data(), sizeof(reply));
  if (reply.magic != HelloReply{}.magic || reply.status != 0) {
    fail(ErrorCode::kRemoteError,
         "rank {}: rank {} refused our connection (a different secret, communicator or "
         "GYRE_NSOCKS? its log says why)",
         ep_.self, o.peer);
  }
  o.done = true;
  --unanswered_;
}

// An accepted connection: its Hello, then (after our challenge) its proof.
bool Handshakes::advanceIncoming(PendingHandshake& p) {
  auto* buf = p.challenged ? reinterpret_cast<char*>(&p.proof) : reinterpret_cast<char*>(&p.hello);
  const size_t want = p.challenged ? sizeof(HelloProof) : sizeof(Hello);
  ssize_t r = ::recv(p.fd.get(), buf + p.got, want - p.got, MSG_DONTWAIT);
  if (wouldBlock(r)) return true;
  if (r <= 0) {
    refusals_.refuse(p.from, p.challenged
                                 ? fmt::format("closed instead of answering our challenge "
                                               "(claimed rank {}; without the secret?)",
                                               p.hello.sender)
                                 : fmt::format("closed after {} of {} handshake bytes", p.got,
                                               sizeof(Hello)));
    return false;
  }
  p.got += static_cast<size_t>(r);
  return p.challenged ? confirmProof(p) : challengeHello(p);
}

// Checks the Hello (garbage is turned away as soon as its first bytes show it) and
// answers a good one with our challenge; a refused gyre peer gets a refusal.
bool Handshakes::challengeHello(PendingHandshake& p) {
  const size_t seen = std::min(p.got, sizeof(Hello{}.magic));
  const bool badMagic = std::memcmp(&p.hello, Hello{}.magic.data(), seen) != 0;
  if (!badMagic && p.got < sizeof(Hello)) return true;
  std::optional<std::string> why =
      badMagic ? std::optional<std::string>("wrong magic (not a gyre connection)")
               : expectedHello(p.hello);
  if (!why) why = sendChallenge(p);
  if (!why) return true;
  if (!badMagic) sendRefusal(p.fd.get());  // a gyre peer learns it
  refusals_.refuse(p.from, *why);
  return false;
}

std::optional<std::string> Handshakes::expectedHello(const Hello& hello) const {
  Hello checked;
  if (auto why = checkHello(&hello, sizeof(Hello), expect_, &checked)) return why;
  if (std::find(missing_.begin(), missing_.end(),
                std::pair<int, uint32_t>(checked.sender, checked.channel)) == missing_.end()) {
    return fmt::format("rank {} (connection {}) is not expected to connect (or already did)",
                       checked.sender, checked.channel);
  }
  return std::nullopt;
}

std::optional<std::string> Handshakes::sendChallenge(PendingHandshake& p) const {
  HelloChallenge challenge;
  challenge.nonce = randomNonce();
  challenge.mac = acceptorMac(ep_.key, p.hello, challenge.nonce);
  ssize_t w = ::send(p.fd.get(), &challenge, sizeof(challenge), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w != static_cast<ssize_t>(sizeof(challenge))) return "could not send our challenge";
  p.nonce = challenge.nonce;
  p.challenged = true;
  p.got = 0;
  return std::nullopt;
}

// Authenticates the connector (its proof answers our challenge), confirms, and keeps the
// connection as its pipe's channel. Finished with either way.
bool Handshakes::confirmProof(PendingHandshake& p) {
  if (p.got < sizeof(HelloProof)) return true;
  std::optional<std::string> why =
      checkProof(&p.proof, sizeof(HelloProof), ep_.key, p.hello, p.nonce);
  const std::pair<int, uint32_t> pair(p.hello.sender, p.hello.channel);
  auto it = std::find(missing_.begin(), missing_.end(), pair);
  if (!why && it == missing_.end()) {
    why = fmt::format("rank {} (connection {}) already connected", pair.first, pair.second);
  }
  if (!why && !sendReply(p.fd.get(), 0)) why = "could not answer its handshake";
  if (why) {
    refusals_.refuse(p.from, fmt::format("claimed rank {}: {}", p.hello.sender, *why));
    return false;
  }
  missing_.erase(it);
  if (ep_.encrypt) {
    conns_.inKeys[pair.first][pair.second] = deriveConnectionKeys(ep_.key, p.hello, p.nonce);
  }
  conns_.in[pair.first][pair.second] = std::move(p.fd);
  return false;
}

// A bounded batch per round: handshakes accepted now are read next round, before a
// flood behind them could push them out of the pending set.
void Handshakes::acceptNew() {
  for (size_t batch = 0; batch < kMaxPendingHandshakes / 4; ++batch) {
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors (a flood): make room by dropping the oldest handshake.
        if (pending_.empty()) failSystem(errno, "accept");
        refusals_.refuse(pending_.front().from, "dropped: out of file descriptors");
        pending_.pop_front();
        continue;
      }
      failSystem(errno, "accept");
    }
    if (pending_.size() >= kMaxPendingHandshakes) {
      refusals_.refuse(pending_.front().from,
                       fmt::format("dropped: more than {} handshakes at once",
                                   kMaxPendingHandshakes));
      pending_.pop_front();
    }
    PendingHandshake p;
    p.fd = Fd(fd);
    p.from = peerName(fd);
    p.deadline = std::min(deadline_, Clock::now() + kHandshakeTimeout);
    pending_.push_back(std::move(p));
  }
}

}  // namespace

TcpConnections connectPipes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline) {
  TcpConnections conns;
  // Every Hello goes out first; the rest of both sides' handshakes runs in one poll loop,
  // so two ranks connecting to each other cannot deadlock.
  std::vector<Outgoing> outgoing;
  for (const auto& [peer, addr] : ep.sendTo) {
    for (int c = 0; c < ep.channelsFor(peer); ++c) {
      outgoing.push_back(dial(ep, peer, static_cast<uint32_t>(c), addr, deadline));
    }
  }
  Handshakes(listenFd, ep, deadline, outgoing, conns).run();
  for (Outgoing& o : outgoing) {
    if (ep.encrypt) {
      conns.outKeys[o.peer].push_back(deriveConnectionKeys(ep.key, o.hello, o.acceptorNonce));
    }
    conns.out[o.peer].push_back(std::move(o.fd));
  }
  return conns;
}

}  // namespace gyre
