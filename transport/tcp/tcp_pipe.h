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
// SO_SNDBUF is what stalls Gloo on delayed ACKs).
//
// Status (pipe.h): a published PeerStatus travels as a control frame (wire.h), from the
// sender between two data frames, from the receiver back on the otherwise unused
// direction of the connection; TcpProgress's thread reads those replies as they come,
// so a sender learns of a receiver that aborted or vanished even while it is idle.
// publish(kAborted) finishes the frame being written (at most kAbortSendBudget), sends
// the status and shuts the socket down: the peer reads everything sent before, then
// the status, then EOF.
//
// Encryption (GYRE_ENCRYPT=1, `keys` given): every frame in both directions is a sealed
// record (transport/tcp/tcp_records.h): the sender seals a slice into its slot at post()
// (postDirect copies into a slot, sealing on the way), the receiver reads the frame and
// its tag into a slot and opens it before anyone sees a byte (no direct read into the
// caller's buffer then). A record that fails fails the pipe naming the peer.
//
// Threads: as pipe.h (one user thread per pipe); TcpSendPipe is also touched by the
// progress thread, under its mutex; publish() may come from any thread. Errors name the
// peer rank; a closed or reset connection is kRemoteError at once, not after the
// timeout. After a wait threw, a pipe is only good for publish() and destruction.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/handshake.h"
#include "transport/tcp/tcp_control.h"
#include "transport/tcp/tcp_records.h"
#include "transport/wire.h"

namespace gyre {

class TcpProgress;

class TcpSendPipe final : public SendPipe {
 public:
  // worldSize bounds the ranks a peer may name in a status (0: unchecked).
  TcpSendPipe(Fd fd, int peer, size_t slots, size_t slotBytes, TcpProgress* progress,
              int worldSize = 0, const ConnectionKeys* keys = nullptr);
  ~TcpSendPipe() override;

  std::byte* acquire(const WaitContext& ctx) override;
  void post(size_t bytes, const Tag& tag) override;
  void postDirect(const void* src, size_t bytes, const Tag& tag, const WaitContext& ctx) override;
  void flush(const WaitContext& ctx) override;
  void publish(const PeerStatus& status) override;
  size_t slotBytes() const override { return slotBytes_; }
  int peer() const override { return peer_; }

  // For TcpProgress: whether posted bytes or a control frame are still unsent, the
  // socket, one non-blocking attempt to send (returns true if anything remains),
  // whether replies from the receiver are still to be read, and reading them.
  bool hasPending() const;
  int fd() const { return fd_.get(); }
  bool writePending();
  bool watchesReplies() const { return watchReplies_.load(std::memory_order_acquire); }
  void readReplies();

 private:
  bool writePendingLocked();  // requires mu_
  bool writeControlLocked();  // requires mu_; true when the control frame is fully out
  void readRepliesLocked();   // requires mu_
  void failLocked(ErrorCode code, std::string message);  // requires mu_
  void shutdownLocked();      // requires mu_
  void publishData(const std::byte* payload, size_t bytes, const Tag& tag);
  template <typename Pred>
  void waitUntil(Pred pred, const WaitContext& ctx, const char* what);
  void throwIfFailed();

  Fd fd_;
  const int peer_;
  const size_t slots_;
  const size_t slotBytes_;
  const int worldSize_;
  TcpProgress* const progress_;
  // slots_ * slotBytes_, allocated once and left untouched until used: a full mesh of
  // 512 KiB slots reserves more than a ring ever writes.
  std::unique_ptr<std::byte[]> buffer_;
  std::vector<FrameHeader> headers_;  // one per slot
  std::vector<const std::byte*> payloads_;  // per slot: its buffer, or the user's (direct)
  // GYRE_ENCRYPT: frames sealed with sealOut_, replies opened by replies_ with openIn_.
  std::unique_ptr<RecordCipher> sealOut_, openIn_;
  std::vector<RecordTag> tags_;  // per slot, sent after its payload
  size_t extra_ = 0;             // bytes after each payload: kRecordTagBytes when sealing
  std::atomic<uint64_t> posted_{0};     // written by the user thread
  std::atomic<uint64_t> completed_{0};  // slots fully in the kernel; under mu_
  size_t offset_ = 0;                   // bytes of slot `completed_` already sent; under mu_
  std::mutex mu_;
  // Control frames, under mu_: `queued_` waits for the next frame boundary, then moves
  // to `inFlight_` (controlSent_ bytes of it out). A newer status replaces a queued one.
  std::optional<ControlFrame> queued_, inFlight_;
  size_t controlSent_ = 0;
  // The control frame in flight as it goes on the wire (sealed, with its tag, when
  // encrypting), its size, and whether it is an abort.
  struct {
    ControlFrame frame;
    RecordTag tag;
  } controlWire_;
  size_t controlWireBytes_ = 0;
  bool controlAborts_ = false;
  uint64_t controlSeq_ = 0;  // control frames sealed so far
  bool closeAfterControl_ = false;  // the status in flight is kAborted
  bool closed_ = false;             // shut down after an abort; nothing more is written
  std::atomic<bool> controlPending_{false};
  // Replies from the receiver, under mu_.
  ControlReader replies_;
  std::optional<PeerStatus> peerStatus_;  // its latest kWaiting
  std::atomic<bool> watchReplies_{true};  // until EOF or an error on the return path
  std::atomic<bool> peerGone_{false};     // the return path ended: the receiver closed
  std::atomic<bool> failed_{false};
  std::atomic<bool> localAbort_{false};
  ErrorCode failCode_ = ErrorCode::kRemoteError;  // set once before failed_
  std::string failMessage_;
  std::optional<PeerStatus> failStatus_;  // the receiver's kAborted status, if that was it
};

class TcpRecvPipe final : public RecvPipe {
 public:
  TcpRecvPipe(Fd fd, int peer, size_t slots, size_t slotBytes, int worldSize = 0,
              const ConnectionKeys* keys = nullptr);

  Slice wait(const WaitContext& ctx) override;
  void release() override;
  Slice waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) override;
  void publish(const PeerStatus& status) override;
  size_t slotBytes() const override { return slotBytes_; }
  int peer() const override { return peer_; }

 private:
  // One step of reading the frame in progress: false when the socket has nothing more
  // now, the stream ended (closed_), or a data frame needs a slot that is not free.
  // Throws on a bad frame or status.
  bool readStep();
  void readAvailable();
  bool dataHeaderReady() const;
  // Throws what a wait must throw once no frame is left and the stream is over.
  [[noreturn]] void throwClosed() const;
  void waitReadable(const WaitContext& ctx, Clock::time_point since, Clock::time_point spinUntil);
  void flushRepliesLocked(Clock::time_point until);  // requires writeMu_

  Fd fd_;
  const int peer_;
  const size_t slots_;
  const size_t slotBytes_;
  const int worldSize_;
  std::unique_ptr<std::byte[]> buffer_;  // as the send pipe's
  std::vector<FrameHeader> headers_;
  uint64_t received_ = 0;  // complete frames
  uint64_t released_ = 0;  // frames handed back; frame released_ is the next wait()
  FrameHeader next_;       // the frame being read
  StatusRecord control_;   // its payload, when it is a control frame
  // GYRE_ENCRYPT: frames opened with openIn_ (their tags read into tagIn_), replies
  // sealed with sealOut_.
  std::unique_ptr<RecordCipher> openIn_, sealOut_;
  RecordTag tagIn_{};
  size_t extra_ = 0;
  uint64_t controlIn_ = 0;   // sealed control frames opened so far
  uint64_t controlOut_ = 0;  // replies sealed so far (under writeMu_)
  size_t partial_ = 0;     // bytes of it read so far (header + payload)
  bool closed_ = false;    // EOF or an error ends the stream (closeErr_: 0 = EOF)
  int closeErr_ = 0;
  std::optional<PeerStatus> peerStatus_;  // the sender's latest kWaiting
  std::optional<PeerStatus> peerAbort_;   // the sender's kAborted
  // The return path (statuses to the sender), under writeMu_.
  std::mutex writeMu_;
  std::vector<std::byte> unsent_;
  bool writeClosed_ = false;
  std::atomic<bool> localAbort_{false};
};

}  // namespace gyre
