#include "transport/pipe.h"

#include <cstring>

#include <fmt/format.h>

namespace gyre {

// Defaults for transports whose slots are already the cheapest path (shm: the slot is
// in the receiver's memory, so a copy into it is the one copy a hop needs).

void SendPipe::postDirect(const void* src, size_t bytes, const Tag& tag, const WaitContext& ctx) {
  std::byte* slot = acquire(ctx);
  if (bytes) std::memcpy(slot, src, bytes);
  post(bytes, tag);
}

Slice RecvPipe::waitInto(void* dst, size_t bytes, const Tag& expect, const WaitContext& ctx) {
  Slice s = wait(ctx);
  if (s.tag != expect || s.bytes != bytes) return s;
  if (bytes) std::memcpy(dst, s.data, bytes);
  release();
  s.data = static_cast<const std::byte*>(dst);
  return s;
}

std::string describePeerAbort(int peer, const PeerStatus& s) {
  return fmt::format("peer rank {} aborted: rank {} reported {}", peer, s.reporter,
                     s.reason.empty() ? std::string("a failure") : s.reason);
}

}  // namespace gyre
