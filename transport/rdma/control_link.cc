#include "transport/rdma/control_link.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "base/error.h"

namespace gyre {

ControlLink::ControlLink(Fd fd, int peer, int worldSize)
    : fd_(std::move(fd)), peer_(peer), worldSize_(worldSize) {
  setNonBlocking(fd_.get(), true);
  setNoDelay(fd_.get());
}

bool ControlLink::send(const PeerStatus& status) {
  std::lock_guard<std::mutex> lock(writeMu_);
  if (writeBroken_) return false;
  ControlFrame frame = makeControlFrame(status);
  const auto* p = reinterpret_cast<const std::byte*>(&frame);
  size_t sent = 0;
  const auto until = Clock::now() + kAbortSendBudget;
  while (sent < sizeof(frame)) {
    ssize_t r = ::send(fd_.get(), p + sent, sizeof(frame) - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && Clock::now() < until) {
      pollfd pfd{fd_.get(), POLLOUT, 0};
      ::poll(&pfd, 1, 10);
      continue;
    }
    // Closed, reset, or no room within the budget: a half-written frame would make the
    // rest of the stream unreadable, so nothing more goes out.
    writeBroken_ = sent != 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    return false;
  }
  return true;
}

void ControlLink::shutdownWrite() {
  std::lock_guard<std::mutex> lock(writeMu_);
  writeBroken_ = true;
  ::shutdown(fd_.get(), SHUT_WR);
}

void ControlLink::poll() {
  while (!closed_) {
    PeerStatus s;
    std::string error;
    switch (reader_.read(fd_.get(), peer_, worldSize_, &s, &error)) {
      case ControlReader::Result::kMore: return;
      case ControlReader::Result::kEof: closed_ = true; return;
      case ControlReader::Result::kReset: closed_ = reset_ = true; return;
      case ControlReader::Result::kError: closed_ = true; fail(ErrorCode::kRemoteError, "{}", error);
      case ControlReader::Result::kStatus:
        if (s.state == PeerStatus::State::kWaiting) waiting_ = s;
        if (s.state == PeerStatus::State::kResumed) waiting_.reset();
        if (s.state == PeerStatus::State::kAborted) aborted_ = s;
        break;
    }
  }
}

}  // namespace gyre
