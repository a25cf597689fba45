// The inter-host link probe run at communicator creation: two ranks on different hosts
// (the leaders of hosts 0 and 1) measure the pipe between them, so that the two-level
// cost model (collectives/topology_choice.h) uses this cluster's alpha and bandwidth
// instead of constants measured elsewhere.
//
//   latency    the initiator sends 8 bytes and waits for 8 back, kPings times; alpha =
//              the median round trip / 2 (the first round, which wakes both, dropped)
//   bandwidth  the initiator streams kBulkBytes in slot-sized slices; the responder
//              stamps each slice's arrival and fits bytes over time (least squares)
//              across the second half only, so that the link's burst (tbf's bucket, a
//              NIC's queue) and the connection's slow start are not counted as
//              bandwidth (0 with fewer than 4 slices: slots over 512 KiB); then it
//              answers 8 bytes, and the initiator takes kBulkBytes / (first send to
//              answer - alpha). A responder that waits for a core while the stream sits
//              in its socket buffer sees the slices arrive in a rush (the slope too
//              high); the whole-stream time only errs long (the burst aside). The model
//              takes the smaller of the two.
//
// Over the communicator's real pipes with the primitives; a probe-only tag (seq
// kProbeSeq, never a collective's) so nothing of it can be taken for a collective's
// slice. Bounded: kBulkBytes / link rate + kPings round trips (2 MiB: 17 ms at
// 1 Gbit/s, 0.2 ms at 100 Gbit/s), every wait bounded by the context's timeout.
//
// Contract: both ranks call it with the same arguments (each gets the half it
// measures, the other field 0); throws gyre::Error as the primitives do.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/primitives.h"

namespace gyre {

struct LinkProbeResult {
  double alphaUs = 0;           // initiator: half the median round trip
  double streamBytesPerUs = 0;  // initiator: kBulkBytes / (first send to the answer - alpha)
  double bytesPerUs = 0;        // responder: the slope over the stream's second half
};

inline constexpr uint32_t kProbeSeq = 0xfffffff0u;
inline constexpr int kPings = 9;
inline constexpr size_t kBulkBytes = 2u << 20;

LinkProbeResult probeLink(const PrimitiveContext& base, const PeerPipes& pipes, int rank,
                          int initiator, int responder);

}  // namespace gyre
