#include "transport/wire.h"

#include <cstring>

#include <fmt/format.h>

namespace gyre {

std::array<uint8_t, kTokenBytes> tokenBytes(const std::string& token) {
  std::array<uint8_t, kTokenBytes> out{};
  std::memcpy(out.data(), token.data(), std::min(token.size(), out.size()));
  return out;
}

std::optional<std::string> checkHello(const void* bytes, size_t n, const HelloExpectation& expect,
                                      Hello* out) {
  if (n != sizeof(Hello)) return fmt::format("handshake of {} bytes, expected {}", n, sizeof(Hello));
  Hello h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.magic != Hello{}.magic) return std::string("wrong magic (not a gyre connection)");
  if (h.version != kProtocolVersion) {
    return fmt::format("protocol version {}, expected {}", h.version, kProtocolVersion);
  }
  if (h.token != expect.token) return std::string("wrong job token (a connection from another job?)");
  if (h.commId != expect.commId) {
    return fmt::format("communicator id {:#x}, expected {:#x}", h.commId, expect.commId);
  }
  if (h.sender < 0 || h.sender >= expect.worldSize) {
    return fmt::format("sender rank {} outside [0, {})", h.sender, expect.worldSize);
  }
  if (h.receiver != expect.receiver) {
    return fmt::format("addressed to rank {}, this is rank {}", h.receiver, expect.receiver);
  }
  if (h.channel != 0 || h.reserved != 0) return std::string("unknown channel");
  *out = h;
  return std::nullopt;
}

std::optional<std::string> checkFrameHeader(const void* bytes, size_t n, size_t slotBytes,
                                            FrameHeader* out) {
  if (n != sizeof(FrameHeader)) return fmt::format("frame header of {} bytes", n);
  FrameHeader h;
  std::memcpy(&h, bytes, sizeof(h));
  if (h.magic != FrameHeader::kMagic) return std::string("corrupt frame (wrong magic)");
  if (h.bytes > slotBytes) {
    return fmt::format("frame of {} bytes exceeds the slot size {}", h.bytes, slotBytes);
  }
  *out = h;
  return std::nullopt;
}

}  // namespace gyre
