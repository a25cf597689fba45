// Wire formats of the transports: the connection handshake and the frame header
// that precedes every slice on a byte stream (tcp).
//
// Contract: fixed-size, little-endian (the only byte order gyre runs on), plain
// structs. The decode/validate functions are pure: they take the bytes received from
// a remote, check every field (magic, version, ranks against the world size, lengths
// against the slot size) and return a reason string for anything wrong, so that
// nothing a remote sends can make a rank read or write outside its buffers. They are
// the libFuzzer entry points for the transport.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "transport/pipe.h"

namespace gyre {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kTokenBytes = 32;

// First bytes on every data connection, sent by the connecting (sending) side.
struct Hello {
  std::array<char, 4> magic{'G', 'Y', 'R', 'E'};
  uint32_t version = kProtocolVersion;
  uint64_t commId = 0;
  int32_t sender = -1;
  int32_t receiver = -1;
  uint32_t channel = 0;  // which of the pipes between the two ranks (reserved: 0)
  uint32_t reserved = 0;
  std::array<uint8_t, kTokenBytes> token{};
};
static_assert(sizeof(Hello) == 64, "Hello is part of the wire format");

// The accepting side's answer: status 0 = accepted. Anything else closes.
struct HelloReply {
  std::array<char, 4> magic{'G', 'Y', 'O', 'K'};
  uint32_t status = 0;
};
static_assert(sizeof(HelloReply) == 8, "HelloReply is part of the wire format");

// Token bytes from the job token string (zero padded, truncated to 32 bytes).
std::array<uint8_t, kTokenBytes> tokenBytes(const std::string& token);

// What the listener expects of a Hello; `worldSize` bounds the ranks.
struct HelloExpectation {
  uint64_t commId = 0;
  int32_t receiver = -1;
  int32_t worldSize = 0;
  std::array<uint8_t, kTokenBytes> token{};
};

// Decodes `n` bytes into a Hello and checks it. Returns the reason on failure
// ("wrong magic", "protocol version 7, expected 1", "wrong job token", ...).
std::optional<std::string> checkHello(const void* bytes, size_t n, const HelloExpectation& expect,
                                      Hello* out);

// Header before each slice on a stream transport.
struct FrameHeader {
  uint32_t magic = kMagic;
  uint32_t bytes = 0;  // payload bytes that follow
  Tag tag;
  static constexpr uint32_t kMagic = 0x46525947;  // "GYRF"
};
static_assert(sizeof(FrameHeader) == 32, "FrameHeader is part of the wire format");

// Checks a received header against the receiving slot size.
std::optional<std::string> checkFrameHeader(const void* bytes, size_t n, size_t slotBytes,
                                            FrameHeader* out);

}  // namespace gyre
