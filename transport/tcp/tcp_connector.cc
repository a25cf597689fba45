#include "transport/tcp/tcp_connector.h"

#include <poll.h>

#include <algorithm>

#include "base/error.h"
#include "base/log.h"

namespace gyre {
namespace {

// A handshake must arrive quickly once a connection is accepted; a client that
// connects and says nothing must not hold up the job.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);

std::string rankList(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

}  // namespace

TcpConnections connectPipes(int listenFd, const TcpPipeEndpoints& ep, Clock::time_point deadline) {
  TcpConnections conns;
  // 1. Connect to every receiver and send our Hello. Listeners exist before their
  // addresses are published, so connect() lands in the backlog even before the peer
  // accepts; we read the replies only after accepting our own incoming pipes, so two
  // ranks connecting to each other cannot deadlock.
  for (const auto& [peer, addr] : ep.sendTo) {
    Fd fd = connectWithRetry(addr, deadline);
    Hello h;
    h.commId = ep.commId;
    h.sender = ep.self;
    h.receiver = peer;
    h.token = ep.token;
    try {
      writeExact(fd.get(), &h, sizeof(h), deadline);
    } catch (const Error& e) {
      fail(e.code(), "rank {}: sending the handshake to rank {} at {} failed: {}", ep.self, peer,
           addr.toString(), e.what());
    }
    conns.out.emplace(peer, std::move(fd));
  }

  // 2. Accept until every expected sender is connected.
  HelloExpectation expect;
  expect.commId = ep.commId;
  expect.receiver = ep.self;
  expect.worldSize = ep.worldSize;
  expect.token = ep.token;
  std::vector<int> missing = ep.recvFrom;
  while (!missing.empty()) {
    Fd fd;
    try {
      fd = acceptUntil(listenFd, deadline);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kTimeout) throw;
      fail(ErrorCode::kTimeout, "rank {}: ranks [{}] did not connect before the timeout",
           ep.self, rankList(missing));
    }
    std::string from = "?";
    try {
      SocketAddress peerAddr;
      peerAddr.length = sizeof(peerAddr.storage);
      if (::getpeername(fd.get(), reinterpret_cast<sockaddr*>(&peerAddr.storage),
                        &peerAddr.length) == 0) {
        from = peerAddr.toString();
      }
      Hello h;
      auto hsDeadline = std::min(deadline, Clock::now() + kHandshakeTimeout);
      readExact(fd.get(), &h, sizeof(h), hsDeadline);
      Hello checked;
      if (auto why = checkHello(&h, sizeof(h), expect, &checked)) {
        log(LogLevel::kWarn, ep.self, "refused a connection from {}: {}", from, *why);
        continue;
      }
      auto it = std::find(missing.begin(), missing.end(), checked.sender);
      if (it == missing.end()) {
        log(LogLevel::kWarn, ep.self,
            "refused a connection from {}: rank {} is not expected to connect (or already did)",
            from, checked.sender);
        continue;
      }
      HelloReply reply;
      writeExact(fd.get(), &reply, sizeof(reply), hsDeadline);
      missing.erase(it);
      conns.in.emplace(checked.sender, std::move(fd));
    } catch (const Error& e) {
      log(LogLevel::kWarn, ep.self, "dropped a connection from {} during the handshake: {}", from,
          e.what());
    }
  }

  // 3. Every receiver must have accepted our Hello.
  for (auto& [peer, fd] : conns.out) {
    HelloReply reply;
    try {
      readExact(fd.get(), &reply, sizeof(reply), deadline);
    } catch (const Error& e) {
      fail(e.code(), "rank {}: rank {} did not accept our connection: {}", ep.self, peer,
           e.what());
    }
    if (reply.magic != HelloReply{}.magic || reply.status != 0) {
      fail(ErrorCode::kRemoteError, "rank {}: rank {} refused our connection", ep.self, peer);
    }
  }
  return conns;
}

}  // namespace gyre
