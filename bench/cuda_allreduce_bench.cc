// cuda_allreduce_bench: all-reduce bandwidth on device buffers (CudaCommunicator)
// against host buffers (Communicator) in the same run, and the host time of an enqueue.
//
//   gyrerun -n 4 cuda_allreduce_bench [--bytes 64M] [--iters 20] [--warmup 5]
//       [--slices 1M,4M,16M] [--slots 4] [--memops 1] [--host 1] [--dtype float|bfloat16]
//
// Every rank uses GPU LOCAL_RANK % device count (one GPU: all ranks share it). Per
// configuration: --warmup untimed calls, a barrier, --iters back-to-back calls on one
// stream (out of place), then one stream synchronisation; time = the largest over
// ranks of the mean per call, algbw = bytes / time, busbw = algbw * 2(n-1)/n (as
// gyre-bench and nccl-tests). Enqueue time = host time of each allReduce call (it only
// enqueues); the row shows the largest per-rank median and the largest single call.
// Inputs are rank + 1, so the sum is exact and #wrong counts differing elements over all
// ranks. Rank 0 prints a table and `RESULT key=value` lines (tools/gpu_check.sh reads
// them) on stdout. Exit status 0 only if nothing was wrong and no error occurred.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/launch_env.h"
#include "base/options.h"
#include "ring/communicator.h"
#include "cuda/cuda_communicator.h"

namespace {

using namespace gyre;
using Clock = std::chrono::steady_clock;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail(ErrorCode::kSystemError, "{}: {}", what, cudaGetErrorString(err));
}

struct Flags {
  size_t bytes = size_t{64} << 20;
  int iters = 20, warmup = 5;
  std::vector<size_t> slices{size_t{4} << 20};
  size_t slots = 4;
  bool memops = true, host = true;
  DataType dtype = DataType::kFloat32;
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) fail(ErrorCode::kInvalidArgument, "{} wants a value", flag);
    const std::string v = argv[i + 1];
    if (flag == "--bytes") f.bytes = parseByteSize(v, "--bytes");
    else if (flag == "--iters") f.iters = std::max(1, std::atoi(v.c_str()));
    else if (flag == "--warmup") f.warmup = std::max(0, std::atoi(v.c_str()));
    else if (flag == "--slots") f.slots = static_cast<size_t>(std::max(2, std::atoi(v.c_str())));
    else if (flag == "--memops") f.memops = v != "0";
    else if (flag == "--host") f.host = v != "0";
    else if (flag == "--dtype" && (v == "float" || v == "bfloat16"))
      f.dtype = v == "float" ? DataType::kFloat32 : DataType::kBFloat16;
    else if (flag == "--slices") {
      f.slices.clear();
      for (size_t start = 0; start <= v.size();) {
        const size_t comma = std::min(v.find(',', start), v.size());
        f.slices.push_back(parseByteSize(v.substr(start, comma - start), "--slices"));
        start = comma + 1;
      }
    } else {
      fail(ErrorCode::kInvalidArgument, "unknown flag {} (see the header of cuda_allreduce_bench.cc)",
           flag);
    }
  }
  return f;
}

// Rank r's input (r + 1) and the exact sum over n ranks, as the dtype's bits.
std::vector<std::byte> filled(DataType t, double value, size_t count) {
  std::vector<std::byte> out(count * dtypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    if (t == DataType::kFloat32) {
      const float v = static_cast<float>(value);
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      const BFloat16 v = toBFloat16(static_cast<float>(value));
      std::memcpy(out.data() + 2 * i, &v, 2);
    }
  }
  return out;
}

size_t countWrong(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                  size_t esize) {
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); i += esize) {
    wrong += std::memcmp(got.data() + i, want.data() + i, esize) != 0;
  }
  return wrong;
}

double maxOver(Communicator& comm, double x) {
  comm.allReduce(&x, &x, 1, DataType::kFloat64, ReduceOp::kMax);
  return x;
}

std::string sizeText(size_t bytes) {
  return bytes % (1 << 20) == 0 ? std::to_string(bytes >> 20) + "M"
                                : std::to_string(bytes >> 10) + "K";
}

int run(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  auto comm = Communicator::fromEnvironment();
  const int n = comm->size(), rank = comm->rank();
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  const int local = launchEnvFromProcess().localRank;
  const int device = (local >= 0 ? local : rank) % devices;
  check(cudaSetDevice(device), "cudaSetDevice");
  const size_t esize = dtypeSize(f.dtype);
  const size_t count = f.bytes / esize;
  const size_t bytes = count * esize;
  const double factor = 2.0 * (n - 1) / n;
  const std::vector<std::byte> input = filled(f.dtype, rank + 1, count);
  const std::vector<std::byte> expected = filled(f.dtype, n * (n + 1) / 2.0, count);
  bool allRight = true;
  if (rank == 0) {
    std::printf("# %d ranks on %d GPU(s), %zu bytes of %s sum, %d iterations after %d warm-up\n",
                n, devices, bytes, dtypeName(f.dtype), f.iters, f.warmup);
    std::printf("# %-8s %6s %10s %9s %9s %11s %11s %7s\n", "buffers", "slice", "time(us)",
                "algbw", "busbw", "enq_med_us", "enq_max_us", "#wrong");
  }
  auto row = [&](const char* what, const std::string& slice, double meanUs, double enqMed,
                 double enqMax, size_t wrong) {
    const double algbw = static_cast<double>(bytes) / meanUs / 1e3;
    if (rank == 0) {
      std::printf("  %-8s %6s %10.1f %9.2f %9.2f %11.1f %11.1f %7zu\n", what, slice.c_str(),
                  meanUs, algbw, algbw * factor, enqMed, enqMax, wrong);
    }
    allRight = allRight && wrong == 0;
    return algbw * factor;
  };

  double hostBusbw = 0;
  if (f.host) {
    std::vector<std::byte> out(bytes);
    for (int i = 0; i < f.warmup; ++i) comm->allReduce(input.data(), out.data(), count, f.dtype, ReduceOp::kSum);
    comm->barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < f.iters; ++i) comm->allReduce(input.data(), out.data(), count, f.dtype, ReduceOp::kSum);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / f.iters;
    double wrong = static_cast<double>(countWrong(out, expected, esize));
    comm->allReduce(&wrong, &wrong, 1, DataType::kFloat64, ReduceOp::kSum);
    hostBusbw = row("host", "-", maxOver(*comm, us), 0, 0, static_cast<size_t>(wrong));
  }

  void *send = nullptr, *recv = nullptr;
  check(cudaMalloc(&send, bytes), "cudaMalloc");
  check(cudaMalloc(&recv, bytes), "cudaMalloc");
  check(cudaMemcpy(send, input.data(), bytes, cudaMemcpyHostToDevice), "upload");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  double bestBusbw = 0, enqMedian = 0, enqMax = 0;
  std::string bestSlice = "-";
  bool memopsUsed = true;
  for (size_t slice : f.slices) {
    CudaOptions o;
    o.sliceBytes = slice;
    o.minSliceBytes = std::min(slice, o.minSliceBytes);
    o.stagingSlots = f.slots;
    o.streamMemOps = f.memops;
    auto cuda = CudaCommunicator::createBeside(*comm, o);
    memopsUsed = memopsUsed && cuda->usesStreamMemOps();
    check(cudaMemset(recv, 0, bytes), "cudaMemset");
    for (int i = 0; i < f.warmup; ++i) cuda->allReduce(send, recv, count, f.dtype, ReduceOp::kSum, stream);
    check(cudaStreamSynchronize(stream), "warm-up");
    cuda->synchronize();
    comm->barrier();
    std::vector<double> enqueue;
    const auto t0 = Clock::now();
    for (int i = 0; i < f.iters; ++i) {
      const auto e0 = Clock::now();
      cuda->allReduce(send, recv, count, f.dtype, ReduceOp::kSum, stream);
      enqueue.push_back(std::chrono::duration<double, std::micro>(Clock::now() - e0).count());
    }
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / f.iters;
    cuda->synchronize();
    std::vector<std::byte> out(bytes);
    check(cudaMemcpy(out.data(), recv, bytes, cudaMemcpyDeviceToHost), "download");
    double wrong = static_cast<double>(countWrong(out, expected, esize));
    comm->allReduce(&wrong, &wrong, 1, DataType::kFloat64, ReduceOp::kSum);
    std::sort(enqueue.begin(), enqueue.end());
    const double med = maxOver(*comm, enqueue[enqueue.size() / 2]);
    const double mx = maxOver(*comm, enqueue.back());
    const double busbw = row("device", sizeText(slice), maxOver(*comm, us), med, mx,
                             static_cast<size_t>(wrong));
    if (rank == 0) std::printf("RESULT device_slice_%s_busbw=%.2f\n", sizeText(slice).c_str(), busbw);
    if (busbw > bestBusbw) {
      bestBusbw = busbw;
      bestSlice = sizeText(slice);
      enqMedian = med;
      enqMax = mx;
    }
  }
  if (rank == 0) {
    std::printf("RESULT host_busbw=%.2f device_busbw=%.2f device_best_slice=%s "
                "device_vs_host_pct=%.1f enqueue_median_us=%.1f enqueue_max_us=%.1f memops=%d "
                "wrong=%d\n",
                hostBusbw, bestBusbw, bestSlice.c_str(),
                hostBusbw > 0 ? 100 * bestBusbw / hostBusbw : 0.0, enqMedian, enqMax,
                memopsUsed ? 1 : 0, allRight ? 0 : 1);
  }
  cudaStreamDestroy(stream);
  cudaFree(send);
  cudaFree(recv);
  return allRight ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
