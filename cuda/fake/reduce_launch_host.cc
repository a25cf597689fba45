// launchReduceKernel for the fake CUDA runtime: the host-compiled grid
// (reduce_kernels_host.cc) enqueued on the stream as a host function, so that it runs in
// stream order on the stream's thread, as a kernel would on the GPU.
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda_kernels/reduce_launch.h"
#include "reduce_kernels_host.h"

namespace gyre::device_reduce {
namespace {

struct Launch {
  HostKernelFn kernel;
  ReduceArgs args;
  unsigned blocks;
};

void runLaunch(void* arg) {
  const std::unique_ptr<Launch> launch(static_cast<Launch*>(arg));
  launch->kernel(launch->args, launch->blocks);
}

}  // namespace

int launchReduceKernel(KernelKind kind, DataType dtype, ReduceOp op, const ReduceArgs& args,
                       unsigned blocks, CUstream_st* stream) {
  auto launch = std::make_unique<Launch>(Launch{hostReduceKernel(kind, dtype, op), args, blocks});
  const cudaError_t err = cudaLaunchHostFunc(stream, &runLaunch, launch.get());
  if (err == cudaSuccess) launch.release();  // runLaunch deletes it
  return static_cast<int>(err);
}

}  // namespace gyre::device_reduce
