#include "transport/wire.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace gyre {

std::optional<std::string> checkHello(const void* bytes, size_t n, const HelloExpectation& expect,
                                      Hello* out) {
  if (n != sizeof(Hello)) return fmt::format("handshake of {} bytes, expected {}", n, sizeof(Hello));
  Hello h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.magic != Hello{}.magic) return std::string("wrong magic (not a gyre connection)");
  if (h.version != kProtocolVersion) {
    return fmt::format("protocol version {}, expected {}", h.version, kProtocolVersion);
  }
  if (h.commId != expect.commId) {
    return fmt::format("communicator id {:#x}, expected {:#x}", h.commId, expect.commId);
  }
  if (h.sender < 0 || h.sender >= expect.worldSize) {
    return fmt::format("sender rank {} outside [0, {})", h.sender, expect.worldSize);
  }
  if (h.receiver != expect.receiver) {
    return fmt::format("addressed to rank {}, this is rank {}", h.receiver, expect.receiver);
  }
  if (h.channel >= expect.channels) {
    return fmt::format("unknown channel {} (this rank takes {} per pipe: GYRE_NSOCKS differs?)",
                       h.channel, expect.channels);
  }
  if (h.flags != expect.flags) {
    return fmt::format("flags {:#x}, expected {:#x} (GYRE_ENCRYPT differs?)", h.flags,
                       expect.flags);
  }
  *out = h;
  return std::nullopt;
}

std::optional<std::string> checkFrameHeader(const void* bytes, size_t n, size_t slotBytes,
                                            FrameHeader* out) {
  if (n != sizeof(FrameHeader)) return fmt::format("frame header of {} bytes", n);
  FrameHeader h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.magic == FrameHeader::kControlMagic) {
    if (h.bytes != sizeof(StatusRecord)) {
      return fmt::format("control frame of {} bytes, expected {}", h.bytes, sizeof(StatusRecord));
    }
    *out = h;
    return std::nullopt;
  }
  if (h.magic != FrameHeader::kMagic) return std::string("corrupt frame (wrong magic)");
  if (h.bytes > slotBytes) {
    return fmt::format("frame of {} bytes exceeds the slot size {}", h.bytes, slotBytes);
  }
  *out = h;
  return std::nullopt;
}

StatusRecord encodeStatus(const PeerStatus& s) {
  StatusRecord r;
  r.state = static_cast<uint8_t>(s.state);
  r.code = static_cast<uint8_t>(s.code);
  r.hops = s.hops;
  r.writer = s.writer;
  r.suspect = s.suspect;
  r.reporter = s.reporter;
  r.seq = s.seq;
  r.reasonBytes = static_cast<uint32_t>(std::min(s.reason.size(), r.reason.size()));
  std::memcpy(r.reason.data(), s.reason.data(), r.reasonBytes);
  return r;
}

std::optional<std::string> checkStatusRecord(const void* bytes, size_t n, int worldSize,
                                             PeerStatus* out) {
  if (n != sizeof(StatusRecord)) {
    return fmt::format("status record of {} bytes, expected {}", n, sizeof(StatusRecord));
  }
  StatusRecord r;
  std::memcpy(&r, bytes, sizeof(r));
  if (r.magic != StatusRecord::kMagic) return std::string("corrupt status record (wrong magic)");
  if (r.state < static_cast<uint8_t>(PeerStatus::State::kWaiting) ||
      r.state > static_cast<uint8_t>(PeerStatus::State::kAborted)) {
    return fmt::format("unknown status state {}", r.state);
  }
  if (r.code < static_cast<uint8_t>(ErrorCode::kInvalidArgument) ||
      r.code > static_cast<uint8_t>(ErrorCode::kInternal)) {
    return fmt::format("unknown error code {}", r.code);
  }
  for (int32_t rank : {r.writer, r.suspect, r.reporter}) {
    if (rank < -1 || (worldSize > 0 && rank >= worldSize)) {
      return fmt::format("rank {} outside [-1, {})", rank, worldSize);
    }
  }
  if (r.reasonBytes > r.reason.size()) {
    return fmt::format("reason of {} bytes exceeds {}", r.reasonBytes, r.reason.size());
  }
  PeerStatus s;
  s.state = static_cast<PeerStatus::State>(r.state);
  s.code = static_cast<ErrorCode>(r.code);
  s.hops = r.hops;
  s.writer = r.writer;
  s.suspect = r.suspect;
  s.reporter = r.reporter;
  s.seq = r.seq;
  s.reason.assign(r.reason.data(), r.reasonBytes);
  for (char& c : s.reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  *out = std::move(s);
  return std::nullopt;
}

}  // namespace gyre
