#include "tools/gyrerun/line_relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace gyre::tools {
namespace {

enum class ReadResult { kData, kWouldBlock, kEnd };

// Writes all of `bytes`, waiting when `fd` is non-blocking and full (gyrerun may inherit
// a non-blocking stdout). Returns false on an error such as EPIPE.
bool writeAll(int fd, const char* bytes, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n > 0) {
      bytes += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

LineRelay::LineRelay(int readFd, OutputSink* sink, std::string prefix)
    : readFd_(readFd), sink_(sink), prefix_(std::move(prefix)) {}

LineRelay::~LineRelay() {
  if (readFd_ >= 0) ::close(readFd_);
  if (sink_->openLineOwner == this) sink_->openLineOwner = nullptr;
}

void LineRelay::onReadable() {
  if (readFd_ < 0) return;
  // One read per wake-up, so a chatty rank cannot starve the others' relays.
  char chunk[16 * 1024];
  ssize_t n;
  do {
    n = ::read(readFd_, chunk, sizeof(chunk));
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    buffer_.append(chunk, static_cast<size_t>(n));
    emitLines(false);
  } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
    close();
  }
}

void LineRelay::drain() {
  char chunk[16 * 1024];
  while (readFd_ >= 0) {
    ssize_t n = ::read(readFd_, chunk, sizeof(chunk));
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      emitLines(false);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else {
      close();
    }
  }
}

void LineRelay::close() {
  emitLines(true);
  if (readFd_ >= 0) {
    ::close(readFd_);
    readFd_ = -1;
  }
}

void LineRelay::emitLines(bool flushAll) {
  std::string out;
  size_t pos = 0;
  auto startLine = [&] {
    if (!midLine_) out += prefix_;
  };
  for (;;) {
    size_t nl = buffer_.find('\n', pos);
    if (nl != std::string::npos) {
      startLine();
      out.append(buffer_, pos, nl + 1 - pos);
      midLine_ = false;
      pos = nl + 1;
    } else if (buffer_.size() - pos >= kMaxLine) {
      startLine();
      out.append(buffer_, pos, kMaxLine);
      midLine_ = true;
      pos += kMaxLine;
    } else {
      break;
    }
  }
  if (flushAll && pos < buffer_.size()) {
    startLine();
    out.append(buffer_, pos, std::string::npos);
    out += '\n';
    midLine_ = false;
    pos = buffer_.size();
  } else if (flushAll && midLine_) {
    out += '\n';  // the overlong line ended exactly at a piece boundary, without '\n'
    midLine_ = false;
  }
  buffer_.erase(0, pos);
  LineRelay* other = sink_->openLineOwner;
  if (!out.empty() && other != nullptr && other != this) {
    // Another rank's overlong line is unfinished on this stream: end it here, and its
    // continuation will start a prefixed line of its own.
    out.insert(0, 1, '\n');
    other->midLine_ = false;
    sink_->openLineOwner = nullptr;
  }
  if (midLine_) {
    sink_->openLineOwner = this;
  } else if (sink_->openLineOwner == this) {
    sink_->openLineOwner = nullptr;
  }
  if (!out.empty()) writeOut(out);
}

void LineRelay::writeOut(const std::string& bytes) {
  // A failed write (stdout closed by a pager, say) loses this output but not the
  // supervision of the ranks; SIGPIPE is ignored in gyrerun so EPIPE arrives here.
  (void)writeAll(sink_->fd, bytes.data(), bytes.size());
}

}  // namespace gyre::tools
