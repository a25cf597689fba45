// Host reduction: argument checks, the ISA choice, and the portable build of the loops.
#include "host_kernels/reduce.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

#include "base/error.h"
#include "base/options.h"

#define GYRE_REDUCE_ISA_NS reduce_portable
#include "host_kernels/reduce_impl.h"

namespace gyre {

const ReduceKernelTable& reduceKernelsPortable() {
  static constexpr ReduceKernelTable kTable = reduce_portable::makeKernelTable();
  return kTable;
}

namespace {

constexpr ReduceIsa kAllIsas[] = {ReduceIsa::kPortable, ReduceIsa::kAvx2, ReduceIsa::kAvx512};

// nullptr when this build has no such loops (non-x86, or built without dispatch).
const ReduceKernelTable* tableFor(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kPortable:
      return &reduceKernelsPortable();
#if defined(GYRE_X86_DISPATCH)
    case ReduceIsa::kAvx2:
      return &reduceKernelsAvx2();
    case ReduceIsa::kAvx512:
      return &reduceKernelsAvx512();
#endif
    default:
      return nullptr;
  }
}

// Every extension the unit is compiled with (see CMakeLists.txt), not just the main one:
// the compiler may use any of them anywhere in that unit.
bool cpuRuns(ReduceIsa isa) {
#if defined(GYRE_X86_DISPATCH)
  __builtin_cpu_init();  // in case the first call comes from a static constructor
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (isa) {
    case ReduceIsa::kPortable:
      return true;
    case ReduceIsa::kAvx2:
      return avx2;
    case ReduceIsa::kAvx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  }
  return false;
#else
  return isa == ReduceIsa::kPortable;
#endif
}

ReduceIsa bestIsa() {
  ReduceIsa best = ReduceIsa::kPortable;
  for (ReduceIsa isa : kAllIsas) {
    if (reduceIsaSupported(isa)) best = isa;  // kAllIsas runs from worst to best
  }
  return best;
}

// GYRE_REDUCE_ISA (read by base/options) may force an ISA; this module validates it.
ReduceIsa isaFromEnvironment() {
  const std::string value = reduceIsaFromEnvironment();
  if (value.empty() || value == "auto") return bestIsa();
  for (ReduceIsa isa : kAllIsas) {
    if (value != reduceIsaName(isa)) continue;
    if (!reduceIsaSupported(isa)) {
      fail(ErrorCode::kInvalidArgument,
           "GYRE_REDUCE_ISA={}: this build or this CPU does not support it", value);
    }
    return isa;
  }
  fail(ErrorCode::kInvalidArgument, "GYRE_REDUCE_ISA={}: expected auto, portable, avx2 or avx512",
       value);
}

// The choice, made at the first call (thread-safe static initialisation; a throw
// leaves it unmade, so the next call reports the same error).
std::atomic<ReduceIsa>& activeIsaSlot() {
  static std::atomic<ReduceIsa> slot{isaFromEnvironment()};
  return slot;
}

const ReduceKernelTable& activeTable() {
  return *tableFor(activeIsaSlot().load(std::memory_order_relaxed));
}

void checkDtype(DataType dtype, const char* function) {
  if (!isValid(dtype)) {
    fail(ErrorCode::kInvalidArgument, "{}: invalid data type {}", function,
         static_cast<unsigned>(dtype));
  }
}

}  // namespace

const char* reduceIsaName(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kPortable:
      return "portable";
    case ReduceIsa::kAvx2:
      return "avx2";
    case ReduceIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool reduceIsaSupported(ReduceIsa isa) { return tableFor(isa) != nullptr && cpuRuns(isa); }

ReduceIsa activeReduceIsa() { return activeIsaSlot().load(std::memory_order_relaxed); }

void setReduceIsa(ReduceIsa isa) {
  if (!reduceIsaSupported(isa)) {
    fail(ErrorCode::kInvalidArgument, "setReduceIsa: {} is not supported here", reduceIsaName(isa));
  }
  activeIsaSlot().store(isa, std::memory_order_relaxed);
}

void reduceCopy(void* dst0, void* dst1, const void* a, const void* b, size_t count, DataType dtype,
                ReduceOp op, uint32_t avgDivisor) {
  checkDtype(dtype, "reduceCopy");
  if (!isValid(op)) {
    fail(ErrorCode::kInvalidArgument, "reduceCopy: invalid reduction op {}",
         static_cast<unsigned>(op));
  }
  if (count == 0) return;
  if (dst0 == nullptr || a == nullptr || b == nullptr) {
    fail(ErrorCode::kInvalidArgument, "reduceCopy: null buffer for {} elements", count);
  }
  activeTable().reduce[static_cast<int>(dtype)][static_cast<int>(op)](dst0, dst1, a, b, count,
                                                                      avgDivisor);
}

void scaleCopy(void* dst0, void* dst1, const void* src, size_t count, DataType dtype,
               uint32_t avgDivisor) {
  checkDtype(dtype, "scaleCopy");
  if (count == 0) return;
  if (dst0 == nullptr || src == nullptr) {
    fail(ErrorCode::kInvalidArgument, "scaleCopy: null buffer for {} elements", count);
  }
  if (avgDivisor == 0) return copy2(dst0, dst1, src, count * dtypeSize(dtype));
  activeTable().scale[static_cast<int>(dtype)](dst0, dst1, src, count, avgDivisor);
}

void copy2(void* dst0, void* dst1, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (dst0 == nullptr || src == nullptr) {
    fail(ErrorCode::kInvalidArgument, "copy2: null buffer for {} bytes", bytes);
  }
  if (dst1 == nullptr) {
    if (dst0 != src) std::memcpy(dst0, src, bytes);
    return;
  }
  // Interleave the two copies in pieces that stay in L1, so src is read from memory
  // once rather than twice.
  constexpr size_t kPiece = 16 * 1024;
  char* d0 = static_cast<char*>(dst0);
  char* d1 = static_cast<char*>(dst1);
  const char* s = static_cast<const char*>(src);
  for (size_t offset = 0; offset < bytes; offset += kPiece) {
    const size_t n = std::min(kPiece, bytes - offset);
    if (d0 != s) std::memcpy(d0 + offset, s + offset, n);
    std::memcpy(d1 + offset, s + offset, n);
  }
}

}  // namespace gyre
