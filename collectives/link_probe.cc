#include "collectives/link_probe.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/error.h"

namespace gyre {

LinkProbeResult probeLink(const PrimitiveContext& base, const PeerPipes& pipes, int rank,
                          int initiator, int responder) {
  if (rank != initiator && rank != responder) {
    fail(ErrorCode::kInternal, "rank {}: link probe between {} and {}", rank, initiator, responder);
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
      if (i > 0)
        rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
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
  const auto streamStart = Clock::now();
  for (size_t k = 0; k < slices; ++k) {
    const size_t len = std::min(slice, kBulkBytes - k * slice);
    if (init) {
      prims.send(buf.data() + k * slice, len);
    } else {
      prims.recv(buf.data() + k * slice, len);
      arrived.push_back(Clock::now());
    }
  }
  // The responder's 8-byte answer once it has every slice: the initiator's whole-stream
  // time, which a responder that waited for a core can only make longer.
  if (init) {
    prims.recv(&word, sizeof word);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - streamStart).count();
    result.streamBytesPerUs = static_cast<double>(kBulkBytes) / std::max(1.0, us - result.alphaUs);
  } else {
    prims.send(&word, sizeof word);
  }
  prims.flush();
  if (!init && slices >= 4) {
    // The slope of bytes over arrival time across the second half (least squares): the
    // steady rate, whatever burst or slow start the first half saw.
    const size_t from = slices / 2;
    double sumT = 0, sumB = 0, sumTT = 0, sumTB = 0;
    const double m = static_cast<double>(slices - from);
    for (size_t k = from; k < slices; ++k) {
      const double t =
          std::chrono::duration<double, std::micro>(arrived[k] - arrived[from]).count();
      const double b = static_cast<double>(std::min(kBulkBytes, (k + 1) * slice));
      sumT += t;
      sumB += b;
      sumTT += t * t;
      sumTB += t * b;
    }
    const double den = m * sumTT - sumT * sumT;
    result.bytesPerUs = den > 0 ? (m * sumTB - sumT * sumB) / den : 0;
  }
  return result;
}

}  // namespace gyre
