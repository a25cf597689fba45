// TcpSendPipe (see tcp_pipe.h).
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/spin_pause.h"
#include "transport/tcp/tcp_pipe.h"
#include "transport/tcp/tcp_progress.h"

namespace gyre {

TcpSendPipe::TcpSendPipe(Fd fd, int peer, size_t slots, size_t slotBytes, TcpProgress* progress,
                         int worldSize, const ConnectionKeys* keys)
    : fd_(std::move(fd)),
      peer_(peer),
      slots_(slots),
      slotBytes_(slotBytes),
      worldSize_(worldSize),
      progress_(progress),
      buffer_(std::make_unique_for_overwrite<std::byte[]>(slots * slotBytes)),
      headers_(slots),
      payloads_(slots),
      sealOut_(keys ? std::make_unique<RecordCipher>(keys->connectorToAcceptor) : nullptr),
      openIn_(keys ? std::make_unique<RecordCipher>(keys->acceptorToConnector) : nullptr),
      tags_(keys ? slots : 0),
      extra_(keys ? kRecordTagBytes : 0),
      replies_(openIn_.get()) {
  setNonBlocking(fd_.get(), true);
  setNoDelay(fd_.get());
  progress_->add(this);
}

TcpSendPipe::~TcpSendPipe() { progress_->remove(this); }

bool TcpSendPipe::hasPending() const {
  if (failed_.load(std::memory_order_acquire) || localAbort_.load(std::memory_order_acquire)) {
    return false;
  }
  return completed_.load(std::memory_order_acquire) != posted_.load(std::memory_order_acquire) ||
         controlPending_.load(std::memory_order_acquire);
}

void TcpSendPipe::throwIfFailed() {
  if (localAbort_.load(std::memory_order_acquire)) {
    fail(ErrorCode::kAborted, "this rank aborted: the pipe to peer rank {} is closed", peer_);
  }
  if (failed_.load(std::memory_order_acquire)) {
    // Written once under mu_ before the release store of failed_.
    if (failStatus_) throw PeerAbortError(failMessage_, *failStatus_);
    throw Error(failCode_, failMessage_);
  }
  if (peerGone_.load(std::memory_order_acquire)) {
    fail(ErrorCode::kRemoteError, "peer rank {} closed the connection (it exited or failed)",
         peer_);
  }
}

void TcpSendPipe::failLocked(ErrorCode code, std::string message) {
  if (failed_.load(std::memory_order_relaxed)) return;
  failCode_ = code;
  failMessage_ = std::move(message);
  failed_.store(true, std::memory_order_release);
}

void TcpSendPipe::shutdownLocked() {
  ::shutdown(fd_.get(), SHUT_RDWR);
  closed_ = true;
}

template <typename Pred>
void TcpSendPipe::waitUntil(Pred pred, const WaitContext& ctx, const char* what) {
  const auto since = Clock::now();
  const auto spinUntil = since + ctx.spin;
  for (;;) {
    // What the peer did (closed, aborted) matters only when we still need it.
    if (localAbort_.load(std::memory_order_acquire)) throwIfFailed();
    if (pred()) return;
    writePending();
    if (pred()) return;
    throwIfFailed();
    if (Clock::now() < spinUntil && spinPause(spinUntil)) continue;
    if (expired(ctx)) throwWaitFailure(ctx, peer_, what);
    if (ctx.observer) {
      std::optional<PeerStatus> status;
      {
        std::lock_guard<std::mutex> lock(mu_);
        status = peerStatus_;
      }
      ctx.observer->waiting(peer_, what, since, status ? &*status : nullptr);
    }
    const bool replies = watchReplies_.load(std::memory_order_acquire);
    pollSlice(fd_.get(), static_cast<short>(POLLOUT | (replies ? POLLIN : 0)), ctx);
    if (replies) readReplies();
  }
}

std::byte* TcpSendPipe::acquire(const WaitContext& ctx) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  waitUntil([&] { return slot - completed_.load(std::memory_order_acquire) < slots_; }, ctx,
            "a free send slot");
  return buffer_.get() + (slot % slots_) * slotBytes_;
}

void TcpSendPipe::post(size_t bytes, const Tag& tag) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  publishData(buffer_.get() + (slot % slots_) * slotBytes_, bytes, tag);
}

void TcpSendPipe::postDirect(const void* src, size_t bytes, const Tag& tag,
                             const WaitContext& ctx) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  waitUntil([&] { return slot - completed_.load(std::memory_order_acquire) < slots_; }, ctx,
            "a free send slot");
  publishData(static_cast<const std::byte*>(src), bytes, tag);
}

void TcpSendPipe::publishData(const std::byte* payload, size_t bytes, const Tag& tag) {
  const uint64_t slot = posted_.load(std::memory_order_relaxed);
  FrameHeader& h = headers_[slot % slots_];
  h.magic = FrameHeader::kMagic;
  h.bytes = static_cast<uint32_t>(bytes);
  h.tag = tag;
  if (sealOut_) {
    // Into our own slot (from the user's buffer for postDirect), sealed: the slice's
    // number on this connection is its nonce.
    std::byte* own = buffer_.get() + (slot % slots_) * slotBytes_;
    sealOut_->seal(RecordKind::kData, slot, h, payload, own, bytes, tags_[slot % slots_]);
    payload = own;
  }
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

void TcpSendPipe::publish(const PeerStatus& status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_ || localAbort_.load(std::memory_order_relaxed)) return;
  queued_ = makeControlFrame(status);
  controlPending_.store(true, std::memory_order_release);
  if (status.state != PeerStatus::State::kAborted) {
    const bool pending = writePendingLocked();
    lock.unlock();
    if (pending) progress_->wake();
    return;
  }
  // Aborting: finish the frame on the wire (its payload is still valid: the
  // communicator aborts before a failed collective returns), send the status, shut down.
  localAbort_.store(true, std::memory_order_release);
  const auto until = Clock::now() + kAbortSendBudget;
  while (!closed_ && !failed_.load(std::memory_order_relaxed) && writePendingLocked()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd_.get(), POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 10)));
  }
  if (!closed_) shutdownLocked();
}

bool TcpSendPipe::writePending() {
  std::lock_guard<std::mutex> lock(mu_);
  return writePendingLocked();
}

bool TcpSendPipe::writeControlLocked() {
  if (!inFlight_) {
    inFlight_ = std::move(queued_);
    queued_.reset();
    controlSent_ = 0;
    // Sealed when it goes on the wire, not when queued: a newer status may replace a
    // queued one, and the control numbers must follow the wire.
    controlAborts_ = inFlight_->record.state == static_cast<uint8_t>(PeerStatus::State::kAborted);
    controlWire_.frame = *inFlight_;
    controlWireBytes_ = sizeof(ControlFrame) + extra_;
    if (sealOut_) {
      auto* record = reinterpret_cast<std::byte*>(&controlWire_.frame.record);
      sealOut_->seal(RecordKind::kControl, controlSeq_++, controlWire_.frame.header, record,
                     record, sizeof(StatusRecord), controlWire_.tag);
    }
  }
  const auto* bytes = reinterpret_cast<const std::byte*>(&controlWire_);
  while (controlSent_ < controlWireBytes_) {
    ssize_t w = ::send(fd_.get(), bytes + controlSent_, controlWireBytes_ - controlSent_,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (w < 0) {
      failLocked(ErrorCode::kRemoteError,
                 fmt::format("connection to peer rank {} was closed by the peer", peer_));
      return false;
    }
    controlSent_ += static_cast<size_t>(w);
  }
  const bool aborted = controlAborts_;
  inFlight_.reset();
  controlSent_ = 0;
  controlPending_.store(queued_.has_value(), std::memory_order_release);
  if (aborted) shutdownLocked();
  return true;
}

bool TcpSendPipe::writePendingLocked() {
  constexpr size_t kMaxSlotsPerCall = 16;
  for (;;) {
    if (failed_.load(std::memory_order_relaxed) || closed_) return false;
    // A control frame goes between two data frames, never inside one.
    if (inFlight_ || (queued_ && offset_ == 0)) {
      if (!writeControlLocked()) return !failed_.load(std::memory_order_relaxed);
      continue;
    }
    uint64_t done = completed_.load(std::memory_order_relaxed);
    const uint64_t posted = posted_.load(std::memory_order_acquire);
    if (done == posted) return false;
    // Gather every pending frame (header + payload), skipping what is already sent; with
    // a control frame queued, only the rest of the frame on the wire.
    const uint64_t last = queued_ ? done + 1 : posted;
    iovec iov[3 * kMaxSlotsPerCall];
    int n = 0;
    size_t skip = offset_;
    for (uint64_t s = done; s < last && n + 3 <= static_cast<int>(3 * kMaxSlotsPerCall); ++s) {
      const size_t i = s % slots_;
      // Header, payload, and the record's tag when sealing.
      const std::byte* parts[3] = {reinterpret_cast<const std::byte*>(&headers_[i]), payloads_[i],
                                   extra_ ? tags_[i].data() : nullptr};
      size_t lens[3] = {sizeof(FrameHeader), headers_[i].bytes, extra_};
      for (int p = 0; p < 3; ++p) {
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
      const bool closed = errno == EPIPE || errno == ECONNRESET;
      failLocked(closed ? ErrorCode::kRemoteError : ErrorCode::kSystemError,
                 closed
                     ? fmt::format("connection to peer rank {} was closed by the peer (it "
                                   "exited or failed)",
                                   peer_)
                     : fmt::format("send to peer rank {} failed: {}", peer_, std::strerror(errno)));
      return false;
    }
    // Advance over whole frames.
    size_t left = static_cast<size_t>(w) + offset_;
    while (done < posted) {
      size_t frame = sizeof(FrameHeader) + headers_[done % slots_].bytes + extra_;
      if (left < frame) break;
      left -= frame;
      ++done;
    }
    offset_ = left;
    completed_.store(done, std::memory_order_release);
  }
}

void TcpSendPipe::readReplies() {
  std::lock_guard<std::mutex> lock(mu_);
  readRepliesLocked();
}

void TcpSendPipe::readRepliesLocked() {
  while (watchReplies_.load(std::memory_order_relaxed)) {
    PeerStatus status;
    std::string error;
    switch (replies_.read(fd_.get(), peer_, worldSize_, &status, &error)) {
      case ControlReader::Result::kMore:
        return;
      case ControlReader::Result::kStatus:
        if (status.state == PeerStatus::State::kWaiting) {
          peerStatus_ = status;
        } else if (status.state == PeerStatus::State::kResumed) {
          peerStatus_.reset();
        } else if (!failed_.load(std::memory_order_relaxed)) {
          failStatus_ = status;
          failLocked(ErrorCode::kRemoteError, describePeerAbort(peer_, status));
        }
        break;
      case ControlReader::Result::kEof:
      case ControlReader::Result::kReset:
        // Routine when a peer's communicator closes: remembered, reported only if we still
        // need the peer (throwIfFailed), and without allocating on the progress thread.
        peerGone_.store(true, std::memory_order_release);
        watchReplies_.store(false, std::memory_order_release);
        return;
      case ControlReader::Result::kError:
        watchReplies_.store(false, std::memory_order_release);
        failLocked(ErrorCode::kRemoteError, error);
        return;
    }
  }
}

}  // namespace gyre
