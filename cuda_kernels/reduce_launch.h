// The seam between the kernels (reduce_kernels.cu, nvcc) and their host-side launcher
// (device_reduce.cc, the host compiler): the launch shape, the kernel arguments, and
// one entry point that launches the instantiation for a dtype and op.
//
// Contract: internal to cuda_kernels/. No checks happen here: device_reduce.cc validates
// the arguments and computes head and packs first. launchReduceKernel returns the
// cudaError_t of the launch (cudaGetLastError after it), as an int so that this header
// needs no CUDA header. Thread-safe.
#pragma once

#include <cstdint>

#include "base/types.h"

struct CUstream_st;

namespace gyre::device_reduce {

inline constexpr int kThreads = 256;    // per block
inline constexpr int kBlocksPerSm = 4;  // 1024 resident threads per multiprocessor
inline constexpr int kUnroll = 4;       // packs per source per thread and iteration
inline constexpr int kPackBytes = 16;

struct ReduceArgs {
  char* dst0;
  char* dst1;  // nullptr: one destination
  const char* a;
  const char* b;   // unused with one source
  uint64_t count;  // elements
  uint64_t head;   // elements before the 16-byte aligned body
  uint64_t packs;  // packs in the body; the tail follows it
  bool vector;     // false: every element is loaded alone
  uint32_t avgDivisor;
};

enum class KernelKind {
  kReduce,  // dst = a op b (op kAvg: sum, then finalised when avgDivisor > 0)
  kScale,   // dst = finalise(a), avgDivisor > 0
  kCopy,    // dst = a, moved in elements of dtype's size
};

int launchReduceKernel(KernelKind kind, DataType dtype, ReduceOp op, const ReduceArgs& args,
                       unsigned blocks, CUstream_st* stream);

}  // namespace gyre::device_reduce
