#include "collectives/all_to_all.h"

#include "collectives/point_to_point.h"
#include "host_kernels/reduce.h"

namespace gyre {

void pairwiseAllToAll(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                      const CollectiveCall& call, const void* sendbuf, void* recvbuf) {
  const size_t blockBytes = call.count * dtypeSize(call.dtype);
  const auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  auto block = [&](auto* buf, int r) { return buf + static_cast<size_t>(r) * blockBytes; };
  if (blockBytes && base.moveBytes) copy2(block(out, rank), nullptr, block(in, rank), blockBytes);
  // Every block carries the collective's own Tag (kind, communicator sequence, count,
  // dtype). That is enough: the pipe from rank s to rank d carries exactly one block of
  // each all-to-all (in step (d - s) mod n on both ranks), so the step is fixed by the
  // pipe, and a rank that runs a different call (count, dtype, collective or sequence)
  // sends a different Tag and fails the receiver with kMismatch.
  for (int k = 1; k < size; ++k) {
    const int to = (rank + k) % size;
    const int from = (rank - k + size) % size;
    sendRecv(base, pipes, call, to, block(in, to), call, from, block(out, from));
  }
}

void pairwiseAllToAllv(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                       const CollectiveCall& call, const PeerBlocks& blocks, const void* sendbuf,
                       void* recvbuf) {
  const size_t elem = dtypeSize(call.dtype);
  const auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  const size_t own = blocks.sendCounts[rank] * elem;
  if (own && base.moveBytes) {
    copy2(out + blocks.recvDispls[rank] * elem, nullptr, in + blocks.sendDispls[rank] * elem, own);
  }
  CollectiveCall send = call, recv = call;
  for (int k = 1; k < size; ++k) {
    const int to = (rank + k) % size;
    const int from = (rank - k + size) % size;
    send.count = blocks.sendCounts[to];
    recv.count = blocks.recvCounts[from];
    sendRecv(base, pipes, send, to, in + blocks.sendDispls[to] * elem, recv, from,
             out + blocks.recvDispls[from] * elem);
  }
}

}  // namespace gyre
