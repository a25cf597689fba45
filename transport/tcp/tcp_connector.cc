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

// An accepted connection whose Hello is still arriving.
struct PendingHandshake {
  Fd fd;
  std::string from;
  Hello hello;
  size_t got = 0;
  Clock::time_point deadline;
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

// Serves the listener until one valid connection from every expected sender arrived.
// Handshakes are read concurrently, so a silent, slow or flooding client delays nobody.
void acceptExpected(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline,
                    TcpConnections& conns) {
  HelloExpectation expect;
  expect.commId = ep.commId;
  expect.receiver = ep.self;
  expect.worldSize = ep.worldSize;
  expect.token = ep.token;
  expect.channels = static_cast<uint32_t>(ep.channels);
  // (sender, channel) pairs still to come.
  std::vector<std::pair<int, uint32_t>> missing;
  for (int peer : ep.recvFrom) {
    conns.in[peer].resize(static_cast<size_t>(ep.channelsFor(peer)));
    for (int c = 0; c < ep.channelsFor(peer); ++c) missing.emplace_back(peer, c);
  }
  std::deque<PendingHandshake> pending;
  RefusalLog refusals(ep.self);
  setNonBlocking(listenFd, true);
  std::vector<pollfd> fds;
  while (!missing.empty()) {
    auto now = Clock::now();
    if (now >= deadline) {
      std::vector<int> ranks;
      for (const auto& m : missing) {
        if (std::find(ranks.begin(), ranks.end(), m.first) == ranks.end()) ranks.push_back(m.first);
      }
      fail(ErrorCode::kTimeout, "rank {}: ranks [{}] did not connect before the timeout", ep.self,
           rankList(ranks));
    }
    // Drop handshakes that took too long (truncated, or a client that says nothing).
    auto wake = deadline;
    for (auto it = pending.begin(); it != pending.end();) {
      if (now >= it->deadline) {
        refusals.refuse(it->from, fmt::format("no complete handshake within {} s ({} of {} bytes)",
                                              kHandshakeTimeout.count(), it->got, sizeof(Hello)));
        it = pending.erase(it);
      } else {
        wake = std::min(wake, it->deadline);
        ++it;
      }
    }
    fds.assign(1, pollfd{listenFd, POLLIN, 0});
    for (const PendingHandshake& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(ms, 1, 1000)));
    if (rc < 0 && errno != EINTR) failSystem(errno, "poll");
    if (rc <= 0) continue;

    // Read handshakes first: a real peer's bytes are usually there already.
    for (size_t i = pending.size(); i-- > 0;) {
      if ((fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      PendingHandshake& p = pending[i];
      auto* buf = reinterpret_cast<char*>(&p.hello);
      ssize_t r = ::recv(p.fd.get(), buf + p.got, sizeof(Hello) - p.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (r <= 0) {
        refusals.refuse(p.from, fmt::format("closed after {} of {} handshake bytes", p.got,
                                            sizeof(Hello)));
        pending.erase(pending.begin() + static_cast<long>(i));
        continue;
      }
      p.got += static_cast<size_t>(r);
      // Garbage is turned away as soon as its first bytes show it.
      const size_t seen = std::min(p.got, sizeof(Hello{}.magic));
      const bool badMagic = std::memcmp(buf, Hello{}.magic.data(), seen) != 0;
      if (!badMagic && p.got < sizeof(Hello)) continue;
      Hello checked;
      std::optional<std::string> why =
          badMagic ? std::optional<std::string>("wrong magic (not a gyre connection)")
                   : checkHello(&p.hello, sizeof(Hello), expect, &checked);
      if (!why) {
        auto it = std::find(missing.begin(), missing.end(),
                            std::pair<int, uint32_t>(checked.sender, checked.channel));
        if (it == missing.end()) {
          why = fmt::format("rank {} (connection {}) is not expected to connect (or already did)",
                            checked.sender, checked.channel);
        } else if (!sendReply(p.fd.get(), 0)) {
          why = "could not answer its handshake";
        } else {
          missing.erase(it);
          conns.in[checked.sender][checked.channel] = std::move(p.fd);
        }
      }
      if (why) {
        if (!badMagic) sendReply(p.fd.get(), 1);  // a gyre peer learns it was refused
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
}

}  // namespace

TcpConnections connectPipes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline) {
  TcpConnections conns;
  // 1. Connect to every receiver and send our Hello. Listeners exist before their
  // addresses are published, so connect() lands in the backlog even before the peer
  // accepts; we read the replies only after accepting our own incoming pipes, so two
  // ranks connecting to each other cannot deadlock.
  for (const auto& [peer, addr] : ep.sendTo) {
    for (int c = 0; c < ep.channelsFor(peer); ++c) {
      Fd fd = connectWithRetry(addr, deadline);
      Hello h;
      h.commId = ep.commId;
      h.sender = ep.self;
      h.receiver = peer;
      h.channel = static_cast<uint32_t>(c);
      h.token = ep.token;
      try {
        writeExact(fd.get(), &h, sizeof(h), deadline);
      } catch (const Error& e) {
        fail(e.code(), "rank {}: sending the handshake to rank {} at {} failed: {}", ep.self,
             peer, addr.toString(), e.what());
      }
      conns.out[peer].push_back(std::move(fd));
    }
  }

  // 2. Accept until every expected sender is connected.
  acceptExpected(listenFd, ep, deadline, conns);

  // 3. Every receiver must have accepted our Hello.
  for (auto& [peer, fds] : conns.out) {
    for (Fd& fd : fds) {
      HelloReply reply;
      try {
        readExact(fd.get(), &reply, sizeof(reply), deadline);
      } catch (const Error& e) {
        fail(e.code(), "rank {}: rank {} did not accept our connection: {}", ep.self, peer,
             e.what());
      }
      if (reply.magic != HelloReply{}.magic || reply.status != 0) {
        fail(ErrorCode::kRemoteError,
             "rank {}: rank {} refused our connection (a different job token, communicator or "
             "GYRE_NSOCKS? its log says why)",
             ep.self, peer);
      }
    }
  }
  return conns;
}

}  // namespace gyre
