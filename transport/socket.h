// Sockets: RAII file descriptors, addresses, and the blocking-with-deadline helpers
// that bootstrap (the store, handshakes) needs. The data path does not use the
// blocking helpers; it drives non-blocking sockets from transport/tcp.
//
// Contract: every function either succeeds or throws gyre::Error whose message names
// the address or fd involved (kSystemError for OS failures, kTimeout when a deadline
// passes, kRemoteError when the peer closed). Every wait is bounded by a deadline;
// EINTR is retried. Thread-safe (no shared state).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "base/export.h"

namespace gyre {

using Clock = std::chrono::steady_clock;

class GYRE_API Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct GYRE_API SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  // Resolves `host` (IPv4/IPv6 literal or name; numeric first) with `port`. Throws
  // kInvalidArgument naming the host if it does not resolve.
  static SocketAddress resolve(const std::string& host, uint16_t port);
  static SocketAddress ofSocket(int fd);  // getsockname
  // The inverse of toString() ("host:port", "[v6]:port"); kInternal when malformed (the
  // text comes from a peer's claim, which gyre wrote).
  static SocketAddress parse(const std::string& text);
  uint16_t port() const;
  std::string host() const;      // numeric
  std::string toString() const;  // "host:port", "[v6]:port"
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// A listening TCP socket bound to `addr` (port 0 picks a free one), SO_REUSEADDR,
// close-on-exec. "Address already in use" is reported with the address.
Fd listenOn(const SocketAddress& addr, int backlog = 128);
// The same, but a failed bind returns an empty Fd with its errno in *bindErrno (0 on
// success), for callers that explain EADDRINUSE or EADDRNOTAVAIL in their own terms.
Fd tryListenOn(const SocketAddress& addr, int* bindErrno, int backlog = 128);

// Connects to `addr`, retrying with exponential backoff (10 ms .. 1 s) while the
// peer is not listening yet, until `deadline`; then kTimeout naming the address.
// Refusals (nobody listening) are retried only until `refusedDeadline`; unanswered
// SYNs (a full listen backlog, a busy host) keep being retried until `deadline`.
Fd connectWithRetry(const SocketAddress& addr, Clock::time_point deadline,
                    Clock::time_point refusedDeadline = Clock::time_point::max());

// Accepts one connection, waiting at most until `deadline` (kTimeout).
Fd acceptUntil(int listenFd, Clock::time_point deadline);

void setNonBlocking(int fd, bool on);
void setNoDelay(int fd);
// Sets the TCP congestion control of `fd` (GYRE_TCP_CONGESTION). Throws
// kInvalidArgument naming the setting when the kernel has no such algorithm (with the
// ones it has) or does not allow it to this process (with the allowed list and what to
// change); kSystemError otherwise. A stream that is not TCP is left alone.
void setCongestionControl(int fd, const std::string& name);
// The congestion control `fd` uses ("cubic"), or "" where it is not a TCP socket.
std::string congestionControlOf(int fd);

// Read or write exactly `n` bytes on a blocking or non-blocking socket, polling for
// readiness until `deadline`. readExact on EOF throws kRemoteError ("closed").
void writeExact(int fd, const void* data, size_t n, Clock::time_point deadline);
void readExact(int fd, void* data, size_t n, Clock::time_point deadline);

// Waits for `events` (POLLIN/POLLOUT) on fd until `deadline`; false on timeout.
bool pollUntil(int fd, short events, Clock::time_point deadline);

}  // namespace gyre
