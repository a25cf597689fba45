// StripedTcpSendPipe / StripedTcpRecvPipe (see tcp_striped_pipe.h).
#include "transport/tcp/tcp_striped_pipe.h"

#include <algorithm>

namespace gyre {

size_t slotsPerLane(size_t slots, size_t lanes) {
  return std::max<size_t>(2, (slots + lanes - 1) / lanes);
}

std::unique_ptr<SendPipe> makeTcpSendPipe(std::vector<Fd> fds, int peer, size_t slots,
                                          size_t slotBytes, TcpProgress* progress, int worldSize,
                                          const std::vector<ConnectionKeys>& keys) {
  auto keysOf = [&](size_t i) { return i < keys.size() ? &keys[i] : nullptr; };
  if (fds.size() == 1) {
    return std::make_unique<TcpSendPipe>(std::move(fds[0]), peer, slots, slotBytes, progress,
                                         worldSize, keysOf(0));
  }
  const size_t perLane = slotsPerLane(slots, fds.size());
  std::vector<std::unique_ptr<TcpSendPipe>> lanes;
  for (size_t i = 0; i < fds.size(); ++i) {
    lanes.push_back(std::make_unique<TcpSendPipe>(std::move(fds[i]), peer, perLane, slotBytes,
                                                  progress, worldSize, keysOf(i)));
  }
  return std::make_unique<StripedTcpSendPipe>(std::move(lanes));
}

std::unique_ptr<RecvPipe> makeTcpRecvPipe(std::vector<Fd> fds, int peer, size_t slots,
                                          size_t slotBytes, int worldSize,
                                          const std::vector<ConnectionKeys>& keys) {
  auto keysOf = [&](size_t i) { return i < keys.size() ? &keys[i] : nullptr; };
  if (fds.size() == 1) {
    return std::make_unique<TcpRecvPipe>(std::move(fds[0]), peer, slots, slotBytes, worldSize,
                                         keysOf(0));
  }
  const size_t perLane = slotsPerLane(slots, fds.size());
  std::vector<std::unique_ptr<TcpRecvPipe>> lanes;
  for (size_t i = 0; i < fds.size(); ++i) {
    lanes.push_back(std::make_unique<TcpRecvPipe>(std::move(fds[i]), peer, perLane, slotBytes,
                                                  worldSize, keysOf(i)));
  }
  return std::make_unique<StripedTcpRecvPipe>(std::move(lanes));
}

StripedTcpSendPipe::StripedTcpSendPipe(std::vector<std::unique_ptr<TcpSendPipe>> lanes)
    : lanes_(std::move(lanes)) {
  if (lanes_.empty()) fail(ErrorCode::kInternal, "a striped tcp pipe needs at least one lane");
}

std::byte* StripedTcpSendPipe::acquire(const WaitContext& ctx) { return lane().acquire(ctx); }

void StripedTcpSendPipe::post(size_t bytes, const Tag& tag) {
  lane().post(bytes, tag);
  ++next_;
}

void StripedTcpSendPipe::postDirect(const void* src, size_t bytes, const Tag& tag,
                                    const WaitContext& ctx) {
  lane().postDirect(src, bytes, tag, ctx);
  ++next_;
}

void StripedTcpSendPipe::flush(const WaitContext& ctx) {
  for (auto& l : lanes_) l->flush(ctx);
}

void StripedTcpSendPipe::publish(const PeerStatus& status) {
  for (auto& l : lanes_) l->publish(status);
}

StripedTcpRecvPipe::StripedTcpRecvPipe(std::vector<std::unique_ptr<TcpRecvPipe>> lanes)
    : lanes_(std::move(lanes)) {
  if (lanes_.empty()) fail(ErrorCode::kInternal, "a striped tcp pipe needs at least one lane");
}

Slice StripedTcpRecvPipe::wait(const WaitContext& ctx) { return lane().wait(ctx); }

void StripedTcpRecvPipe::release() {
  lane().release();
  ++next_;
}

Slice StripedTcpRecvPipe::waitInto(void* dst, size_t bytes, const Tag& expect,
                                   const WaitContext& ctx) {
  Slice s = lane().waitInto(dst, bytes, expect, ctx);
  // Consumed (placed in dst) moves on to the next lane; otherwise the slice is still
  // held in its lane, and release() moves on.
  if (s.data == static_cast<const std::byte*>(dst)) ++next_;
  return s;
}

void StripedTcpRecvPipe::publish(const PeerStatus& status) {
  for (auto& l : lanes_) l->publish(status);
}

}  // namespace gyre
