#include "collectives/link_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/error.h"

namespace gyre {

LinkProbeResult probeLink(const PrimitiveContext& base, const PeerPipes& pipes, int rank,
                          int initiator, int responder) {
  if (rank != initiator && rank != responder) {
    fail(ErrorCode::kInternal, "rank {}: link probe between {} and {}", rank, initiator,
         responder);
  }
  const bool init = rank == initiator;
  const int peer = init ? responder : initiator;
  CollectiveCall call;
  call.kind = CollectiveKind::kBroadcast;
  call.dtype = DataType::kUint8;
  call.count = kBulkBytes;
  call.root = initiator;
  call.seq = kProbeSeq;
  PrimitiveContext ctx = linked(base, pipes, peer, peer);
  ctx.inspector = nullptr;  // not a collective: nothing for stall reports
  Primitives prims(ctx, call, 1);
  using Clock = std::chrono::steady_clock;
  LinkProbeResult result;

  uint64_t word = 0;
  std::vector<double> rtts;
  for (int i = 0; i < kPings; ++i) {
    if (init) {
      const auto start = Clock::now();
      prims.send(&word, sizeof word);
      prims.recv(&word, sizeof word);
      if (i > 0) rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    } else {
      prims.recv(&word, sizeof word);
      prims.send(&word, sizeof word);
    }
  }
  if (init) {
    std::sort(rtts.begin(), rtts.end());
    result.alphaUs = std::max(0.5, rtts[rtts.size() / 2] / 2);
  }

  std::vector<std::byte> buf(kBulkBytes);
  const size_t slice = std::min(prims.sliceElems(), kBulkBytes);
  const size_t slices = (kBulkBytes + slice - 1) / slice;
  std::vector<Clock::time_point> arrived;
  arrived.reserve(slices);
  for (size_t k = 0; k < slices; ++k) {
    const size_t len = std::min(slice, kBulkBytes - k * slice);
    if (init) {
      prims.send(buf.data() + k * slice, len);
    } else {
      prims.recv(buf.data() + k * slice, len);
      arrived.push_back(Clock::now());
    }
  }
  prims.flush();
  if (!init) {
    // From the end of the first quarter's last slice to the end of the stream.
    const size_t from = std::max<size_t>(1, slices / 4);
    if (slices > from) {
      const double us =
          std::chrono::duration<double, std::micro>(arrived.back() - arrived[from - 1]).count();
      const double bytes = static_cast<double>(kBulkBytes - from * slice);
      result.bytesPerUs = us > 0 ? bytes / us : 0;
    }
  }
  return result;
}

}  // namespace gyre
