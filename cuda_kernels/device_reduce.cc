// deviceReduceCopy / deviceScaleCopy: argument checks, the body/head/tail split, the
// launch shape, and error messages. Host compiler only; the kernels are behind
// cuda_kernels/reduce_launch.h.
#include "cuda_kernels/device_reduce.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>

#include "base/error.h"
#include "cuda_kernels/reduce_launch.h"

namespace gyre {
namespace {

using device_reduce::KernelKind;
using device_reduce::kBlocksPerSm;
using device_reduce::kPackBytes;
using device_reduce::kThreads;
using device_reduce::kUnroll;
using device_reduce::ReduceArgs;

[[noreturn]] void failCuda(cudaError_t err, const char* call, const char* function,
                           DataType dtype, size_t count) {
  fail(ErrorCode::kSystemError, "{} ({} x {}): {}: {} ({})", function, count, dtypeName(dtype),
       call, cudaGetErrorString(err), cudaGetErrorName(err));
}

// Multiprocessors per device, read once: the launch must stay in the microseconds.
constexpr int kMaxDevices = 64;
std::atomic<int> smCountCache[kMaxDevices];

int multiprocessors(const char* function, DataType dtype, size_t count) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) failCuda(err, "cudaGetDevice", function, dtype, count);
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int cached = smCountCache[device].load(std::memory_order_relaxed);
    if (cached > 0) return cached;
  }
  int sms = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) failCuda(err, "cudaDeviceGetAttribute", function, dtype, count);
  if (cacheable) smCountCache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

void checkDtype(DataType dtype, const char* function) {
  if (!isValid(dtype)) {
    fail(ErrorCode::kInvalidArgument, "{}: invalid data type {}", function,
         static_cast<unsigned>(dtype));
  }
}

// Splits the work into head, 16-byte body and tail when every pointer has the same
// offset modulo 16, sizes the grid, and launches.
void run(KernelKind kind, DataType dtype, ReduceOp op, ReduceArgs args, const void* const* ptrs,
         int nptrs, const char* function, cudaStream_t stream) {
  const size_t size = dtypeSize(dtype);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(ptrs[0]) % kPackBytes;
  args.vector = true;
  for (int k = 0; k < nptrs; ++k) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptrs[k]);
    if (address % size != 0) {
      fail(ErrorCode::kInvalidArgument, "{}: buffer {} is not aligned to its {}-byte {} elements",
           function, ptrs[k], size, dtypeName(dtype));
    }
    if (address % kPackBytes != offset) args.vector = false;
  }
  uint64_t work = args.count;  // per thread: elements, or iterations of the vector loop
  if (args.vector) {
    const uint64_t perPack = kPackBytes / size;
    args.head = std::min<uint64_t>((kPackBytes - offset) % kPackBytes / size, args.count);
    args.packs = (args.count - args.head) / perPack;
    const uint64_t tail = args.count - args.head - args.packs * perPack;
    work = std::max({args.head, tail, (args.packs + kUnroll - 1) / kUnroll});
  }
  const uint64_t maxBlocks =
      static_cast<uint64_t>(multiprocessors(function, dtype, args.count)) * kBlocksPerSm;
  const uint64_t wanted = (work + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, maxBlocks));
  const auto err = static_cast<cudaError_t>(
      device_reduce::launchReduceKernel(kind, dtype, op, args, blocks, stream));
  if (err != cudaSuccess) failCuda(err, "kernel launch", function, dtype, args.count);
}

}  // namespace

void deviceReduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t count,
                      DataType dtype, ReduceOp op, uint32_t avgDivisor, CUstream_st* stream) {
  constexpr const char* kFunction = "deviceReduceCopy";
  checkDtype(dtype, kFunction);
  if (!isValid(op)) {
    fail(ErrorCode::kInvalidArgument, "{}: invalid reduction op {}", kFunction,
         static_cast<unsigned>(op));
  }
  if (count == 0) return;
  if (dst0 == nullptr || a == nullptr || b == nullptr) {
    fail(ErrorCode::kInvalidArgument, "{}: null buffer for {} elements", kFunction, count);
  }
  // avg without a divisor is "not the last step": a plain sum, as on the host.
  if (op == ReduceOp::kAvg && avgDivisor == 0) op = ReduceOp::kSum;
  ReduceArgs args{};
  args.dst0 = static_cast<char*>(dst0);
  args.dst1 = static_cast<char*>(dst1);
  args.a = static_cast<const char*>(a);
  args.b = static_cast<const char*>(b);
  args.count = count;
  args.avgDivisor = avgDivisor;
  const void* ptrs[] = {dst0, a, b, dst1};
  run(KernelKind::kReduce, dtype, op, args, ptrs, dst1 != nullptr ? 4 : 3, kFunction, stream);
}

void deviceScaleCopy(void* dst0, void* dst1, const void* src, size_t count, DataType dtype,
                     uint32_t avgDivisor, CUstream_st* stream) {
  constexpr const char* kFunction = "deviceScaleCopy";
  checkDtype(dtype, kFunction);
  if (count == 0) return;
  if (dst0 == nullptr || src == nullptr) {
    fail(ErrorCode::kInvalidArgument, "{}: null buffer for {} elements", kFunction, count);
  }
  if (avgDivisor == 0 && dst1 == nullptr) {
    if (dst0 == src) return;
    const cudaError_t err =
        cudaMemcpyAsync(dst0, src, count * dtypeSize(dtype), cudaMemcpyDefault, stream);
    if (err != cudaSuccess) failCuda(err, "cudaMemcpyAsync", kFunction, dtype, count);
    return;
  }
  ReduceArgs args{};
  args.dst0 = static_cast<char*>(dst0);
  args.dst1 = static_cast<char*>(dst1);
  args.a = static_cast<const char*>(src);
  args.count = count;
  args.avgDivisor = avgDivisor;
  const void* ptrs[] = {dst0, src, dst1};
  run(avgDivisor > 0 ? KernelKind::kScale : KernelKind::kCopy, dtype, ReduceOp::kSum, args, ptrs,
      dst1 != nullptr ? 3 : 2, kFunction, stream);
}

DeviceReduceShape deviceReduceShape() {
  return DeviceReduceShape{
      kThreads, multiprocessors("deviceReduceShape", DataType::kUint8, 0) * kBlocksPerSm};
}

}  // namespace gyre
