// Host reduction loops built for AVX-512 (F, BW, VL, DQ) + F16C; host_kernels/reduce.cc calls
// them only on CPUs that have those extensions.
#if defined(__x86_64__)

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__) || !defined(__F16C__)
#error \
    "host_kernels/reduce_avx512.cc must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq " \
    "-mavx2 -mfma -mf16c (see CMakeLists.txt)"
#endif

#define GYRE_REDUCE_ISA_NS reduce_avx512
#include "host_kernels/reduce_impl.h"

namespace gyre {

const ReduceKernelTable& reduceKernelsAvx512() {
  static constexpr ReduceKernelTable kTable = reduce_avx512::makeKernelTable();
  return kTable;
}

}  // namespace gyre

#endif  // defined(__x86_64__)
