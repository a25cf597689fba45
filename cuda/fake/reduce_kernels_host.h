// The kernels of cuda_kernels/reduce_kernels.cuh compiled for the host, for the fake CUDA
// runtime (fake_cudart.cc): the seam between reduce_kernels_host.cc, which must not see
// a CUDA header (it defines CUDA's keywords itself), and reduce_launch_host.cc, which
// enqueues them on a stream.
#pragma once

#include "cuda_kernels/reduce_launch.h"

namespace gyre::device_reduce {

// Runs a whole grid of `blocks` x kThreads threads of the kernel, one thread after another.
using HostKernelFn = void (*)(const ReduceArgs& args, unsigned blocks);

HostKernelFn hostReduceKernel(KernelKind kind, DataType dtype, ReduceOp op);

}  // namespace gyre::device_reduce
