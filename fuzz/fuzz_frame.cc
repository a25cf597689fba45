// libFuzzer target: a frame header and the status record of a control frame
// (transport/wire.h: checkFrameHeader, checkStatusRecord). Input: 32 header bytes, then
// the record. Properties: an accepted data frame fits the slot, an accepted control
// frame holds exactly one record; an accepted status has known values, ranks in range
// and a printable reason within its bound, and encodes back to an equivalent record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "transport/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kSlot = 4096;
  const size_t headerBytes = size < sizeof(gyre::FrameHeader) ? size : sizeof(gyre::FrameHeader);
  gyre::FrameHeader h;
  if (!gyre::checkFrameHeader(data, headerBytes, kSlot, &h)) {
    if (h.isControl() ? h.bytes != sizeof(gyre::StatusRecord) : h.bytes > kSlot) std::abort();
  }
  const uint8_t* rest = data + headerBytes;
  const size_t restBytes = size - headerBytes;
  for (int world : {0, 1, 8}) {
    gyre::PeerStatus s;
    if (gyre::checkStatusRecord(rest, restBytes, world, &s)) continue;
    if (s.reason.size() > gyre::PeerStatus::kMaxReasonBytes) std::abort();
    for (char c : s.reason) {
      if (c < 0x20 || c > 0x7e) std::abort();
    }
    for (int rank : {s.writer, s.suspect, s.reporter}) {
      if (rank < -1 || (world > 0 && rank >= world)) std::abort();
    }
    gyre::StatusRecord again = gyre::encodeStatus(s);
    gyre::PeerStatus back;
    if (gyre::checkStatusRecord(&again, sizeof(again), world, &back)) std::abort();
    if (back.reason != s.reason || back.suspect != s.suspect || back.state != s.state) std::abort();
  }
  return 0;
}
