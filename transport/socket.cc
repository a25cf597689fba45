#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "base/error.h"

namespace gyre {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

SocketAddress SocketAddress::parse(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) fail(ErrorCode::kInternal, "malformed address '{}'", text);
  std::string host = text.substr(0, colon);
  if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
  return resolve(host, static_cast<uint16_t>(std::stoi(text.substr(colon + 1))));
}

SocketAddress SocketAddress::resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    fail(ErrorCode::kInvalidArgument, "cannot resolve host '{}': {}", host, gai_strerror(rc));
  }
  // Prefer IPv4: loopback and the namespaces of the tests are IPv4, and "localhost"
  // resolving to ::1 first would bind where IPv4 clients do not connect.
  addrinfo* pick = res;
  for (addrinfo* p = res; p; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  }
  SocketAddress a;
  std::memcpy(&a.storage, pick->ai_addr, pick->ai_addrlen);
  a.length = pick->ai_addrlen;
  ::freeaddrinfo(res);
  return a;
}

SocketAddress SocketAddress::ofSocket(int fd) {
  SocketAddress a;
  a.length = sizeof(a.storage);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.length) != 0) {
    failSystem(errno, "getsockname");
  }
  return a;
}

uint16_t SocketAddress::port() const {
  if (storage.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

std::string SocketAddress::host() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, buf,
                sizeof(buf));
  } else {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, buf,
                sizeof(buf));
  }
  return buf;
}

std::string SocketAddress::toString() const {
  if (storage.ss_family == AF_INET6) return fmt::format("[{}]:{}", host(), port());
  return fmt::format("{}:{}", host(), port());
}

Fd tryListenOn(const SocketAddress& addr, int* bindErrno, int backlog) {
  Fd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) failSystem(errno, "socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  *bindErrno = 0;
  if (::bind(fd.get(), addr.sa(), addr.length) != 0) {
    *bindErrno = errno;
    return Fd();
  }
  if (::listen(fd.get(), backlog) != 0) failSystem(errno, fmt::format("listen {}", addr.toString()));
  return fd;
}

Fd listenOn(const SocketAddress& addr, int backlog) {
  int err = 0;
  Fd fd = tryListenOn(addr, &err, backlog);
  if (!fd) {
    if (err == EADDRINUSE) {
      fail(ErrorCode::kSystemError,
           "cannot listen on {}: the port is already in use (another job or a previous run "
           "still holds it; pick another MASTER_PORT)",
           addr.toString());
    }
    failSystem(err, fmt::format("bind {}", addr.toString()));
  }
  return fd;
}

namespace {

// One non-blocking connect bounded by `deadline`: a host that drops SYNs must not hold
// us for the kernel's two-minute default. Returns 0 or the errno of the failure.
int connectOnce(int fd, const SocketAddress& addr, Clock::time_point deadline) {
  setNonBlocking(fd, true);
  int rc;
  do {
    rc = ::connect(fd, addr.sa(), addr.length);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) return errno;
  if (rc != 0) {
    if (!pollUntil(fd, POLLOUT, deadline)) return ETIMEDOUT;
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return err;
  }
  setNonBlocking(fd, false);
  return 0;
}

}  // namespace

Fd connectWithRetry(const SocketAddress& addr, Clock::time_point deadline,
                    Clock::time_point refusedDeadline) {
  auto backoff = std::chrono::milliseconds(10);
  int lastErr = 0;
  for (;;) {
    Fd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) failSystem(errno, "socket");
    lastErr = connectOnce(fd.get(), addr, deadline);
    if (lastErr == 0) return fd;
    bool retryable = lastErr == ECONNREFUSED || lastErr == ETIMEDOUT || lastErr == ENETUNREACH ||
                     lastErr == EHOSTUNREACH || lastErr == ECONNRESET || lastErr == EAGAIN ||
                     lastErr == ECONNABORTED;
    if (!retryable) failSystem(lastErr, fmt::format("connect to {}", addr.toString()));
    auto now = Clock::now();
    if (now >= deadline || (lastErr == ECONNREFUSED && now >= refusedDeadline)) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  fail(ErrorCode::kTimeout, "could not connect to {} before the timeout (last error: {})",
       addr.toString(), std::strerror(lastErr));
}

bool pollUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, 1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) failSystem(errno, "poll");
  }
}

Fd acceptUntil(int listenFd, Clock::time_point deadline) {
  for (;;) {
    if (!pollUntil(listenFd, POLLIN, deadline)) {
      fail(ErrorCode::kTimeout, "no connection arrived on {} before the timeout",
           SocketAddress::ofSocket(listenFd).toString());
    }
    int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Fd(fd);
    if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) failSystem(errno, "accept");
  }
}

void setNonBlocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) failSystem(errno, "fcntl(F_GETFL)");
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) != 0) failSystem(errno, "fcntl(F_SETFL)");
}

void setNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    // A stream that is not TCP (a socketpair in a test or fuzzer) has no Nagle to turn off.
    if (errno == EOPNOTSUPP || errno == ENOPROTOOPT) return;
    failSystem(errno, "setsockopt(TCP_NODELAY)");
  }
}

namespace {

// A one-line file under /proc/sys, trimmed; "unknown" where it cannot be read.
std::string procSysLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "unknown";
  return line;
}

}  // namespace

void setCongestionControl(int fd, const std::string& name) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) == 0) {
    return;
  }
  const int err = errno;
  if (err == EOPNOTSUPP || err == ENOPROTOOPT) return;
  if (err == ENOENT) {
    fail(ErrorCode::kInvalidArgument,
         "GYRE_TCP_CONGESTION={}: this kernel has no such TCP congestion control (it has: {}, "
         "/proc/sys/net/ipv4/tcp_available_congestion_control; a module may need loading: "
         "modprobe tcp_{})",
         name, procSysLine("/proc/sys/net/ipv4/tcp_available_congestion_control"), name);
  }
  if (err == EPERM) {
    fail(ErrorCode::kInvalidArgument,
         "GYRE_TCP_CONGESTION={}: the kernel does not allow it to this process: "
         "net.ipv4.tcp_allowed_congestion_control is '{}' (an administrator adds {} there, or "
         "the job runs with CAP_NET_ADMIN; unset GYRE_TCP_CONGESTION to keep the host's {})",
         name, procSysLine("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), name,
         procSysLine("/proc/sys/net/ipv4/tcp_congestion_control"));
  }
  failSystem(err, fmt::format("setsockopt(TCP_CONGESTION, {})", name));
}

std::string congestionControlOf(int fd) {
  char name[64] = {};
  socklen_t length = sizeof(name) - 1;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) return "";
  return std::string(name, ::strnlen(name, length));
}

void writeExact(int fd, const void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!pollUntil(fd, POLLOUT, deadline)) fail(ErrorCode::kTimeout, "send timed out");
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      fail(ErrorCode::kRemoteError, "connection closed by the peer while sending");
    }
    failSystem(errno, "send");
  }
}

void readExact(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) fail(ErrorCode::kRemoteError, "connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!pollUntil(fd, POLLIN, deadline)) fail(ErrorCode::kTimeout, "receive timed out");
      continue;
    }
    if (errno == ECONNRESET) fail(ErrorCode::kRemoteError, "connection reset by the peer");
    failSystem(errno, "recv");
  }
}

}  // namespace gyre
