// reduce_bench: throughput of the host reduction (host_kernels/reduce.h) against memcpy.
//
// Bytes are counted as memory traffic: reduceCopy reads two buffers and writes one
// (3 x size), the dual-destination variant writes two (4 x size), memcpy reads one
// and writes one (2 x size). At 64 MiB every buffer is out of cache, so reduceCopy
// running at memcpy's bytes/s means the loop is memory-bound, as it should be.
// Rows are named reduce/<isa>/<dtype>/<bytes>; run with --benchmark_filter to pick.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "host_kernels/reduce.h"

namespace gyre {
namespace {

constexpr int64_t kSizes[] = {4 << 10, 256 << 10, 64 << 20};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

// Page-aligned, and filled with 0x3c bytes: a normal, finite value in every floating
// type (0x3c3c is about 1.06 as float16), so no denormal or NaN slow path is timed.
Buffer makeBuffer(size_t bytes) {
  Buffer buffer(static_cast<char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
  std::memset(buffer.get(), 0x3c, bytes);
  return buffer;
}

void reduceSum(benchmark::State& state, ReduceIsa isa, DataType dtype, bool dual) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dtypeSize(dtype);
  Buffer a = makeBuffer(bytes), b = makeBuffer(bytes), dst0 = makeBuffer(bytes);
  Buffer dst1 = dual ? makeBuffer(bytes) : nullptr;
  setReduceIsa(isa);
  // One untimed pass: on the VMs here the first passes over freshly mapped buffers can
  // run at a third of the steady speed, and the ring reuses its buffers.
  reduceCopy(dst0.get(), dst1.get(), a.get(), b.get(), count, dtype, ReduceOp::kSum);
  for (auto _ : state) {
    reduceCopy(dst0.get(), dst1.get(), a.get(), b.get(), count, dtype, ReduceOp::kSum);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>((dual ? 4 : 3) * bytes));
}

void memcpyReference(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  Buffer src = makeBuffer(bytes), dst = makeBuffer(bytes);
  std::memcpy(dst.get(), src.get(), bytes);  // untimed, as in reduceSum
  for (auto _ : state) {
    std::memcpy(dst.get(), src.get(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(2 * bytes));
}

void registerAll() {
  constexpr DataType kTypes[] = {DataType::kInt8,    DataType::kInt32,    DataType::kInt64,
                                 DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                 DataType::kFloat64};
  for (ReduceIsa isa : {ReduceIsa::kPortable, ReduceIsa::kAvx2, ReduceIsa::kAvx512}) {
    if (!reduceIsaSupported(isa)) continue;
    for (DataType dtype : kTypes) {
      const std::string name = std::string("reduce/") + reduceIsaName(isa) + "/" + dtypeName(dtype);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), reduceSum, isa, dtype, false);
      for (int64_t size : kSizes) b->Arg(size);
    }
    const std::string dual = std::string("reduce_dual/") + reduceIsaName(isa) + "/float";
    auto* b = benchmark::RegisterBenchmark(dual.c_str(), reduceSum, isa, DataType::kFloat32, true);
    for (int64_t size : kSizes) b->Arg(size);
  }
  auto* b = benchmark::RegisterBenchmark("memcpy", memcpyReference);
  for (int64_t size : kSizes) b->Arg(size);
}

}  // namespace
}  // namespace gyre

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  gyre::registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
