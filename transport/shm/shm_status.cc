// The status slots of an shm pipe's header (see shm_pipe.h, "Status").
#include <cstring>
#include <iterator>

#include "transport/shm/shm_pipe.h"

namespace gyre {
namespace shm_layout {

void writeStatus(StatusSlot& slot, const PeerStatus& status) {
  StatusRecord record = encodeStatus(status);
  uint64_t words[sizeof(StatusRecord) / sizeof(uint64_t)];
  std::memcpy(words, &record, sizeof(words));
  // Seqlock: odd version first; each word a release store, so a reader that sees a new
  // word also sees the odd version; the even version last.
  const uint32_t v = slot.version.load(std::memory_order_relaxed);
  slot.version.store(v + 1, std::memory_order_relaxed);
  for (size_t i = 0; i < std::size(words); ++i) {
    slot.words[i].store(words[i], std::memory_order_release);
  }
  slot.version.store(v + 2, std::memory_order_release);
}

bool readStatus(const StatusSlot& slot, PeerStatus* out) {
  const uint32_t v = slot.version.load(std::memory_order_acquire);
  if (v == 0 || (v & 1) != 0) return false;
  uint64_t words[sizeof(StatusRecord) / sizeof(uint64_t)];
  for (size_t i = 0; i < std::size(words); ++i) {
    words[i] = slot.words[i].load(std::memory_order_acquire);
  }
  if (slot.version.load(std::memory_order_relaxed) != v) return false;
  // The other process wrote it: check it like bytes from a socket.
  return !checkStatusRecord(words, sizeof(words), 0, out).has_value();
}

}  // namespace shm_layout
}  // namespace gyre
