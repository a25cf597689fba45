// Host reduction loops built for AVX2 + FMA + F16C; host_kernels/reduce.cc calls them only on
// CPUs that have those extensions.
#if defined(__x86_64__)

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "host_kernels/reduce_avx2.cc must be compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt)"
#endif

#define GYRE_REDUCE_ISA_NS reduce_avx2
#include "host_kernels/reduce_impl.h"

namespace gyre {

const ReduceKernelTable& reduceKernelsAvx2() {
  static constexpr ReduceKernelTable kTable = reduce_avx2::makeKernelTable();
  return kTable;
}

}  // namespace gyre

#endif  // defined(__x86_64__)
