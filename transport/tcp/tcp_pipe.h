// TCP pipes: the pipe of slots over one TCP connection per directed pipe.
//
// The slots are local to each side. A TcpSendPipe holds K slots; post() queues the
// slot and writes as much as the socket takes right away (writev of frame header and
// payload, several slots per call), so small messages leave without a thread
// hand-off. What the socket does not take is finished by TcpProgress's thread, or by
// the sender itself when it waits for a credit. A slot's credit returns when its
// bytes are in the kernel. A TcpRecvPipe holds K slots and is read by the thread that
// waits on it: wait() reads frames (header, then payload) into free slots until the
// oldest is complete. Kernel socket buffers are left to autotune (pinning a small
// SO_SNDBUF is what stalls Gloo on delayed ACKs; see shared/peers/README.md).
//
// Threads: as pipe.h (one user thread per pipe); TcpSendPipe is also touched by the
// progress thread, under its mutex. Errors name the peer rank; a closed or reset
// connection is kRemoteError at once, not after the timeout.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/wire.h"

namespace gyre {

class TcpProgress;

class TcpSendPipe final : public SendPipe {
 public:
  TcpSendPipe(Fd fd, int peer, size_t slots, size_t slotBytes, TcpProgress* progress);
  ~TcpSendPipe() override;

  std::byte* acquire(const WaitContext& ctx) override;
  void post(size_t bytes, const Tag& tag) override;
  void postDirect(const void* src, size_t bytes, const Tag& tag, const WaitContext& ctx) override;
  void flush(const WaitContext& ctx) override;
  size_t slotBytes() const override { return slotBytes_; }
  int peer() const override { return peer_; }

  // For TcpProgress: whether posted bytes are still unsent, the socket, and one
  // non-blocking attempt to send them (returns true if anything remains).
  bool hasPending() const;
  int fd() const { return fd_.get(); }
  bool writePending();

 private:
  bool writePendingLocked();  // requires mu_
  void publish(const std::byte* payload, size_t bytes, const Tag& tag);
  template <typename Pred>
  void waitUntil(Pred pred, const WaitContext& ctx, const char* what);
  void throwIfFailed() const;

  Fd fd_;
  const int peer_;
  const size_t slots_;
  const size_t slotBytes_;
  TcpProgress* const progress_;
  std::vector<std::byte> buffer_;     // slots_ * slotBytes_, allocated once
  std::vector<FrameHeader> headers_;  // one per slot
  std::vector<const std::byte*> payloads_;  // per slot: its buffer, or the user's (direct)
  std::atomic<uint64_t> posted_{0};     // written by the user thread
  std::atomic<uint64_t> completed_{0};  // slots fully in the kernel; under mu_
  size_t offset_ = 0;                   // bytes of slot `completed_` already sent; under mu_
  std::mutex mu_;
  std::atomic<bool> failed_{false};
  ErrorCode failCode_ = ErrorCode::kRemoteError;  // set once before failed_
  std::string failMessage_;
};

class TcpRecvPipe final : public RecvPipe {
 public:
  TcpRecvPipe(Fd fd, int peer, size_t slots, size_t slotBytes);

  Slice wait(const WaitContext& ctx) override;
  void release() override;
  Slice waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) override;
  size_t slotBytes() const override { return slotBytes_; }
  int peer() const override { return peer_; }

 private:
  // Reads whatever the socket has into free slots; throws on EOF, reset or a bad frame.
  void readAvailable();
  // Reads into the current frame's header only; true once it is complete.
  bool readHeader();
  // Waits for readiness of the socket for one slice of the wait loop.
  void waitReadable(const WaitContext& ctx, Clock::time_point spinUntil);
  [[noreturn]] void throwClosed(int err) const;

  Fd fd_;
  const int peer_;
  const size_t slots_;
  const size_t slotBytes_;
  std::vector<std::byte> buffer_;
  std::vector<FrameHeader> headers_;
  uint64_t received_ = 0;  // complete frames
  uint64_t released_ = 0;  // frames handed back; frame released_ is the next wait()
  size_t partial_ = 0;     // bytes of frame `received_` read so far (header + payload)
};

}  // namespace gyre
