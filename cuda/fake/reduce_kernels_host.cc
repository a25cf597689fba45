// cuda_kernels/reduce_kernels.cuh compiled by the host compiler: the same templates and
// table as reduce_kernels.cu, where __device__ code runs on the CPU and a launch is a loop
// over the grid's threads. Without __CUDA_ARCH__ the float16/bfloat16 conversions are
// base/half.h's, which the .cuh's cvt instructions match bit for bit; so
// what this tests is the kernels' indexing, head/body/tail split and arithmetic, not the
// GPU's code generation.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/reduce_ops.h"
#include "cuda_kernels/reduce_launch.h"
#include "reduce_kernels_host.h"

// CUDA's keywords as the host compiler reads them (after the headers above, which use
// GYRE_HOST_DEVICE instead).
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace gyre::device_reduce {

struct HostDim3 {
  unsigned x = 1, y = 1, z = 1;
};
// CUDA's built-in indices of the thread being run; per host thread, since streams run
// kernels concurrently.
thread_local HostDim3 threadIdx, blockIdx, blockDim, gridDim;

}  // namespace gyre::device_reduce

#include "cuda_kernels/reduce_kernels.cuh"

namespace gyre::device_reduce {
namespace {

template <typename T, typename Op, bool kAvg, int kSrcs>
struct HostGrid {
  static void run(const ReduceArgs& args, unsigned blocks) {
    gridDim.x = blocks;
    blockDim.x = kThreads;
    for (unsigned b = 0; b < blocks; ++b) {
      blockIdx.x = b;
      for (unsigned t = 0; t < static_cast<unsigned>(kThreads); ++t) {
        threadIdx.x = t;
        reduceCopyKernel<T, Op, kAvg, kSrcs>(args);
      }
    }
  }
};

constexpr auto kTable = makeKernelTable<HostGrid>();

}  // namespace

HostKernelFn hostReduceKernel(KernelKind kind, DataType dtype, ReduceOp op) {
  return kTable.pick(kind, dtype, op);
}

}  // namespace gyre::device_reduce
