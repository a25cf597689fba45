// QueuePair: one RC queue pair with its own completion queue and completion channel, the
// verbs half of one rdma pipe end (transport/rdma/rdma_pipe.h).
//
// Life: construct (RESET, then INIT with `recvDepth` receives the owner posts itself),
// publish endpoint() to the peer through the bootstrap store, connect() with the peer's
// (RTR, then RTS, as ibv_rc_pingpong). Receives must be posted after INIT, as rxe insists.
//
// Completions: poll() reaps up to N work completions without blocking. sleep() is the
// "then sleep" half of spin-then-sleep: it arms the CQ, re-polls (no lost wake-up), and
// poll(2)s the completion channel together with one extra fd (the pipe's control socket)
// and the device's async event fd for at most 10 ms; an event found there is read into
// the device (RdmaDevice::readAsyncEvents), and failure() then says why this QP is done
// (or a completion or event channel the kernel closed: the device went away; either
// would otherwise wake every poll at once until the deadline). Retries are bounded (timeout 2^14 * 4.096 us, 7 retries), so a
// vanished peer turns into a completion error within a few seconds even without the
// socket telling us first.
//
// Threads: one thread at a time (the pipe's lock); the verbs calls themselves are
// thread-safe. Errors: kSystemError naming the verbs call and the peer rank.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>

#include "transport/rdma/verbs_device.h"

namespace gyre {

// What the peer needs to reach one end: its QP and where its memory is. Travels through
// the bootstrap store as hex text (encode/decode); decode() checks magic and sizes.
struct QpEndpoint {
  uint32_t magic = kMagic;
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t mtu = 0;        // ibv_mtu
  uint8_t ethernet = 0;   // RoCE: route by GID
  uint8_t gid[16] = {};
  uint64_t addr = 0;      // the registered memory the peer writes into
  uint32_t rkey = 0;
  uint32_t slots = 0;
  uint64_t slotBytes = 0;
  static constexpr uint32_t kMagic = 0x41445247;  // "GRDA"

  std::string encode() const;
  // Throws kRemoteError naming `peer` for text that is not a valid endpoint.
  static QpEndpoint decode(const std::string& text, int peer);
};

class QueuePair {
 public:
  QueuePair(std::shared_ptr<RdmaDevice> device, int peer, int sendDepth, int recvDepth);
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  // This end's QP fields (the caller adds addr/rkey/slots).
  QpEndpoint endpoint() const;
  void connect(const QpEndpoint& remote);

  ibv_qp* qp() const { return qp_; }
  int poll(ibv_wc* wc, int n);
  // Waits up to 10 ms (and not past `until`) for a completion event or `fd` readable.
  void sleep(int fd, std::chrono::steady_clock::time_point until);
  // Moves the QP to the error state (tests: "a QP forced into error"); outstanding work
  // then completes with IBV_WC_WR_FLUSH_ERR.
  void forceError();

  void postRecv(uint64_t wrId);
  // Why this QP cannot go on (a fatal async event, a closed completion channel), or empty.
  std::string failure() const;
  const RdmaDevice& device() const { return *device_; }

 private:
  std::shared_ptr<RdmaDevice> device_;
  int peer_;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  uint32_t psn_ = 0;
  bool armed_ = false;
  bool channelClosed_ = false;
};

}  // namespace gyre
