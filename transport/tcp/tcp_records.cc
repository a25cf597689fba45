#include "transport/tcp/tcp_records.h"

#include <cstring>

namespace gyre {
namespace {

std::array<uint8_t, kAeadNonceBytes> nonceOf(RecordKind kind, uint64_t seq) {
  std::array<uint8_t, kAeadNonceBytes> n{};
  n[0] = static_cast<uint8_t>(kind);
  for (int i = 0; i < 8; ++i) n[4 + i] = static_cast<uint8_t>(seq >> (8 * i));
  return n;
}

}  // namespace

void RecordCipher::seal(RecordKind kind, uint64_t seq, const FrameHeader& header,
                        const std::byte* in, std::byte* out, size_t n, RecordTag& tag) {
  aead_.seal(nonceOf(kind, seq), Bytes(&header, sizeof(header)),
             reinterpret_cast<const uint8_t*>(in), n, reinterpret_cast<uint8_t*>(out),
             reinterpret_cast<uint8_t*>(tag.data()));
}

bool RecordCipher::open(RecordKind kind, uint64_t seq, const FrameHeader& header, std::byte* data,
                        size_t n, const RecordTag& tag) {
  return aead_.open(nonceOf(kind, seq), Bytes(&header, sizeof(header)),
                    reinterpret_cast<const uint8_t*>(data), n, reinterpret_cast<uint8_t*>(data),
                    reinterpret_cast<const uint8_t*>(tag.data()));
}

}  // namespace gyre
