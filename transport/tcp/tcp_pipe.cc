#include "transport/tcp/tcp_pipe.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/doorbell.h"
#include "transport/tcp/tcp_progress.h"

namespace gyre {
namespace {

// Waits up to 10 ms (or the deadline) for `events` on fd; the caller re-checks its
// condition, the abort flag and the deadline after every slice.
void pollSlice(int fd, short events, const WaitContext& ctx) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - Clock::now());
  int ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 10));
  pollfd p{fd, events, 0};
  ::poll(&p, 1, ms);
}

[[noreturn]] void throwWaitFailure(const WaitContext& ctx, int peer, const char* what) {
  if (ctx.aborted && ctx.aborted->load()) {
    fail(ErrorCode::kAborted, "aborted while waiting for {} (peer rank {})", what, peer);
  }
  fail(ErrorCode::kTimeout, "timed out waiting for {} from peer rank {} (tcp)", what, peer);
}

bool expired(const WaitContext& ctx) {
  return (ctx.aborted && ctx.aborted->load(std::memory_order_relaxed)) ||
         Clock::now() >= ctx.deadline;
}

}  // namespace

// ---- TcpSendPipe -----------------------------------------------------------------------

TcpSendPipe::TcpSendPipe(Fd fd, int peer, size_t slots, size_t slotBytes, TcpProgress* progress)
    : fd_(std::move(fd)),
      peer_(peer),
      slots_(slots),
      slotBytes_(slotBytes),
      progress_(progress),
      buffer_(slots * slotBytes),
      headers_(slots),
      payloads_(slots) {
  setNonBlocking(fd_.get(), true);
  setNoDelay(fd_.get());
  progress_->add(this);
}

TcpSendPipe::~TcpSendPipe() { progress_->remove(this); }

bool TcpSendPipe::hasPending() const {
  return completed_.load(std::memory_order_acquire) != posted_.load(std::memory_order_acquire) &&
         !failed_.load(std::memory_order_acquire);
}

void TcpSendPipe::throwIfFailed() const {
  if (failed_.load(std::memory_order_acquire)) throw Error(failCode_, failMessage_);
}

template <typename Pred>
void TcpSendPipe::waitUntil(Pred pred, const WaitContext& ctx, const char* what) {
  const auto spinUntil = Clock::now() + ctx.spin;
  for (;;) {
    if (pred()) return;
    throwIfFailed();
    writePending();
    if (pred()) return;
    throwIfFailed();
    if (Clock::now() < spinUntil) {
      spinPause(spinUntil);
      continue;
    }
    if (expired(ctx)) throwWaitFailure(ctx, peer_, what);
    pollSlice(fd_.get(), POLLOUT, ctx);
  }
}

std::byte* TcpSendPipe::acquire(const WaitContext& ctx) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  waitUntil([&] { return slot - completed_.load(std::memory_order_acquire) < slots_; }, ctx,
            "a free send slot");
  return buffer_.data() + (slot % slots_) * slotBytes_;
}

void TcpSendPipe::post(size_t bytes, const Tag& tag) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  publish(buffer_.data() + (slot % slots_) * slotBytes_, bytes, tag);
}

void TcpSendPipe::postDirect(const void* src, size_t bytes, const Tag& tag,
                             const WaitContext& ctx) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  waitUntil([&] { return slot - completed_.load(std::memory_order_acquire) < slots_; }, ctx,
            "a free send slot");
  publish(static_cast<const std::byte*>(src), bytes, tag);
}

void TcpSendPipe::publish(const std::byte* payload, size_t bytes, const Tag& tag) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  FrameHeader& h = headers_[slot % slots_];
  h.magic = FrameHeader::kMagic;
  h.bytes = static_cast<uint32_t>(bytes);
  h.tag = tag;
  payloads_[slot % slots_] = payload;
  posted_.store(slot + 1, std::memory_order_release);
  // Send inline when nobody else is sending; leave the rest to the progress thread.
  bool pending = true;
  if (mu_.try_lock()) {
    pending = writePendingLocked();
    mu_.unlock();
  }
  if (pending) progress_->wake();
}

void TcpSendPipe::flush(const WaitContext& ctx) {
  const uint64_t target = posted_.load(std::memory_order_relaxed);
  waitUntil([&] { return completed_.load(std::memory_order_acquire) == target; }, ctx,
            "the send queue to drain");
}

bool TcpSendPipe::writePending() {
  std::lock_guard<std::mutex> lock(mu_);
  return writePendingLocked();
}

bool TcpSendPipe::writePendingLocked() {
  constexpr size_t kMaxSlotsPerCall = 16;
  for (;;) {
    if (failed_.load(std::memory_order_relaxed)) return false;
    uint64_t done = completed_.load(std::memory_order_relaxed);
    const uint64_t posted = posted_.load(std::memory_order_acquire);
    if (done == posted) return false;
    // Gather every pending frame (header + payload), skipping what is already sent.
    iovec iov[2 * kMaxSlotsPerCall];
    int n = 0;
    size_t skip = offset_;
    for (uint64_t s = done; s < posted && n < static_cast<int>(2 * kMaxSlotsPerCall); ++s) {
      const size_t i = s % slots_;
      const std::byte* parts[2] = {reinterpret_cast<const std::byte*>(&headers_[i]),
                                   payloads_[i]};
      size_t lens[2] = {sizeof(FrameHeader), headers_[i].bytes};
      for (int p = 0; p < 2; ++p) {
        if (skip >= lens[p]) {
          skip -= lens[p];
          continue;
        }
        iov[n].iov_base = const_cast<std::byte*>(parts[p] + skip);
        iov[n].iov_len = lens[p] - skip;
        skip = 0;
        ++n;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      failMessage_ = (errno == EPIPE || errno == ECONNRESET)
                         ? fmt::format("connection to peer rank {} was closed by the peer", peer_)
                         : fmt::format("send to peer rank {} failed: {}", peer_, std::strerror(errno));
      failCode_ = (errno == EPIPE || errno == ECONNRESET) ? ErrorCode::kRemoteError
                                                          : ErrorCode::kSystemError;
      failed_.store(true, std::memory_order_release);
      return false;
    }
    // Advance over whole frames.
    size_t left = static_cast<size_t>(w) + offset_;
    while (done < posted) {
      size_t frame = sizeof(FrameHeader) + headers_[done % slots_].bytes;
      if (left < frame) break;
      left -= frame;
      ++done;
    }
    offset_ = left;
    completed_.store(done, std::memory_order_release);
  }
}

// ---- TcpRecvPipe -----------------------------------------------------------------------

TcpRecvPipe::TcpRecvPipe(Fd fd, int peer, size_t slots, size_t slotBytes)
    : fd_(std::move(fd)),
      peer_(peer),
      slots_(slots),
      slotBytes_(slotBytes),
      buffer_(slots * slotBytes),
      headers_(slots) {
  setNonBlocking(fd_.get(), true);
  setNoDelay(fd_.get());
}

void TcpRecvPipe::throwClosed(int err) const {
  if (err == 0) {
    fail(ErrorCode::kRemoteError, "peer rank {} closed the connection (it exited or failed)",
         peer_);
  }
  if (err == ECONNRESET) fail(ErrorCode::kRemoteError, "connection from peer rank {} was reset", peer_);
  failSystem(err, fmt::format("recv from peer rank {}", peer_));
}

void TcpRecvPipe::readAvailable() {
  while (received_ - released_ < slots_) {
    const size_t i = received_ % slots_;
    std::byte* target;
    size_t want;
    if (partial_ < sizeof(FrameHeader)) {
      target = reinterpret_cast<std::byte*>(&headers_[i]) + partial_;
      want = sizeof(FrameHeader) - partial_;
    } else {
      size_t got = partial_ - sizeof(FrameHeader);
      target = buffer_.data() + i * slotBytes_ + got;
      want = headers_[i].bytes - got;
    }
    if (want != 0) {
      ssize_t r = ::recv(fd_.get(), target, want, MSG_DONTWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (r <= 0) {
        // Frames that arrived before the close are still delivered; the error is
        // raised only when the receiver waits for a frame that can no longer come.
        if (received_ == released_) throwClosed(r == 0 ? 0 : errno);
        return;
      }
      partial_ += static_cast<size_t>(r);
    }
    if (partial_ == sizeof(FrameHeader)) {
      FrameHeader checked;
      if (auto why = checkFrameHeader(&headers_[i], sizeof(FrameHeader), slotBytes_, &checked)) {
        fail(ErrorCode::kRemoteError, "bad frame from peer rank {}: {}", peer_, *why);
      }
    }
    if (partial_ >= sizeof(FrameHeader) && partial_ == sizeof(FrameHeader) + headers_[i].bytes) {
      ++received_;
      partial_ = 0;
    }
  }
}

void TcpRecvPipe::waitReadable(const WaitContext& ctx, Clock::time_point spinUntil) {
  if (Clock::now() < spinUntil) {
    spinPause(spinUntil);
    return;
  }
  if (expired(ctx)) throwWaitFailure(ctx, peer_, "a slice");
  pollSlice(fd_.get(), POLLIN, ctx);
}

Slice TcpRecvPipe::wait(const WaitContext& ctx) {
  const auto spinUntil = Clock::now() + ctx.spin;
  for (;;) {
    readAvailable();
    if (received_ != released_) break;
    waitReadable(ctx, spinUntil);
  }
  const size_t i = released_ % slots_;
  return Slice{buffer_.data() + i * slotBytes_, headers_[i].bytes, headers_[i].tag};
}

bool TcpRecvPipe::readHeader() {
  const size_t i = received_ % slots_;
  while (partial_ < sizeof(FrameHeader)) {
    ssize_t r = ::recv(fd_.get(), reinterpret_cast<std::byte*>(&headers_[i]) + partial_,
                       sizeof(FrameHeader) - partial_, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (r <= 0) throwClosed(r == 0 ? 0 : errno);
    partial_ += static_cast<size_t>(r);
  }
  FrameHeader checked;
  if (auto why = checkFrameHeader(&headers_[i], sizeof(FrameHeader), slotBytes_, &checked)) {
    fail(ErrorCode::kRemoteError, "bad frame from peer rank {}: {}", peer_, *why);
  }
  return true;
}

Slice TcpRecvPipe::waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) {
  // A frame that read-ahead already buffered is copied out like any slot.
  if (received_ != released_) return RecvPipe::waitInto(dst, bytes, expect, ctx);
  const auto spinUntil = Clock::now() + ctx.spin;
  while (!readHeader()) waitReadable(ctx, spinUntil);
  const size_t i = received_ % slots_;
  if (headers_[i].tag != expect || headers_[i].bytes != bytes) {
    // Not ours to place: buffer it as usual and let the caller name the mismatch.
    return wait(ctx);
  }
  // Payload bytes that arrived with the header went into the slot; the rest is read
  // straight into dst, saving the copy out of the slot.
  auto* out = static_cast<std::byte*>(dst);
  size_t got = partial_ - sizeof(FrameHeader);
  if (got) std::memcpy(out, buffer_.data() + i * slotBytes_, got);
  while (got < bytes) {
    ssize_t r = ::recv(fd_.get(), out + got, bytes - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      waitReadable(ctx, spinUntil);
      continue;
    }
    throwClosed(r == 0 ? 0 : errno);
  }
  partial_ = 0;
  ++received_;
  ++released_;
  return Slice{out, bytes, headers_[i].tag};
}

void TcpRecvPipe::release() { ++released_; }

}  // namespace gyre
