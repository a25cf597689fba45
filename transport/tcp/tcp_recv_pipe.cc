// TcpRecvPipe (see tcp_pipe.h).
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/spin_pause.h"
#include "transport/tcp/tcp_pipe.h"

namespace gyre {

TcpRecvPipe::TcpRecvPipe(Fd fd, int peer, size_t slots, size_t slotBytes, int worldSize,
                         const ConnectionKeys* keys)
    : fd_(std::move(fd)),
      peer_(peer),
      slots_(slots),
      slotBytes_(slotBytes),
      worldSize_(worldSize),
      buffer_(std::make_unique_for_overwrite<std::byte[]>(slots * slotBytes)),
      headers_(slots),
      openIn_(keys ? std::make_unique<RecordCipher>(keys->connectorToAcceptor) : nullptr),
      sealOut_(keys ? std::make_unique<RecordCipher>(keys->acceptorToConnector) : nullptr),
      extra_(keys ? kRecordTagBytes : 0) {
  setNonBlocking(fd_.get(), true);
  setNoDelay(fd_.get());
}

void TcpRecvPipe::throwClosed() const {
  if (localAbort_.load(std::memory_order_acquire)) {
    fail(ErrorCode::kAborted, "this rank aborted: the pipe from peer rank {} is closed", peer_);
  }
  if (peerAbort_) throw PeerAbortError(describePeerAbort(peer_, *peerAbort_), *peerAbort_);
  const char* where = partial_ > 0 ? " in the middle of a frame" : "";
  if (closeErr_ == 0) {
    fail(ErrorCode::kRemoteError, "peer rank {} closed the connection{} (it exited or failed)",
         peer_, where);
  }
  if (closeErr_ == EBADMSG) {
    fail(ErrorCode::kRemoteError,
         "a record from peer rank {} failed authentication (GYRE_ENCRYPT): the pipe is closed",
         peer_);
  }
  if (closeErr_ == ECONNRESET) {
    fail(ErrorCode::kRemoteError, "connection from peer rank {} was reset{} (it exited or failed)",
         peer_, where);
  }
  failSystem(closeErr_, fmt::format("recv from peer rank {}", peer_));
}

bool TcpRecvPipe::dataHeaderReady() const {
  return partial_ >= sizeof(FrameHeader) && !next_.isControl();
}

bool TcpRecvPipe::readStep() {
  constexpr size_t kHeader = sizeof(FrameHeader);
  if (closed_) return false;
  std::byte* target;
  size_t want;
  // The frame: header, payload (a StatusRecord for a control frame), then the record's
  // tag when sealing (extra_ bytes).
  const size_t payload = partial_ < kHeader ? 0 : next_.isControl() ? sizeof(StatusRecord) : next_.bytes;
  if (partial_ < kHeader) {
    target = reinterpret_cast<std::byte*>(&next_) + partial_;
    want = kHeader - partial_;
  } else if (partial_ >= kHeader + payload) {
    target = tagIn_.data() + (partial_ - kHeader - payload);
    want = extra_ - (partial_ - kHeader - payload);
  } else if (next_.isControl()) {
    target = reinterpret_cast<std::byte*>(&control_) + (partial_ - kHeader);
    want = sizeof(StatusRecord) - (partial_ - kHeader);
  } else {
    if (received_ - released_ >= slots_) return false;  // every slot is held: wait for release()
    const size_t got = partial_ - kHeader;
    target = buffer_.get() + (received_ % slots_) * slotBytes_ + got;
    want = next_.bytes - got;
  }
  if (want != 0) {
    ssize_t r = ::recv(fd_.get(), target, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) return true;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (r <= 0) {
      // Frames that arrived before the close are still delivered; the error is raised
      // only when the receiver waits for a frame that can no longer come.
      closed_ = true;
      closeErr_ = r == 0 ? 0 : errno;
      return false;
    }
    partial_ += static_cast<size_t>(r);
    if (partial_ == kHeader) {
      FrameHeader checked;
      if (auto why = checkFrameHeader(&next_, kHeader, slotBytes_, &checked)) {
        fail(ErrorCode::kRemoteError, "bad frame from peer rank {}: {}", peer_, *why);
      }
    }
  }
  if (partial_ < kHeader) return true;  // read on
  const size_t frame = kHeader + (next_.isControl() ? sizeof(StatusRecord) : next_.bytes) + extra_;
  if (partial_ < frame) return true;
  // A data frame needs its slot (an empty one never waited for it while reading); the
  // check comes before the record is opened, so that it is opened exactly once.
  if (!next_.isControl() && received_ - released_ >= slots_) return false;
  if (openIn_) {
    // Nothing of a record is used before it is opened: a data slice stays in its slot,
    // unseen, until its tag checks.
    const bool control = next_.isControl();
    std::byte* data = control ? reinterpret_cast<std::byte*>(&control_)
                              : buffer_.get() + (received_ % slots_) * slotBytes_;
    const uint64_t seq = control ? controlIn_++ : received_;
    if (!openIn_->open(control ? RecordKind::kControl : RecordKind::kData, seq, next_, data,
                       control ? sizeof(StatusRecord) : next_.bytes, tagIn_)) {
      closed_ = true;
      closeErr_ = EBADMSG;
      fail(ErrorCode::kRemoteError,
           "{} record {} from peer rank {} failed authentication (GYRE_ENCRYPT): it was "
           "altered, reordered, replayed or dropped on the way; the pipe is closed",
           control ? "status" : "data", seq, peer_);
    }
  }
  if (next_.isControl()) {
    PeerStatus status;
    if (auto why = checkStatusRecord(&control_, sizeof(control_), worldSize_, &status)) {
      fail(ErrorCode::kRemoteError, "bad status from peer rank {}: {}", peer_, *why);
    }
    if (status.state == PeerStatus::State::kWaiting) peerStatus_ = status;
    if (status.state == PeerStatus::State::kResumed) peerStatus_.reset();
    if (status.state == PeerStatus::State::kAborted) peerAbort_ = status;
  } else {
    if (received_ - released_ >= slots_) return false;
    headers_[received_ % slots_] = next_;
    ++received_;
    peerStatus_.reset();  // it sent data after its status: it is no longer waiting
  }
  partial_ = 0;
  return true;
}

void TcpRecvPipe::readAvailable() {
  while (readStep()) {
  }
}

void TcpRecvPipe::waitReadable(const WaitContext& ctx, Clock::time_point since,
                               Clock::time_point spinUntil) {
  if (Clock::now() < spinUntil && spinPause(spinUntil)) return;
  if (expired(ctx)) throwWaitFailure(ctx, peer_, "a slice");
  {
    std::lock_guard<std::mutex> lock(writeMu_);
    if (!unsent_.empty()) flushRepliesLocked(Clock::now());
  }
  if (ctx.observer) {
    ctx.observer->waiting(peer_, "a slice", since, peerStatus_ ? &*peerStatus_ : nullptr);
  }
  pollSlice(fd_.get(), POLLIN, ctx);
}

Slice TcpRecvPipe::wait(const WaitContext& ctx) {
  const auto since = Clock::now();
  const auto spinUntil = since + ctx.spin;
  for (;;) {
    readAvailable();
    if (received_ != released_) break;
    if (closed_ || peerAbort_ || localAbort_.load(std::memory_order_acquire)) throwClosed();
    waitReadable(ctx, since, spinUntil);
  }
  const size_t i = released_ % slots_;
  return Slice{buffer_.get() + i * slotBytes_, headers_[i].bytes, headers_[i].tag};
}

Slice TcpRecvPipe::waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) {
  // A frame that read-ahead already buffered is copied out like any slot; so is every
  // sealed frame (it is opened in its slot before anyone sees it).
  if (received_ != released_ || openIn_) return RecvPipe::waitInto(dst, bytes, expect, ctx);
  const auto since = Clock::now();
  const auto spinUntil = since + ctx.spin;
  while (!dataHeaderReady()) {
    if (readStep()) {
      // A frame with no payload is complete with its header: deliver it like any other.
      if (received_ != released_) return RecvPipe::waitInto(dst, bytes, expect, ctx);
      continue;
    }
    if (closed_ || peerAbort_ || localAbort_.load(std::memory_order_acquire)) throwClosed();
    waitReadable(ctx, since, spinUntil);
  }
  if (next_.tag != expect || next_.bytes != bytes) {
    // Not ours to place: buffer it as usual and let the caller name the mismatch.
    return wait(ctx);
  }
  // Payload bytes that read-ahead already took went into the slot; the rest is read
  // straight into dst, saving the copy out of the slot.
  auto* out = static_cast<std::byte*>(dst);
  size_t got = partial_ - sizeof(FrameHeader);
  if (got) std::memcpy(out, buffer_.get() + (received_ % slots_) * slotBytes_, got);
  while (got < bytes) {
    ssize_t r = ::recv(fd_.get(), out + got, bytes - got, MSG_DONTWAIT);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (localAbort_.load(std::memory_order_acquire)) throwClosed();
      waitReadable(ctx, since, spinUntil);
      continue;
    }
    closed_ = true;
    closeErr_ = r == 0 ? 0 : errno;
    throwClosed();
  }
  partial_ = 0;
  ++received_;
  ++released_;
  peerStatus_.reset();
  return Slice{out, bytes, next_.tag};
}

void TcpRecvPipe::release() { ++released_; }

void TcpRecvPipe::flushRepliesLocked(Clock::time_point until) {
  while (!unsent_.empty()) {
    ssize_t w = ::send(fd_.get(), unsent_.data(), unsent_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      unsent_.erase(unsent_.begin(), unsent_.begin() + w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) return;  // the rest goes out at the next wait or publish
      pollfd p{fd_.get(), POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 10)));
      continue;
    }
    // The sender is gone: nothing more can reach it.
    unsent_.clear();
    writeClosed_ = true;
  }
}

void TcpRecvPipe::publish(const PeerStatus& status) {
  std::lock_guard<std::mutex> lock(writeMu_);
  const bool abort = status.state == PeerStatus::State::kAborted;
  if (localAbort_.load(std::memory_order_relaxed)) return;
  if (abort) localAbort_.store(true, std::memory_order_release);
  if (!writeClosed_) {
    ControlFrame frame = makeControlFrame(status);
    const auto* bytes = reinterpret_cast<const std::byte*>(&frame);
    RecordTag tag;
    if (sealOut_) {
      auto* record = reinterpret_cast<std::byte*>(&frame.record);
      sealOut_->seal(RecordKind::kControl, controlOut_++, frame.header, record, record,
                     sizeof(StatusRecord), tag);
    }
    unsent_.insert(unsent_.end(), bytes, bytes + sizeof(frame));
    if (sealOut_) unsent_.insert(unsent_.end(), tag.begin(), tag.end());
    flushRepliesLocked(abort ? Clock::now() + kAbortSendBudget : Clock::now());
  }
  if (abort) {
    // Our reader sees EOF and reports kAborted (localAbort_); the sender reads the
    // status, then EOF, and fails naming the cause.
    ::shutdown(fd_.get(), SHUT_RDWR);
    writeClosed_ = true;
    unsent_.clear();
  }
}

}  // namespace gyre
