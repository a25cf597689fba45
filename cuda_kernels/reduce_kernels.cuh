// The device reduce-and-copy kernel, as templates over element type, operator and
// number of sources, and the table of their instantiations. Internal to
// cuda_kernels/reduce_kernels.cu (nvcc), and to cuda/fake/reduce_kernels_host.cc, which
// compiles the same templates for the host to run them on the fake CUDA runtime
// (docs/testing.md). Only the kernels live on the nvcc side: the host compiler builds the
// launcher (device_reduce.cc), which also keeps fmt's consteval format checks away from nvcc.
//
// Shape (NCCL's reduceCopy split of memory access from arithmetic, as the host loops in
// host_kernels/reduce_impl.h): each thread moves 16-byte packs; kUnroll packs of every source
// are loaded before any is used, so that 2 x kUnroll loads are in flight per thread;
// the operator runs lane by lane through the functors of base/reduce_ops.h; the result
// pack is stored to one or two destinations. A thread reads every source byte of its
// packs before writing the same bytes, which makes dst0 == a (in place) safe. A scalar
// head and tail handle what lies outside the 16-byte aligned body; when the pointers
// do not share one alignment, every element goes the scalar way.
//
// float16 and bfloat16 are converted in pairs with the cvt.rn.{f16,bf16}x2.f32
// instructions: round to nearest even, overflow to infinity, subnormals kept, exactly
// base/half.h's rounding. Only NaN differs (the GPU writes its own canonical NaN), so a
// NaN is re-encoded as base/half.h does. The software conversions of base/half.h would
// give the same bits but cost ~30 integer operations per float16 element, which at
// ~4 TB/s would make the kernel compute-bound (measured figures: docs/gpu.md).
#pragma once

#include <cstdint>
#include <cstring>

#include "base/reduce_ops.h"
#include "cuda_kernels/reduce_launch.h"

namespace gyre::device_reduce {

struct alignas(16) Pack {
  uint32_t w[4];
};

// ---- float16 / bfloat16 <-> float, as base/half.h rounds ------------------------------

// base/half.h's NaN encodings: quiet, sign and top payload bits kept.
__device__ __forceinline__ uint32_t halfNaNBits(float f) {
  const uint32_t x = half_detail::floatBits(f);
  return ((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu);
}
__device__ __forceinline__ uint32_t bfloatNaNBits(float f) {
  return (half_detail::floatBits(f) >> 16) | 0x40u;
}

// Two floats to one word of two 16-bit values, lo in the low half (memory order).
template <typename T>
__device__ __forceinline__ uint32_t storePair(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t w;
  if constexpr (std::is_same_v<T, Float16>) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    if (lo != lo) w = (w & 0xffff0000u) | halfNaNBits(lo);
    if (hi != hi) w = (w & 0x0000ffffu) | (halfNaNBits(hi) << 16);
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
    if (lo != lo) w = (w & 0xffff0000u) | bfloatNaNBits(lo);
    if (hi != hi) w = (w & 0x0000ffffu) | (bfloatNaNBits(hi) << 16);
  }
  return w;
#else
  using Traits = ElementTraits<T>;
  return static_cast<uint32_t>(Traits::store(lo).bits) |
         (static_cast<uint32_t>(Traits::store(hi).bits) << 16);
#endif
}

template <typename T>
__device__ __forceinline__ float loadHalf(uint32_t bits16) {
  if constexpr (std::is_same_v<T, Float16>) {
#if defined(__CUDA_ARCH__)
    // Exact; a NaN's payload does not matter, every operator re-encodes NaN results.
    float f;
    const uint16_t h = static_cast<uint16_t>(bits16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return toFloat(Float16{static_cast<uint16_t>(bits16)});
#endif
  } else {
    return half_detail::bitsFloat(bits16 << 16);
  }
}

// Scalar element conversion: the pair code, one lane used, so that head and tail round
// exactly as the body does.
template <typename T>
struct DeviceTraits : ElementTraits<T> {};

template <typename T>
struct HalfDeviceTraits {
  using Compute = float;
  __device__ __forceinline__ static float load(T x) { return loadHalf<T>(x.bits); }
  __device__ __forceinline__ static T store(float c) {
    return T{static_cast<uint16_t>(storePair<T>(c, 0.0f) & 0xffffu)};
  }
};
template <>
struct DeviceTraits<Float16> : HalfDeviceTraits<Float16> {};
template <>
struct DeviceTraits<BFloat16> : HalfDeviceTraits<BFloat16> {};

// ---- A pack as lanes of the compute type ------------------------------------------------

template <typename T>
struct PackLanes {
  static constexpr int kN = kPackBytes / sizeof(T);
  using C = typename ElementTraits<T>::Compute;
  static constexpr bool kHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

  __device__ __forceinline__ static void load(C (&out)[kN], const Pack& p) {
    if constexpr (kHalf) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        out[2 * k] = loadHalf<T>(p.w[k] & 0xffffu);
        out[2 * k + 1] = loadHalf<T>(p.w[k] >> 16);
      }
    } else {
      T v[kN];
      std::memcpy(v, &p, sizeof v);
#pragma unroll
      for (int j = 0; j < kN; ++j) out[j] = ElementTraits<T>::load(v[j]);
    }
  }

  __device__ __forceinline__ static void store(Pack& p, const C (&in)[kN]) {
    if constexpr (kHalf) {
#pragma unroll
      for (int k = 0; k < 4; ++k) p.w[k] = storePair<T>(in[2 * k], in[2 * k + 1]);
    } else {
      T v[kN];
#pragma unroll
      for (int j = 0; j < kN; ++j) v[j] = ElementTraits<T>::store(in[j]);
      std::memcpy(&p, v, sizeof v);
    }
  }
};

// ---- The element-wise work: as host_kernels/reduce_impl.h's reduceElement and scale ------------

// kSrcs == 2: x op y, then (kAvg) rounded to T and finalised. kSrcs == 1: finalise(x)
// when kAvg, else x unchanged.
template <typename T, typename Op, bool kAvg, int kSrcs>
struct Apply {
  using Traits = DeviceTraits<T>;
  using C = typename ElementTraits<T>::Compute;
  using Lanes = PackLanes<T>;

  __device__ __forceinline__ static T element(T x, T y, const AvgFinalize<C>& fin) {
    if constexpr (kSrcs == 2) {
      T r = Traits::store(Op()(Traits::load(x), Traits::load(y)));
      if constexpr (kAvg) r = Traits::store(fin(Traits::load(r)));
      return r;
    } else if constexpr (kAvg) {
      return Traits::store(fin(Traits::load(x)));
    } else {
      return x;
    }
  }

  __device__ __forceinline__ static Pack pack(const Pack& x, const Pack& y,
                                              const AvgFinalize<C>& fin) {
    if constexpr (kSrcs == 1 && !kAvg) {
      return x;
    } else {
      C vx[Lanes::kN];
      Lanes::load(vx, x);
      if constexpr (kSrcs == 2) {
        C vy[Lanes::kN];
        Lanes::load(vy, y);
        const Op op;
#pragma unroll
        for (int j = 0; j < Lanes::kN; ++j) vx[j] = op(vx[j], vy[j]);
        if constexpr (kAvg) {
          // Round the sum to T before scaling, as the host does.
          Pack rounded;
          Lanes::store(rounded, vx);
          Lanes::load(vx, rounded);
        }
      }
      if constexpr (kAvg) {
#pragma unroll
        for (int j = 0; j < Lanes::kN; ++j) vx[j] = fin(vx[j]);
      }
      Pack out;
      Lanes::store(out, vx);
      return out;
    }
  }
};

// ---- The kernel ---------------------------------------------------------------------------

template <typename T, typename Op, bool kAvg, int kSrcs>
__device__ __forceinline__ void reduceElementAt(const ReduceArgs& args, uint64_t i,
                                                const AvgFinalize<typename ElementTraits<T>::Compute>& fin) {
  const T x = reinterpret_cast<const T*>(args.a)[i];
  T y{};
  if constexpr (kSrcs == 2) y = reinterpret_cast<const T*>(args.b)[i];
  const T r = Apply<T, Op, kAvg, kSrcs>::element(x, y, fin);
  reinterpret_cast<T*>(args.dst0)[i] = r;
  if (args.dst1 != nullptr) reinterpret_cast<T*>(args.dst1)[i] = r;
}

template <typename T, typename Op, bool kAvg, int kSrcs>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) reduceCopyKernel(const ReduceArgs args) {
  using C = typename ElementTraits<T>::Compute;
  using A = Apply<T, Op, kAvg, kSrcs>;
  constexpr int kN = PackLanes<T>::kN;
  const AvgFinalize<C> fin(kAvg ? args.avgDivisor : 1u);
  const uint64_t tid = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t nthreads = static_cast<uint64_t>(gridDim.x) * blockDim.x;

  if (!args.vector) {
    for (uint64_t i = tid; i < args.count; i += nthreads) {
      reduceElementAt<T, Op, kAvg, kSrcs>(args, i, fin);
    }
    return;
  }
  const uint64_t bodyEnd = args.head + args.packs * kN;
  if (tid < args.head) reduceElementAt<T, Op, kAvg, kSrcs>(args, tid, fin);
  if (tid < args.count - bodyEnd) reduceElementAt<T, Op, kAvg, kSrcs>(args, bodyEnd + tid, fin);

  const size_t headBytes = args.head * sizeof(T);
  const Pack* pa = reinterpret_cast<const Pack*>(args.a + headBytes);
  const Pack* pb = reinterpret_cast<const Pack*>(args.b + (kSrcs == 2 ? headBytes : 0));
  Pack* d0 = reinterpret_cast<Pack*>(args.dst0 + headBytes);
  Pack* d1 = args.dst1 != nullptr ? reinterpret_cast<Pack*>(args.dst1 + headBytes) : nullptr;
  const Pack zero{};

  uint64_t p = tid;
  for (; p + (kUnroll - 1) * nthreads < args.packs; p += kUnroll * nthreads) {
    Pack x[kUnroll], y[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) x[u] = pa[p + u * nthreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) y[u] = kSrcs == 2 ? pb[p + u * nthreads] : zero;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const Pack r = A::pack(x[u], y[u], fin);
      d0[p + u * nthreads] = r;
      if (d1 != nullptr) d1[p + u * nthreads] = r;
    }
  }
  for (; p < args.packs; p += nthreads) {
    const Pack r = A::pack(pa[p], kSrcs == 2 ? pb[p] : zero, fin);
    d0[p] = r;
    if (d1 != nullptr) d1[p] = r;
  }
}

// ---- The instantiations ---------------------------------------------------------------------

// One launcher per instantiation, in a table indexed by DataType and ReduceOp (the enums'
// values) as the host's ReduceKernelTable. Launch<T, Op, kAvg, kSrcs>::run starts
// reduceCopyKernel<T, Op, kAvg, kSrcs>: on the GPU (reduce_kernels.cu) or on the host
// (cuda/fake/reduce_kernels_host.cc).
template <typename Fn>
struct KernelTable {
  Fn reduce[kNumDataTypes][kNumReduceOps];
  Fn scale[kNumDataTypes];
  Fn copy[kNumDataTypes];

  Fn pick(KernelKind kind, DataType dtype, ReduceOp op) const {
    const int t = static_cast<int>(dtype);
    return kind == KernelKind::kReduce  ? reduce[t][static_cast<int>(op)]
           : kind == KernelKind::kScale ? scale[t]
                                        : copy[t];
  }
};

template <template <typename, typename, bool, int> class Launch>
using KernelFn = decltype(&Launch<uint8_t, SumOp, false, 1>::run);

template <template <typename, typename, bool, int> class Launch, typename T>
constexpr void fillRow(KernelTable<KernelFn<Launch>>& table, DataType dtype) {
  auto& row = table.reduce[static_cast<int>(dtype)];
  row[static_cast<int>(ReduceOp::kSum)] = &Launch<T, SumOp, false, 2>::run;
  row[static_cast<int>(ReduceOp::kProd)] = &Launch<T, ProdOp, false, 2>::run;
  row[static_cast<int>(ReduceOp::kMin)] = &Launch<T, MinOp, false, 2>::run;
  row[static_cast<int>(ReduceOp::kMax)] = &Launch<T, MaxOp, false, 2>::run;
  row[static_cast<int>(ReduceOp::kAvg)] = &Launch<T, SumOp, true, 2>::run;
  table.scale[static_cast<int>(dtype)] = &Launch<T, SumOp, true, 1>::run;
}

// A copy only moves bytes: one kernel per element size (the scalar fallback still moves
// whole elements), 4 instantiations rather than 10.
template <template <typename, typename, bool, int> class Launch, typename U>
constexpr void fillCopy(KernelTable<KernelFn<Launch>>& table, DataType dtype) {
  table.copy[static_cast<int>(dtype)] = &Launch<U, SumOp, false, 1>::run;
}

template <template <typename, typename, bool, int> class Launch>
constexpr KernelTable<KernelFn<Launch>> makeKernelTable() {
  KernelTable<KernelFn<Launch>> table{};
  fillRow<Launch, int8_t>(table, DataType::kInt8);
  fillRow<Launch, uint8_t>(table, DataType::kUint8);
  fillRow<Launch, int32_t>(table, DataType::kInt32);
  fillRow<Launch, uint32_t>(table, DataType::kUint32);
  fillRow<Launch, int64_t>(table, DataType::kInt64);
  fillRow<Launch, uint64_t>(table, DataType::kUint64);
  fillRow<Launch, Float16>(table, DataType::kFloat16);
  fillRow<Launch, BFloat16>(table, DataType::kBFloat16);
  fillRow<Launch, float>(table, DataType::kFloat32);
  fillRow<Launch, double>(table, DataType::kFloat64);
  fillCopy<Launch, uint8_t>(table, DataType::kInt8);
  fillCopy<Launch, uint8_t>(table, DataType::kUint8);
  fillCopy<Launch, uint32_t>(table, DataType::kInt32);
  fillCopy<Launch, uint32_t>(table, DataType::kUint32);
  fillCopy<Launch, uint64_t>(table, DataType::kInt64);
  fillCopy<Launch, uint64_t>(table, DataType::kUint64);
  fillCopy<Launch, uint16_t>(table, DataType::kFloat16);
  fillCopy<Launch, uint16_t>(table, DataType::kBFloat16);
  fillCopy<Launch, uint32_t>(table, DataType::kFloat32);
  fillCopy<Launch, uint64_t>(table, DataType::kFloat64);
  return table;
}

}  // namespace gyre::device_reduce
