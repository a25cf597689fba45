// What the tcp pipes share: control frames (a PeerStatus between data frames, or from a
// receiver back to its sender) and the bounded waits on a socket.
//
// Contract: pure helpers, no state; ControlReader is owned by one pipe and used under
// that pipe's lock (or by its one user thread).
#pragma once

#include <poll.h>

#include <optional>
#include <string>

#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_records.h"
#include "transport/wire.h"

namespace gyre {

// A control frame as it goes on the wire: header, then the status record.
struct ControlFrame {
  FrameHeader header;
  StatusRecord record;
};
static_assert(sizeof(ControlFrame) == sizeof(FrameHeader) + sizeof(StatusRecord));

ControlFrame makeControlFrame(const PeerStatus& status);

// How long an aborting end tries to get its last frame out before it shuts the socket
// down anyway: a stalled peer with a full socket buffer must not delay an abort.
inline constexpr auto kAbortSendBudget = std::chrono::milliseconds(100);

// Waits up to 10 ms (or until the deadline) for `events` on fd; the caller re-checks its
// condition, the abort flag and the deadline after every slice.
void pollSlice(int fd, short events, const WaitContext& ctx);

// True once the wait must end: the abort flag is set or the deadline passed.
bool expired(const WaitContext& ctx);

// Throws kAborted or kTimeout naming the peer and what was awaited.
[[noreturn]] void throwWaitFailure(const WaitContext& ctx, int peer, const char* what);

// Reads the control frames a receiver sends back to its sender, from a non-blocking
// socket, as they arrive. Anything else on that stream is a protocol violation.
class ControlReader {
 public:
  // `cipher` (GYRE_ENCRYPT): the frames come sealed (transport/tcp/tcp_records.h) and are
  // opened here; one that fails is kError.
  explicit ControlReader(RecordCipher* cipher = nullptr) : cipher_(cipher) {}
  enum class Result { kMore, kStatus, kEof, kReset, kError };
  // One step: kStatus with *out filled when a frame completed; kMore when the socket
  // has nothing more now; kEof or kReset when the peer closed (no allocation: peers
  // closing is routine, and the progress thread must not allocate for it); kError, with
  // *error, when the stream is bad.
  Result read(int fd, int peer, int worldSize, PeerStatus* out, std::string* error);

 private:
  RecordCipher* cipher_;
  uint64_t seq_ = 0;  // sealed control frames opened so far
  struct {
    ControlFrame frame;
    RecordTag tag;
  } wire_;
  size_t got_ = 0;
};

}  // namespace gyre
