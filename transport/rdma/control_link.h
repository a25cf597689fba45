// ControlLink: the TCP connection beside an rdma pipe, its status/abort channel and its
// liveness signal (transport/rdma/rdma_pipe.h says why the status does not go over the QP).
//
// Both directions carry only control frames (transport/tcp/tcp_control.h: FrameHeader +
// StatusRecord). send() writes one whole frame, waiting for socket room at most
// kAbortSendBudget (a peer that does not read cannot stall us); poll() reads what has
// arrived without blocking and records the peer's latest kWaiting, its kAborted, or
// the end of the stream (EOF, reset: the peer process is gone).
//
// Threads: send() may come from any thread (internal mutex); poll() and the getters
// from the pipe's user thread only.
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "transport/pipe.h"
#include "transport/socket.h"
#include "transport/tcp/tcp_control.h"

namespace gyre {

class ControlLink {
 public:
  ControlLink(Fd fd, int peer, int worldSize);

  // Returns false when the frame could not be written whole (peer gone or not reading).
  bool send(const PeerStatus& status);
  void shutdownWrite();
  // Reads what arrived; throws kRemoteError on a malformed frame.
  void poll();

  int fd() const { return fd_.get(); }
  bool closed() const { return closed_; }                 // EOF or reset seen
  bool reset() const { return reset_; }
  const std::optional<PeerStatus>& waiting() const { return waiting_; }
  const std::optional<PeerStatus>& aborted() const { return aborted_; }

 private:
  Fd fd_;
  const int peer_;
  const int worldSize_;
  std::mutex writeMu_;
  bool writeBroken_ = false;  // under writeMu_: a frame went out partly, the stream is dead
  ControlReader reader_;
  bool closed_ = false;
  bool reset_ = false;
  std::optional<PeerStatus> waiting_;
  std::optional<PeerStatus> aborted_;
};

}  // namespace gyre
