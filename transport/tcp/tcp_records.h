// Sealed records on a tcp pipe connection (GYRE_ENCRYPT=1): AES-256-GCM over every
// frame's payload, the frame's header authenticated as additional data.
//
// Wire format when sealing: header (32 bytes, in the clear: magic, length, tag) |
// ciphertext of the payload (a slice, or a StatusRecord) | GCM tag (16 bytes). The nonce
// is never sent: kind (data 0, control 1) in byte 0, and the record's sequence number
// (little-endian, bytes 4-11) counted separately for data and control frames in each
// direction, so a record altered, reordered, replayed, dropped or moved between the two
// kinds fails its tag, and the pipe fails naming the peer. Each direction of each
// connection has its own key (transport/handshake.h, deriveConnectionKeys), so nonces
// never repeat under one key. Lengths, tags (the collective's fingerprint) and the
// timing of frames stay visible (docs/security.md).
//
// Thread safety: one RecordCipher per direction, used under the pipe's lock or by its
// one user thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/crypto.h"
#include "transport/wire.h"

namespace gyre {

inline constexpr size_t kRecordTagBytes = kAeadTagBytes;
using RecordTag = std::array<std::byte, kRecordTagBytes>;

enum class RecordKind : uint8_t { kData = 0, kControl = 1 };

class RecordCipher {
 public:
  explicit RecordCipher(const Key& key) : aead_(key) {}

  // Encrypts `n` bytes from `in` into `out` (may be equal).
  void seal(RecordKind kind, uint64_t seq, const FrameHeader& header, const std::byte* in,
            std::byte* out, size_t n, RecordTag& tag);
  // Decrypts `n` bytes in place; false when the record is not authentic.
  bool open(RecordKind kind, uint64_t seq, const FrameHeader& header, std::byte* data, size_t n,
            const RecordTag& tag);

 private:
  AeadKey aead_;
};

}  // namespace gyre
