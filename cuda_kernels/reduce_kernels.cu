// The kernel instantiations (reduce_kernels.cuh's table) and launchReduceKernel over them.
#include <cuda_runtime.h>

#include "cuda_kernels/reduce_kernels.cuh"
#include "cuda_kernels/reduce_launch.h"

namespace gyre::device_reduce {
namespace {

template <typename T, typename Op, bool kAvg, int kSrcs>
struct Launch {
  static void run(const ReduceArgs& args, unsigned blocks, cudaStream_t stream) {
    reduceCopyKernel<T, Op, kAvg, kSrcs><<<blocks, kThreads, 0, stream>>>(args);
  }
};

constexpr auto kTable = makeKernelTable<Launch>();

}  // namespace

int launchReduceKernel(KernelKind kind, DataType dtype, ReduceOp op, const ReduceArgs& args,
                       unsigned blocks, CUstream_st* stream) {
  kTable.pick(kind, dtype, op)(args, blocks, stream);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gyre::device_reduce
