#include "transport/tcp/tcp_control.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace gyre {

ControlFrame makeControlFrame(const PeerStatus& status) {
  ControlFrame f;
  f.header.magic = FrameHeader::kControlMagic;
  f.header.bytes = sizeof(StatusRecord);
  f.record = encodeStatus(status);
  return f;
}

void pollSlice(int fd, short events, const WaitContext& ctx) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - Clock::now());
  int ms = static_cast<int>(std::clamp<long long>(left.count(), 0, 10));
  pollfd p{fd, events, 0};
  ::poll(&p, 1, ms);
}

bool expired(const WaitContext& ctx) {
  return (ctx.aborted && ctx.aborted->load(std::memory_order_relaxed)) ||
         Clock::now() >= ctx.deadline;
}

void throwWaitFailure(const WaitContext& ctx, int peer, const char* what) {
  if (ctx.aborted && ctx.aborted->load()) {
    fail(ErrorCode::kAborted, "aborted while waiting for {} (peer rank {})", what, peer);
  }
  fail(ErrorCode::kTimeout, "timed out waiting for {} from peer rank {} (tcp)", what, peer);
}

ControlReader::Result ControlReader::read(int fd, int peer, int worldSize, PeerStatus* out,
                                          std::string* error) {
  static_assert(sizeof(wire_) == sizeof(ControlFrame) + kRecordTagBytes);
  auto* base = reinterpret_cast<std::byte*>(&wire_);
  ControlFrame& frame_ = wire_.frame;
  const size_t total = sizeof(ControlFrame) + (cipher_ ? kRecordTagBytes : 0);
  for (;;) {
    ssize_t r = ::recv(fd, base + got_, total - got_, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Result::kMore;
    if (r == 0) return Result::kEof;
    if (r < 0 && (errno == ECONNRESET || errno == EPIPE)) return Result::kReset;
    if (r < 0) {
      *error = fmt::format("reading from peer rank {} failed: {}", peer, std::strerror(errno));
      return Result::kError;
    }
    got_ += static_cast<size_t>(r);
    if (got_ >= sizeof(FrameHeader) && got_ - static_cast<size_t>(r) < sizeof(FrameHeader)) {
      FrameHeader h;
      auto why = checkFrameHeader(&frame_.header, sizeof(FrameHeader), 0, &h);
      if (!why && !h.isControl()) why = "a data frame on the return path";
      if (why) {
        *error = fmt::format("bad frame from peer rank {}: {}", peer, *why);
        return Result::kError;
      }
    }
    if (got_ < total) continue;
    got_ = 0;
    if (cipher_ && !cipher_->open(RecordKind::kControl, seq_++, frame_.header,
                                  reinterpret_cast<std::byte*>(&frame_.record),
                                  sizeof(StatusRecord), wire_.tag)) {
      *error = fmt::format("a status record from peer rank {} failed authentication "
                           "(GYRE_ENCRYPT): altered, reordered, replayed or dropped on the way",
                           peer);
      return Result::kError;
    }
    if (auto why = checkStatusRecord(&frame_.record, sizeof(StatusRecord), worldSize, out)) {
      *error = fmt::format("bad status from peer rank {}: {}", peer, *why);
      return Result::kError;
    }
    return Result::kStatus;
  }
}

}  // namespace gyre
