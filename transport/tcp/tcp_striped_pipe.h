// Striped TCP pipes (GYRE_NSOCKS > 1): one directed pipe over several TCP connections
// ("lanes"), as NCCL_NSOCKS_PERTHREAD spreads a pipe's slices over sockets.
//
// Each lane is a complete TcpSendPipe / TcpRecvPipe on its own connection (tcp_pipe.h),
// with its own slots, frames, credits and status path. Slice s of the pipe travels on
// lane s mod N: the sender posts round-robin and the receiver waits round-robin, so the
// order of slices, the tags and the fingerprint checks are exactly those of one
// connection. What is not a slice goes on every lane: publish() (a status, kAborted
// included) is sent on each, so whichever lane the other end waits on it sees the
// status, and an abort closes every connection; flush() drains every lane.
//
// Failures: a lane whose connection closes, resets or carries a bad frame fails with
// the error a single connection gives (it names the peer rank); the pipe fails when its
// user reaches that lane, at most N - 1 slices later, and the rank's abort then closes
// the other lanes, so the peer fails too.
//
// Memory: each lane holds max(2, ceil(K / N)) slots of B bytes, so a pipe holds about
// the K x B of one connection (at least 2N slots).
//
// Threads: as pipe.h; publish() from any thread (each lane's publish is thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/tcp/tcp_pipe.h"

namespace gyre {

// Slots per lane for a pipe of `slots` slots over `lanes` connections.
size_t slotsPerLane(size_t slots, size_t lanes);

// The tcp pipe over `fds` (one per channel, in channel order): a plain TcpSendPipe /
// TcpRecvPipe of `slots` slots for one connection, a striped one for several.
// `keys` (GYRE_ENCRYPT): one per connection, at the same index as its fd; empty: plain.
std::unique_ptr<SendPipe> makeTcpSendPipe(std::vector<Fd> fds, int peer, size_t slots,
                                          size_t slotBytes, TcpProgress* progress, int worldSize,
                                          const std::vector<ConnectionKeys>& keys = {});
std::unique_ptr<RecvPipe> makeTcpRecvPipe(std::vector<Fd> fds, int peer, size_t slots,
                                          size_t slotBytes, int worldSize,
                                          const std::vector<ConnectionKeys>& keys = {});

class StripedTcpSendPipe final : public SendPipe {
 public:
  explicit StripedTcpSendPipe(std::vector<std::unique_ptr<TcpSendPipe>> lanes);

  std::byte* acquire(const WaitContext& ctx) override;
  void post(size_t bytes, const Tag& tag) override;
  void postDirect(const void* src, size_t bytes, const Tag& tag, const WaitContext& ctx) override;
  void flush(const WaitContext& ctx) override;
  void publish(const PeerStatus& status) override;
  size_t slotBytes() const override { return lanes_.front()->slotBytes(); }
  int peer() const override { return lanes_.front()->peer(); }
  size_t lanes() const { return lanes_.size(); }

 private:
  TcpSendPipe& lane() { return *lanes_[next_ % lanes_.size()]; }

  std::vector<std::unique_ptr<TcpSendPipe>> lanes_;
  uint64_t next_ = 0;  // slices posted; the user thread's only
};

class StripedTcpRecvPipe final : public RecvPipe {
 public:
  explicit StripedTcpRecvPipe(std::vector<std::unique_ptr<TcpRecvPipe>> lanes);

  Slice wait(const WaitContext& ctx) override;
  void release() override;
  Slice waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) override;
  void publish(const PeerStatus& status) override;
  size_t slotBytes() const override { return lanes_.front()->slotBytes(); }
  int peer() const override { return lanes_.front()->peer(); }
  size_t lanes() const { return lanes_.size(); }

 private:
  TcpRecvPipe& lane() { return *lanes_[next_ % lanes_.size()]; }

  std::vector<std::unique_ptr<TcpRecvPipe>> lanes_;
  uint64_t next_ = 0;  // slices consumed; the user thread's only
};

}  // namespace gyre
