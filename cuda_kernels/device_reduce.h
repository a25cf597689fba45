// Device reduction: the reduce-and-copy step of a collective on GPU memory, the twin of
// host_kernels/reduce.h for device pointers.
//
// Contract (the host functions' contract, on a stream):
//   deviceReduceCopy: dst0[i] = a[i] op b[i] for i < count; when dst1 != nullptr the same
//     values also go to dst1, in the same pass (read twice, written once or twice). For
//     op == kAvg the element-wise operation is sum, and when avgDivisor > 0 the sum is
//     rounded to the element type and then finalised (scaled by 1/avgDivisor for floating
//     types, divided for integers), bit for bit what the host reduceCopy gives.
//   deviceScaleCopy: dst0[i] = finalise(src[i]) (and dst1[i]); avgDivisor 0 = a copy.
// Results are bitwise equal to host_kernels/reduce.h's for the same inputs: the kernels run the
// arithmetic functors of base/reduce_ops.h (float16 and bfloat16 go through float and
// are rounded once per operation; the conversions use the GPU's paired cvt instructions,
// which round exactly as base/half.h does, NaN aside, and NaN results are re-encoded as
// base/half.h encodes them). tests/cuda_reduce_test.cc checks this against the host.
// Pointers are device (or mapped, or managed) memory of the current device, aligned to
// the element size (CUDA cannot load a misaligned element); they need not be 16-byte
// aligned: when all of them share one offset modulo 16, a scalar head and tail frame a
// 16-byte vector body, otherwise every element is loaded alone (slower, still right).
// count is 64-bit and may be 0. In place: dst0 may equal a, b or src exactly; no other
// overlap. The work is only enqueued on `stream` (nullptr = the legacy default stream):
// the functions return at once, and the data must stay valid until the stream passes.
// Errors: gyre::Error kInvalidArgument for a bad dtype, op, null or misaligned pointer;
// kSystemError naming the CUDA call for a CUDA failure (launch configuration, or an
// earlier asynchronous error that the launch reports). Thread-safe.
//
// This header needs no CUDA header and no nvcc: `CUstream_st*` is the type that
// cudaStream_t and CUstream name, so callers pass their stream as it is.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/types.h"

struct CUstream_st;

namespace gyre {

void deviceReduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t count,
                      DataType dtype, ReduceOp op, uint32_t avgDivisor, CUstream_st* stream);

void deviceScaleCopy(void* dst0, void* dst1, const void* src, size_t count, DataType dtype,
                     uint32_t avgDivisor, CUstream_st* stream);

// The launch shape the kernels use on the current device, for benchmarks and notes:
// threads per block and the most blocks per launch (multiprocessors x blocks each).
struct DeviceReduceShape {
  int threadsPerBlock;
  int maxBlocks;
};
DeviceReduceShape deviceReduceShape();

}  // namespace gyre
