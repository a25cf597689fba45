// The kernel instantiations, in one table indexed by DataType and ReduceOp (the enums'
// values) as the host's ReduceKernelTable, and launchReduceKernel over it.
#include <cuda_runtime.h>

#include "cuda_kernels/reduce_kernels.cuh"
#include "cuda_kernels/reduce_launch.h"

namespace gyre::device_reduce {
namespace {

using LaunchFn = void (*)(const ReduceArgs& args, unsigned blocks, cudaStream_t stream);

template <typename T, typename Op, bool kAvg, int kSrcs>
void launch(const ReduceArgs& args, unsigned blocks, cudaStream_t stream) {
  reduceCopyKernel<T, Op, kAvg, kSrcs><<<blocks, kThreads, 0, stream>>>(args);
}

struct KernelTable {
  LaunchFn reduce[kNumDataTypes][kNumReduceOps];
  LaunchFn scale[kNumDataTypes];
  LaunchFn copy[kNumDataTypes];
};

template <typename T>
constexpr void fillRow(KernelTable& table, DataType dtype) {
  auto& row = table.reduce[static_cast<int>(dtype)];
  row[static_cast<int>(ReduceOp::kSum)] = &launch<T, SumOp, false, 2>;
  row[static_cast<int>(ReduceOp::kProd)] = &launch<T, ProdOp, false, 2>;
  row[static_cast<int>(ReduceOp::kMin)] = &launch<T, MinOp, false, 2>;
  row[static_cast<int>(ReduceOp::kMax)] = &launch<T, MaxOp, false, 2>;
  row[static_cast<int>(ReduceOp::kAvg)] = &launch<T, SumOp, true, 2>;
  table.scale[static_cast<int>(dtype)] = &launch<T, SumOp, true, 1>;
}

// A copy only moves bytes: one kernel per element size (the scalar fallback still moves
// whole elements), 4 instantiations rather than 10.
template <typename U>
constexpr void fillCopy(KernelTable& table, DataType dtype) {
  table.copy[static_cast<int>(dtype)] = &launch<U, SumOp, false, 1>;
}

constexpr KernelTable makeTable() {
  KernelTable table{};
  fillRow<int8_t>(table, DataType::kInt8);
  fillRow<uint8_t>(table, DataType::kUint8);
  fillRow<int32_t>(table, DataType::kInt32);
  fillRow<uint32_t>(table, DataType::kUint32);
  fillRow<int64_t>(table, DataType::kInt64);
  fillRow<uint64_t>(table, DataType::kUint64);
  fillRow<Float16>(table, DataType::kFloat16);
  fillRow<BFloat16>(table, DataType::kBFloat16);
  fillRow<float>(table, DataType::kFloat32);
  fillRow<double>(table, DataType::kFloat64);
  fillCopy<uint8_t>(table, DataType::kInt8);
  fillCopy<uint8_t>(table, DataType::kUint8);
  fillCopy<uint32_t>(table, DataType::kInt32);
  fillCopy<uint32_t>(table, DataType::kUint32);
  fillCopy<uint64_t>(table, DataType::kInt64);
  fillCopy<uint64_t>(table, DataType::kUint64);
  fillCopy<uint16_t>(table, DataType::kFloat16);
  fillCopy<uint16_t>(table, DataType::kBFloat16);
  fillCopy<uint32_t>(table, DataType::kFloat32);
  fillCopy<uint64_t>(table, DataType::kFloat64);
  return table;
}

constexpr KernelTable kTable = makeTable();

}  // namespace

int launchReduceKernel(KernelKind kind, DataType dtype, ReduceOp op, const ReduceArgs& args,
                       unsigned blocks, CUstream_st* stream) {
  const int t = static_cast<int>(dtype);
  LaunchFn fn = kind == KernelKind::kReduce  ? kTable.reduce[t][static_cast<int>(op)]
                : kind == KernelKind::kScale ? kTable.scale[t]
                                             : kTable.copy[t];
  fn(args, blocks, stream);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gyre::device_reduce
