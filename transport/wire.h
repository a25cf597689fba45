// Wire formats of the transports: the connection handshake, the frame header that
// precedes every slice on a byte stream (tcp), and the status record (transport/pipe.h,
// PeerStatus) that travels in control frames (tcp) or in the segment header (shm).
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

// 2: the token gave way to a nonce, and the handshake became a challenge/response
// (transport/handshake.h): Hello, HelloChallenge, HelloProof, HelloReply.
inline constexpr uint32_t kProtocolVersion = 2;
inline constexpr size_t kHelloNonceBytes = 32;

// First bytes on every data connection, sent by the connecting (sending) side. Every
// field is bound into both MACs of the handshake that follows (transport/handshake.h).
struct Hello {
  std::array<char, 4> magic{'G', 'Y', 'R', 'E'};
  uint32_t version = kProtocolVersion;
  uint64_t commId = 0;
  int32_t sender = -1;
  int32_t receiver = -1;
  uint32_t channel = 0;  // which of the pipe's connections (GYRE_NSOCKS): 0..channels-1
  uint32_t flags = 0;    // kHelloEncrypt: records on this connection are sealed
  std::array<uint8_t, kHelloNonceBytes> nonce{};  // the connector's, fresh per connection
  static constexpr uint32_t kEncrypt = 1;
};
static_assert(sizeof(Hello) == 64, "Hello is part of the wire format");

// The accepting side's answer: status 0 = accepted. Anything else closes.
struct HelloReply {
  std::array<char, 4> magic{'G', 'Y', 'O', 'K'};
  uint32_t status = 0;
};
static_assert(sizeof(HelloReply) == 8, "HelloReply is part of the wire format");

// What the listener expects of a Hello; `worldSize` bounds the ranks.
struct HelloExpectation {
  uint64_t commId = 0;
  int32_t receiver = -1;
  int32_t worldSize = 0;
  uint32_t flags = 0;     // a Hello's flags must equal these (GYRE_ENCRYPT agrees)
  uint32_t channels = 1;  // connections per pipe: a Hello's channel lies in [0, channels)
};

// Decodes `n` bytes into a Hello and checks it. Returns the reason on failure
// ("wrong magic", "protocol version 7, expected 2", "communicator id ...", ...). The
// Hello proves nothing by itself: the challenge/response that follows authenticates it.
std::optional<std::string> checkHello(const void* bytes, size_t n, const HelloExpectation& expect,
                                      Hello* out);

// Header before each slice on a stream transport. A control frame (kControlMagic)
// carries one StatusRecord instead of a slice: it takes no slot and no credit, and it
// is the only kind of frame that may travel from a receiver back to its sender.
struct FrameHeader {
  uint32_t magic = kMagic;
  uint32_t bytes = 0;  // payload bytes that follow
  Tag tag;
  static constexpr uint32_t kMagic = 0x46525947;         // "GYRF"
  static constexpr uint32_t kControlMagic = 0x43525947;  // "GYRC"
  bool isControl() const { return magic == kControlMagic; }
};
static_assert(sizeof(FrameHeader) == 32, "FrameHeader is part of the wire format");

// Checks a received header against the receiving slot size: a data frame fits a slot, a
// control frame holds exactly one StatusRecord.
std::optional<std::string> checkFrameHeader(const void* bytes, size_t n, size_t slotBytes,
                                            FrameHeader* out);

// PeerStatus on the wire: fixed size, the reason NUL-padded.
struct StatusRecord {
  uint32_t magic = kMagic;
  uint8_t state = 0;  // PeerStatus::State
  uint8_t code = 0;   // gyre::ErrorCode (kAborted)
  uint8_t hops = 0;
  uint8_t reserved = 0;
  int32_t writer = -1;
  int32_t suspect = -1;
  int32_t reporter = -1;
  uint32_t seq = 0;
  uint32_t reasonBytes = 0;
  uint32_t reserved2 = 0;
  std::array<char, PeerStatus::kMaxReasonBytes> reason{};
  static constexpr uint32_t kMagic = 0x53525947;  // "GYRS"
};
static_assert(sizeof(StatusRecord) == 256, "StatusRecord is part of the wire format");

// Encodes a status; a longer reason is cut at kMaxReasonBytes.
StatusRecord encodeStatus(const PeerStatus& status);

// Decodes `n` bytes from a peer into a PeerStatus and checks every field: the state and
// code are known values, ranks lie in [-1, worldSize) (worldSize 0: any rank >= -1), the
// reason length fits; bytes of the reason outside printable ASCII become '?', so a peer
// cannot put control sequences into our logs. Returns the reason on failure.
std::optional<std::string> checkStatusRecord(const void* bytes, size_t n, int worldSize,
                                             PeerStatus* out);

}  // namespace gyre
