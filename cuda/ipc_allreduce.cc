#include "cuda/ipc_allreduce.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "base/error.h"
#include "cuda/ipc_peers.h"
#include "cuda_kernels/device_reduce.h"

namespace gyre {

void ipcAllReduce(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                  DataType dtype, ReduceOp op, CUstream_st* stream, const std::string& what) {
  const int n = peers.size();
  const int me = peers.rank();
  const size_t esize = dtypeSize(dtype);
  const size_t perRound = peers.slotBytes() / esize;
  // Chunks start 16 bytes apart (multiples of it), so the kernels load whole vectors.
  const size_t align = std::max<size_t>(1, 16 / esize);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  const char* call = "";
  auto check = [&](int err) {
    if (err != 0) {
      cudaGetLastError();
      fail(ErrorCode::kSystemError, "rank {}: {}: {} failed with error {}", me, what, call, err);
    }
  };
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    // cudaMemcpyDefault: the caller's buffers may be pinned host or managed memory too.
    call = "cudaMemcpyAsync";
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  };

  check(peers.begin(stream, &call));
  for (size_t first = 0; first < count; first += perRound) {
    const size_t m = std::min(perRound, count - first);
    const uint32_t round = peers.nextRound();
    const int s = IpcPeers::slot(round);
    const size_t chunk = ((m + n - 1) / n + align - 1) / align * align;
    auto lo = [&](int q) { return std::min(static_cast<size_t>(q) * chunk, m); };
    auto len = [&](int q) { return std::min(chunk, m - lo(q)); };

    // This slot held round - 2, which no peer reads any more: each peer's kReduced of
    // round - 1, waited for below in that round, comes after its whole round - 2 on its
    // stream. (With one slot, a rank would need the peers' "gathered" signal here.)
    copy(peers.stage(me, s), send + first * esize, m * esize);
    check(peers.signalPeers(stream, IpcPeers::kReady, round, &call));

    // Reduce-scatter: my chunk from every rank's slot, in rank order.
    for (int p = 0; p < n; ++p) {
      if (p != me) check(peers.waitPeer(stream, IpcPeers::kReady, p, round, &call));
    }
    if (const size_t mine = len(me); mine > 0) {
      const size_t offset = lo(me) * esize;
      char* dst = recv + first * esize + offset;
      for (int q = 1; q < n; ++q) {
        const void* a = q == 1 ? peers.stage(0, s) + offset : dst;
        const uint32_t divisor = q == n - 1 && op == ReduceOp::kAvg ? static_cast<uint32_t>(n) : 0;
        deviceReduceCopy(dst, nullptr, a, peers.stage(q, s) + offset, mine, dtype, op, divisor,
                         stream);
      }
      copy(peers.stage(me, s) + offset, dst, mine * esize);
    }
    check(peers.signalPeers(stream, IpcPeers::kReduced, round, &call));

    // All-gather: every peer's reduced chunk from its slot.
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      check(peers.waitPeer(stream, IpcPeers::kReduced, p, round, &call));
      if (const size_t theirs = len(p); theirs > 0) {
        copy(recv + (first + lo(p)) * esize, peers.stage(p, s) + lo(p) * esize, theirs * esize);
      }
    }
  }
  check(peers.end(stream, &call));
}

}  // namespace gyre
