#include "cuda/ipc_collectives.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "base/error.h"
#include "cuda/ipc_peers.h"
#include "cuda_kernels/device_reduce.h"

namespace gyre {
namespace {

// One collective's enqueueing: checked calls, and the start every round shares.
class Enqueue {
 public:
  Enqueue(IpcPeers& peers, CUstream_st* stream, const std::string& what)
      : peers_(peers), stream_(stream), what_(what), me_(peers.rank()), n_(peers.size()) {
    check(peers_.begin(stream_, &call_));
  }
  void finish() { check(peers_.end(stream_, &call_)); }

  void check(int err) {
    if (err != 0) {
      cudaGetLastError();
      fail(ErrorCode::kSystemError, "rank {}: {}: {} failed with error {}", me_, what_, call_, err);
    }
  }
  void copy(void* dst, const void* src, size_t bytes) {
    if (bytes == 0) return;
    // cudaMemcpyDefault: the caller's buffers may be pinned host or managed memory too.
    call_ = "cudaMemcpyAsync";
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  // The start of every round, after its input (if any) is in the own slot: the peers
  // learn it, and this stream waits until every peer has reached the same point.
  void readyAndWaitAll(uint32_t round) {
    check(peers_.signalPeers(stream_, IpcPeers::kReady, round, &call_));
    for (int p = 0; p < n_; ++p) {
      if (p != me_) check(peers_.waitPeer(stream_, IpcPeers::kReady, p, round, &call_));
    }
  }
  // dst = src(0) op src(1) ... op src(n-1), in rank order; avg finalised at the last.
  template <typename Src>
  void reduceInRankOrder(char* dst, Src src, size_t count, DataType dtype, ReduceOp op) {
    if (count == 0) return;
    for (int q = 1; q < n_; ++q) {
      const void* a = q == 1 ? src(0) : dst;
      const uint32_t divisor = q == n_ - 1 && op == ReduceOp::kAvg ? static_cast<uint32_t>(n_) : 0;
      deviceReduceCopy(dst, nullptr, a, src(q), count, dtype, op, divisor, stream_);
    }
  }

  IpcPeers& peers_;
  CUstream_st* const stream_;
  const std::string& what_;
  const char* call_ = "";
  const int me_;
  const int n_;
};

// Chunks start 16 bytes apart (multiples of it), so the kernels load whole vectors.
size_t alignElements(DataType dtype) { return std::max<size_t>(1, 16 / dtypeSize(dtype)); }

}  // namespace

void ipcAllReduce(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                  DataType dtype, ReduceOp op, CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  const int n = q.n_, me = q.me_;
  const size_t esize = dtypeSize(dtype);
  const size_t perRound = peers.slotBytes() / esize;
  const size_t align = alignElements(dtype);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  for (size_t first = 0; first < count; first += perRound) {
    const size_t m = std::min(perRound, count - first);
    const uint32_t round = peers.nextRound();
    const int s = IpcPeers::slot(round);
    const size_t chunk = ((m + n - 1) / n + align - 1) / align * align;
    auto lo = [&](int r) { return std::min(static_cast<size_t>(r) * chunk, m); };
    auto len = [&](int r) { return std::min(chunk, m - lo(r)); };

    q.copy(peers.stage(me, s), send + first * esize, m * esize);
    q.readyAndWaitAll(round);
    // Reduce-scatter: my chunk from every rank's slot; then into my slot for the others.
    const size_t offset = lo(me) * esize;
    char* mine = recv + first * esize + offset;
    q.reduceInRankOrder(mine, [&](int r) { return peers.stage(r, s) + offset; }, len(me), dtype, op);
    q.copy(peers.stage(me, s) + offset, mine, len(me) * esize);
    q.check(peers.signalPeers(stream, IpcPeers::kReduced, round, &q.call_));
    // All-gather: every peer's reduced chunk from its slot.
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      q.check(peers.waitPeer(stream, IpcPeers::kReduced, p, round, &q.call_));
      q.copy(recv + (first + lo(p)) * esize, peers.stage(p, s) + lo(p) * esize, len(p) * esize);
    }
  }
  q.finish();
}

void ipcAllGather(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                  DataType dtype, CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  const size_t esize = dtypeSize(dtype);
  const size_t perRound = peers.slotBytes() / esize;
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  for (size_t first = 0; first < count; first += perRound) {
    const size_t m = std::min(perRound, count - first);
    const uint32_t round = peers.nextRound();
    const int s = IpcPeers::slot(round);
    q.copy(peers.stage(q.me_, s), send + first * esize, m * esize);
    q.readyAndWaitAll(round);
    // Every block from its rank's slot, the own one too (in place, sendbuf is that block).
    for (int r = 0; r < q.n_; ++r) {
      q.copy(recv + (static_cast<size_t>(r) * count + first) * esize, peers.stage(r, s), m * esize);
    }
  }
  q.finish();
}

namespace {

// The elements per block and round of the collectives that stage one piece per rank.
size_t perBlock(const IpcPeers& peers, DataType dtype) {
  const size_t align = alignElements(dtype);
  const size_t esize = dtypeSize(dtype);
  return std::max(align, peers.slotBytes() / esize / static_cast<size_t>(peers.size()) / align * align);
}

// The rounds of reduce-scatter and all-to-all: each stages a chunk of every destination
// block of `send` (count elements a block) in this rank's slot, waits for every rank's,
// and hands `collect` the round's first element, its length and the slot.
template <typename Collect>
void blockRounds(Enqueue& q, IpcPeers& peers, const char* send, size_t count, DataType dtype,
                 Collect&& collect) {
  const size_t esize = dtypeSize(dtype), block = perBlock(peers, dtype);
  for (size_t first = 0; first < count; first += block) {
    const size_t m = std::min(block, count - first);
    const uint32_t round = peers.nextRound();
    const int s = IpcPeers::slot(round);
    for (int b = 0; b < q.n_; ++b) {
      q.copy(peers.stage(q.me_, s) + static_cast<size_t>(b) * block * esize,
             send + (static_cast<size_t>(b) * count + first) * esize, m * esize);
    }
    q.readyAndWaitAll(round);
    collect(first, m, s, static_cast<size_t>(q.me_) * block * esize);  // offset of my block
  }
}

}  // namespace

void ipcReduceScatter(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                      DataType dtype, ReduceOp op, CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  const size_t esize = dtypeSize(dtype);
  auto* recv = static_cast<char*>(recvbuf);
  blockRounds(q, peers, static_cast<const char*>(sendbuf), count, dtype,
              [&](size_t first, size_t m, int s, size_t offset) {
                q.reduceInRankOrder(recv + first * esize,
                                    [&](int r) { return peers.stage(r, s) + offset; }, m, dtype, op);
              });
  q.finish();
}

void ipcBroadcast(IpcPeers& peers, void* buffer, size_t count, DataType dtype, int root,
                  CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  const size_t esize = dtypeSize(dtype);
  const size_t perRound = peers.slotBytes() / esize;
  auto* buf = static_cast<char*>(buffer);
  for (size_t first = 0; first < count; first += perRound) {
    const size_t m = std::min(perRound, count - first);
    const uint32_t round = peers.nextRound();
    const int s = IpcPeers::slot(round);
    if (q.me_ == root) q.copy(peers.stage(root, s), buf + first * esize, m * esize);
    q.readyAndWaitAll(round);
    if (q.me_ != root) q.copy(buf + first * esize, peers.stage(root, s), m * esize);
  }
  q.finish();
}

void ipcAllToAll(IpcPeers& peers, const void* sendbuf, void* recvbuf, size_t count,
                 DataType dtype, CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  const size_t esize = dtypeSize(dtype);
  auto* recv = static_cast<char*>(recvbuf);
  blockRounds(q, peers, static_cast<const char*>(sendbuf), count, dtype,
              [&](size_t first, size_t m, int s, size_t offset) {
                for (int r = 0; r < q.n_; ++r) {
                  q.copy(recv + (static_cast<size_t>(r) * count + first) * esize,
                         peers.stage(r, s) + offset, m * esize);
                }
              });
  q.finish();
}

size_t ipcAllToAllvPerRound(const IpcPeers& peers, DataType dtype) { return perBlock(peers, dtype); }

void ipcAllToAllv(IpcPeers& peers, const void* sendbuf, const size_t* sendCounts,
                  const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                  const size_t* recvDispls, DataType dtype, size_t rounds, CUstream_st* stream,
                  const std::string& what) {
  Enqueue q(peers, stream, what);
  const int n = q.n_, me = q.me_;
  const size_t esize = dtypeSize(dtype);
  const size_t block = perBlock(peers, dtype);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  // The part of a block of `total` elements that round k moves.
  auto part = [&](size_t total, size_t k) {
    const size_t first = k * block;
    return first >= total ? size_t{0} : std::min(block, total - first);
  };
  for (size_t k = 0; k < rounds; ++k) {
    const uint32_t round = peers.nextRound();
    const int s = IpcPeers::slot(round);
    for (int b = 0; b < n; ++b) {
      q.copy(peers.stage(me, s) + static_cast<size_t>(b) * block * esize,
             send + (sendDispls[b] + k * block) * esize, part(sendCounts[b], k) * esize);
    }
    q.readyAndWaitAll(round);
    const size_t offset = static_cast<size_t>(me) * block * esize;
    for (int r = 0; r < n; ++r) {
      q.copy(recv + (recvDispls[r] + k * block) * esize, peers.stage(r, s) + offset,
             part(recvCounts[r], k) * esize);
    }
  }
  q.finish();
}

void ipcSendRecv(IpcPeers& peers, const void* sendbuf, size_t sendCount, int sendPeer,
                 void* recvbuf, size_t recvCount, int recvPeer, DataType dtype,
                 CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  const size_t esize = dtypeSize(dtype);
  const size_t chunk = peers.slotBytes() / esize;
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  const size_t sendChunks = sendPeer < 0 ? 0 : (sendCount + chunk - 1) / chunk;
  const size_t recvChunks = recvPeer < 0 ? 0 : (recvCount + chunk - 1) / chunk;
  for (size_t k = 0; k < std::max(sendChunks, recvChunks); ++k) {
    const size_t first = k * chunk;
    if (k < sendChunks) {
      // The p2p slot is free once the receiver of the previous chunk took it.
      const auto [lastPeer, lastChunk] = peers.lastSent();
      if (lastPeer >= 0) q.check(peers.waitPeer(stream, IpcPeers::kTaken, lastPeer, lastChunk, &q.call_));
      q.copy(peers.p2pStage(q.me_), send + first * esize, std::min(chunk, sendCount - first) * esize);
      q.check(peers.signalPeer(stream, IpcPeers::kSent, sendPeer, peers.nextSent(sendPeer), &q.call_));
    }
    if (k < recvChunks) {
      const uint32_t c = peers.nextReceived(recvPeer);
      q.check(peers.waitPeer(stream, IpcPeers::kSent, recvPeer, c, &q.call_));
      q.copy(recv + first * esize, peers.p2pStage(recvPeer), std::min(chunk, recvCount - first) * esize);
      q.check(peers.signalPeer(stream, IpcPeers::kTaken, recvPeer, c, &q.call_));
    }
  }
  q.finish();
}

void ipcBarrier(IpcPeers& peers, CUstream_st* stream, const std::string& what) {
  Enqueue q(peers, stream, what);
  q.readyAndWaitAll(peers.nextRound());
  q.finish();
}

}  // namespace gyre
