// The argument checks of CudaCommunicator's calls (cuda/device_call_checks.h).
#include "cuda/device_call_checks.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "base/error.h"

namespace gyre {

std::string allReduceText(size_t count, DataType dtype, ReduceOp op, uint32_t seq) {
  return fmt::format("device allreduce #{} ({} {}, count {})", seq, dtypeName(dtype), opName(op),
                     count);
}

void checkCudaCall(int code, const char* call, const std::string& what, int rank) {
  const auto err = static_cast<cudaError_t>(code);
  if (err == cudaSuccess) return;
  cudaGetLastError();
  fail(ErrorCode::kSystemError, "rank {}: {}: {} failed: {} ({})", rank, what, call,
       cudaGetErrorString(err), cudaGetErrorName(err));
}

void checkAllReduceArgs(const void* sendbuf, const void* recvbuf, size_t count, DataType dtype,
                        ReduceOp op, uint32_t seq, int rank) {
  if (!isValid(dtype) || !isValid(op)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: device allreduce #{}: invalid dtype {} or op {}",
         rank, seq, static_cast<int>(dtype), static_cast<int>(op));
  }
  if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {}", rank,
         allReduceText(count, dtype, op, seq), sendbuf == nullptr ? "sendbuf" : "recvbuf");
  }
  if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: count is too large", rank,
         allReduceText(count, dtype, op, seq));
  }
}

void checkBuffers(const std::string& what, DataType dtype, size_t count, size_t blocks,
                  std::initializer_list<const void*> buffers, int rank) {
  if (!isValid(dtype)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: invalid dtype {}", rank, what,
         static_cast<int>(dtype));
  }
  for (const void* p : buffers) {
    if (count > 0 && p == nullptr) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null buffer", rank, what);
    }
  }
  if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype) / blocks) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: count is too large", rank, what);
  }
}

// A host pointer that CUDA does not know would make the copies fail later, on the worker
// or the device; say so now, in the caller's thread.
void checkDevicePointer(const void* p, const char* name, const std::string& what, int rank,
                        int device) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) cudaGetLastError();
  if (err != cudaSuccess || attr.type == cudaMemoryTypeUnregistered) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: {} {} is not memory CUDA knows (a plain host "
         "pointer? use Communicator for host buffers)", rank, what, name, p);
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: {} is on device {}, the communicator's is {}",
         rank, what, name, attr.device, device);
  }
}

void checkPeer(int peer, const std::string& what, int rank, int size) {
  if (peer == rank || peer >= size || peer < 0) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: peer {} is not another rank of {}", rank, what,
         peer, size);
  }
}

bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

AllToAllvArgs checkAllToAllvArgs(const void* sendbuf, const size_t* sendCounts,
                                 const size_t* sendDispls, const void* recvbuf,
                                 const size_t* recvCounts, const size_t* recvDispls,
                                 DataType dtype, const std::string& what, int rank, int size,
                                 int device) {
  if (sendCounts == nullptr || recvCounts == nullptr) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {}", rank, what,
         sendCounts == nullptr ? "sendCounts" : "recvCounts");
  }
  const size_t n = static_cast<size_t>(size), esize = dtypeSize(dtype);
  const auto me = static_cast<size_t>(rank);
  AllToAllvArgs a;
  a.sendCounts.assign(sendCounts, sendCounts + n);
  a.recvCounts.assign(recvCounts, recvCounts + n);
  auto displs = [&](const size_t* given, const std::vector<size_t>& counts) {
    std::vector<size_t> d(n);
    size_t run = 0;
    for (size_t p = 0; p < n; ++p) {
      d[p] = given != nullptr ? given[p] : run;
      run += counts[p];
    }
    return d;
  };
  a.sendDispls = displs(sendDispls, a.sendCounts);
  a.recvDispls = displs(recvDispls, a.recvCounts);
  const auto &sc = a.sendCounts, &rc = a.recvCounts, &sd = a.sendDispls, &rd = a.recvDispls;
  const size_t limit = (std::numeric_limits<size_t>::max() / 4) / esize;
  size_t sendLo = SIZE_MAX, sendHi = 0, recvLo = SIZE_MAX, recvHi = 0;
  std::vector<std::pair<size_t, size_t>> blocks;
  for (size_t p = 0; p < n; ++p) {
    if (sc[p] > limit || rc[p] > limit || sd[p] > limit || rd[p] > limit) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: a count or displacement is too large", rank,
           what);
    }
    if (sc[p] > 0) sendLo = std::min(sendLo, sd[p]), sendHi = std::max(sendHi, sd[p] + sc[p]);
    if (rc[p] > 0) {
      recvLo = std::min(recvLo, rd[p]), recvHi = std::max(recvHi, rd[p] + rc[p]);
      blocks.emplace_back(rd[p], rd[p] + rc[p]);
    }
    a.local = std::max({a.local, sc[p], rc[p]});
  }
  if (sc[me] != rc[me]) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: sendCounts[{}] = {} but recvCounts[{}] = {}: "
         "what a rank sends itself it receives", rank, what, rank, sc[me], rank, rc[me]);
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    if (blocks[i].first < blocks[i - 1].second) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: receive blocks overlap", rank, what);
    }
  }
  if (sendHi > 0 && recvHi > 0 && sendLo < sendHi && recvLo < recvHi &&
      overlap(static_cast<const char*>(sendbuf) + sendLo * esize, (sendHi - sendLo) * esize,
              static_cast<const char*>(recvbuf) + recvLo * esize, (recvHi - recvLo) * esize)) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: the send blocks overlap the receive blocks",
         rank, what);
  }
  a.sends = sendHi > 0;
  a.receives = recvHi > 0;
  if (a.sends && sendbuf == nullptr) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: null sendbuf", rank, what);
  }
  if (a.receives && recvbuf == nullptr) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: null recvbuf", rank, what);
  }
  if (a.sends) checkDevicePointer(sendbuf, "sendbuf", what, rank, device);
  if (a.receives) checkDevicePointer(recvbuf, "recvbuf", what, rank, device);
  return a;
}

uint64_t checkSharedCounts(const std::vector<uint64_t>& all, size_t n, const std::string& what,
                           int rank) {
  uint64_t largest = 0;
  for (size_t s = 0; s < n; ++s) {
    for (size_t r = 0; r < n; ++r) {
      const uint64_t sends = all[s * 2 * n + r], expects = all[r * 2 * n + n + s];
      if (sends != expects) {
        fail(ErrorCode::kMismatch, "rank {}: {}: rank {} sends {} elements to rank {}, which "
             "expects {} (recvCounts[{}])", rank, what, s, sends, r, expects, s);
      }
      largest = std::max(largest, sends);
    }
  }
  return largest;
}

}  // namespace gyre
