// cuda_reduce_bench: the device reduce kernel's bandwidth against the device-to-device
// copy of the same run (the target: float32 and bfloat16 sum at 256 MiB per buffer reach
// 90% of the copy's bandwidth; tools/gpu_check.sh checks it).
//
//   cuda_reduce_bench [--bytes 256M] [--iters 20] [--warmup 3]
//
// Bytes moved: copy = read + write (2 x bytes); reduce = 2 reads + 1 write (3 x bytes),
// plus 1 write per extra destination. time = median over --iters launches, each timed
// with CUDA events; inputs are random bits (never zeros, so no special-value shortcut
// flatters it), and every buffer is far larger than the 60 MB L2, so each launch streams
// from HBM.
// Output: a table on stdout, then `RESULT key=value` lines for tools/gpu_check.sh.
// Exit status 0 unless a CUDA call failed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/options.h"
#include "cuda_kernels/device_reduce.h"

namespace {

using namespace gyre;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "cuda_reduce_bench: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

struct Row {
  std::string name;
  double bytesMoved;
  double medianUs;
};

// Median time of `launch` in microseconds.
double timeIt(const std::function<void()>& launch, int iters, int warmup) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < warmup; ++i) launch();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<double> us;
  for (int i = 0; i < iters; ++i) {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    launch();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    us.push_back(ms * 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

int run(int argc, char** argv) {
  size_t bytes = size_t{256} << 20;
  int iters = 20, warmup = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--bytes") {
      bytes = parseByteSize(argv[i + 1], "--bytes");
    } else if (flag == "--iters") {
      iters = std::max(1, std::atoi(argv[i + 1]));
    } else if (flag == "--warmup") {
      warmup = std::max(0, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: cuda_reduce_bench [--bytes 256M] [--iters 20] [--warmup 3]\n");
      return 2;
    }
  }
  bytes = bytes / 64 * 64;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  check(cudaSetDevice(0), "cudaSetDevice");
  const size_t padded = bytes + 64;
  char *a, *b, *d0, *d1;
  for (char** p : {&a, &b, &d0, &d1}) {
    check(cudaMalloc(reinterpret_cast<void**>(p), padded), "cudaMalloc");
  }
  {
    std::vector<uint64_t> host(padded / 8);
    std::mt19937_64 rng(42);
    for (uint64_t& x : host) x = rng();
    for (char* p : {a, b, d0, d1}) {
      check(cudaMemcpy(p, host.data(), padded / 8 * 8, cudaMemcpyHostToDevice), "upload");
    }
  }

  std::vector<Row> rows;
  auto reduce = [&](const char* name, DataType t, ReduceOp op, size_t offset, bool dual,
                    size_t offsetB, uint32_t divisor) {
    const size_t count = (bytes - 16) / dtypeSize(t);
    const double moved = static_cast<double>(count * dtypeSize(t)) * (dual ? 4 : 3);
    const double us = timeIt(
        [&] {
          deviceReduceCopy(d0 + offset, dual ? d1 + offset : nullptr, a + offset, b + offsetB,
                           count, t, op, divisor, nullptr);
        },
        iters, warmup);
    rows.push_back({name, moved, us});
  };
  const double copyUs = timeIt(
      [&] { check(cudaMemcpyAsync(d0, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "memcpy"); },
      iters, warmup);
  rows.push_back({"cudaMemcpy D2D (copy ceiling)", 2.0 * bytes, copyUs});
  reduce("float32 sum", DataType::kFloat32, ReduceOp::kSum, 0, false, 0, 0);
  reduce("bfloat16 sum", DataType::kBFloat16, ReduceOp::kSum, 0, false, 0, 0);
  reduce("float16 sum", DataType::kFloat16, ReduceOp::kSum, 0, false, 0, 0);
  reduce("float32 sum, 2 destinations", DataType::kFloat32, ReduceOp::kSum, 0, true, 0, 0);
  reduce("bfloat16 sum, 2 destinations", DataType::kBFloat16, ReduceOp::kSum, 0, true, 0, 0);
  reduce("bfloat16 avg (sum + 1/n)", DataType::kBFloat16, ReduceOp::kAvg, 0, false, 0, 4);
  reduce("float32 sum, all +4 bytes", DataType::kFloat32, ReduceOp::kSum, 4, false, 4, 0);
  reduce("float32 sum, b +4 bytes (scalar)", DataType::kFloat32, ReduceOp::kSum, 0, false, 4, 0);
  reduce("int8 max", DataType::kInt8, ReduceOp::kMax, 0, false, 0, 0);
  reduce("float64 prod", DataType::kFloat64, ReduceOp::kProd, 0, false, 0, 0);
  check(cudaDeviceSynchronize(), "the kernels");
  const DeviceReduceShape shape = deviceReduceShape();

  std::printf("# %s, %d SMs, %zu MiB per buffer, median of %d, grid %d x %d threads\n", prop.name,
              prop.multiProcessorCount, bytes >> 20, iters, shape.maxBlocks, shape.threadsPerBlock);
  std::printf("%-36s %12s %10s %10s\n", "# kernel", "time (us)", "GB/s", "% of copy");
  const double copyBw = 2.0 * bytes / copyUs / 1e3;
  for (const Row& r : rows) {
    const double bw = r.bytesMoved / r.medianUs / 1e3;
    std::printf("%-36s %12.1f %10.1f %9.1f%%\n", r.name.c_str(), r.medianUs, bw,
                100.0 * bw / copyBw);
  }
  const double f32 = rows[1].bytesMoved / rows[1].medianUs / 1e3;
  const double bf16 = rows[2].bytesMoved / rows[2].medianUs / 1e3;
  std::printf("RESULT copy_gbps=%.1f reduce_f32_gbps=%.1f reduce_bf16_gbps=%.1f "
              "reduce_f32_pct=%.1f reduce_bf16_pct=%.1f\n",
              copyBw, f32, bf16, 100 * f32 / copyBw, 100 * bf16 / copyBw);
  for (char* p : {a, b, d0, d1}) cudaFree(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_reduce_bench: %s\n", e.what());
    return 1;
  }
}
