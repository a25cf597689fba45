// Host reduction: the reduce-and-copy step of every collective on host memory.
//
// Contract:
//   reduceCopy: dst0[i] = a[i] op b[i] for i < count; when dst1 != nullptr the same
//     values are also written to dst1 (NCCL's fused reduce + copy to the next rank's
//     slot). Element arithmetic is base/reduce_ops.h. For op == kAvg the element-wise
//     operation is sum; when avgDivisor > 0 the result is then finalised (scaled by
//     1/avgDivisor or divided by it, see reduce_ops.h) in the same pass, bit for bit
//     what reduceCopy(kSum) followed by scaleCopy would give. avgDivisor is ignored for
//     other ops, and 0 means "not the last step": a plain sum.
//   scaleCopy: dst0[i] = finalise(src[i]) (and dst1[i]), the average of one input, for
//     a collective on a single rank. avgDivisor 0 means none: a plain copy.
//   copy2: memcpy of `bytes` to dst0 and, when non-null, to dst1, reading src once.
// Buffers may be unaligned and count may be anything, 0 included. Out of place is the
// normal case; dst0 may be exactly equal to a or b (or src) for in place. No other
// overlap is allowed between sources and destinations.
// Throws gyre::Error(kInvalidArgument) for an invalid dtype or op, or a null pointer
// with count > 0. Thread-safe: the functions keep no state beyond the ISA choice.
//
// ISA: the loops exist in a portable build and, on x86-64, AVX2+F16C and AVX-512
// builds; the best one the CPU supports is picked once, at the first call. All give
// bitwise-identical results (tests/reduce_test.cc checks it), so ranks on different
// machines still agree. The environment variable GYRE_REDUCE_ISA=portable|avx2|avx512
// forces one (read once; an unknown or unsupported value throws kInvalidArgument at
// the first call); "auto" or unset picks the best.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/types.h"

namespace gyre {

void reduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t count, DataType dtype,
                ReduceOp op, uint32_t avgDivisor = 0);

void scaleCopy(void* dst0, void* dst1, const void* src, size_t count, DataType dtype,
               uint32_t avgDivisor);

void copy2(void* dst0, void* dst1, const void* src, size_t bytes);

// For tests and benchmarks, which compare the ISAs with each other.
enum class ReduceIsa { kPortable, kAvx2, kAvx512 };

const char* reduceIsaName(ReduceIsa isa);  // "portable", "avx2", "avx512"
bool reduceIsaSupported(ReduceIsa isa);    // built in, and this CPU runs it
ReduceIsa activeReduceIsa();               // the one reduceCopy uses now
// Switches every later call, in every thread, to `isa`; throws kInvalidArgument if
// it is not supported. Not meant for production code: the choice is process-wide.
void setReduceIsa(ReduceIsa isa);

}  // namespace gyre
