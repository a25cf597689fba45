// The host reduction loops, as templates compiled once per ISA.
//
// Contract: internal to host_kernels/reduce.cc (portable), host_kernels/reduce_avx2.cc and
// host_kernels/reduce_avx512.cc. Each of them defines GYRE_REDUCE_ISA_NS, a namespace name of
// its own, before including this header: the copies built with different -m flags then
// have different symbols, so the linker can never hand the portable code an AVX-512
// instantiation of the same template (an ODR clash that faults on older CPUs). The
// loops adapt to the unit's ISA through the compiler's macros (__AVX512F__, __F16C__).
//
// Shape of a loop (NCCL's reduceCopy split of memory access from arithmetic): a block
// of one vector register's worth of lanes is copied from each source into a local
// array, the operator from base/reduce_ops.h runs lane by lane in a loop of fixed trip
// count (which the compiler vectorises), and the block is copied to one or two
// destinations. Every source byte of a block is read before any destination byte is
// written, which makes dst0 == a (in place) safe without alias checks. Where the ISA
// has them, float16/bfloat16 blocks convert with intrinsics, which compilers do not
// generate from base/half.h; they round exactly as that code does (the tests check).
// The tail runs the same scalar code lane by lane, so every ISA computes every element
// with the same operations and rounding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "base/reduce_ops.h"
#include "base/types.h"

#if defined(__x86_64__) && (defined(__AVX__) || defined(__AVX512F__))
// GCC 12 reports its own AVX-512 intrinsics' deliberately undefined pass-through
// operands as maybe-uninitialized once inlined (GCC bug 105593); the warning points
// into this header, so silencing it around the include silences nothing of ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#ifndef GYRE_REDUCE_ISA_NS
#error "define GYRE_REDUCE_ISA_NS before including host_kernels/reduce_impl.h"
#endif

namespace gyre {

// One ISA's loops, indexed by DataType and ReduceOp (the enums' values).
struct ReduceKernelTable {
  using ReduceFn = void (*)(void* dst0, void* dst1, const void* a, const void* b, size_t count,
                            uint32_t avgDivisor);
  using ScaleFn = void (*)(void* dst0, void* dst1, const void* src, size_t count,
                           uint32_t avgDivisor);
  ReduceFn reduce[kNumDataTypes][kNumReduceOps];
  ScaleFn scale[kNumDataTypes];  // avgDivisor > 0
};

const ReduceKernelTable& reduceKernelsPortable();
#if defined(__x86_64__)
const ReduceKernelTable& reduceKernelsAvx2();
const ReduceKernelTable& reduceKernelsAvx512();
#endif

namespace GYRE_REDUCE_ISA_NS {

#if defined(__AVX512F__)
inline constexpr size_t kVectorBytes = 64;
#elif defined(__AVX__)
inline constexpr size_t kVectorBytes = 32;
#else
inline constexpr size_t kVectorBytes = 16;
#endif
// Blocks per loop iteration, so that several loads are in flight.
inline constexpr size_t kUnroll = 4;

#define GYRE_REDUCE_INLINE inline __attribute__((always_inline))

// Copies kBytes as one unaligned vector load and store when kBytes is a register. A
// plain memcpy would do in principle, but GCC 12 expands a 32-byte memcpy under -mavx2
// as two 16-byte moves, the block then goes through the stack, and the store-forwarding
// stalls make the loop 4x slower.
template <size_t kBytes>
GYRE_REDUCE_INLINE void copyBlock(void* dst, const void* src) {
#if defined(__AVX512F__)
  if constexpr (kBytes == 64) {
    _mm512_storeu_si512(dst, _mm512_loadu_si512(src));
    return;
  }
#endif
#if defined(__AVX__) && defined(__x86_64__)
  if constexpr (kBytes == 32) {
    _mm256_storeu_si256(static_cast<__m256i*>(dst),
                        _mm256_loadu_si256(static_cast<const __m256i*>(src)));
    return;
  }
#endif
  std::memcpy(dst, src, kBytes);
}

// Vector float16/bfloat16 <-> float conversions, kWidth lanes at a time, for the ISAs
// that have them. VectorConvert<T>::kAvailable is false elsewhere.
template <typename T>
struct VectorConvert {
  static constexpr bool kAvailable = false;
};

#if defined(__AVX512F__) && defined(__AVX512BW__)
template <>
struct VectorConvert<Float16> {
  static constexpr bool kAvailable = true;
  static constexpr size_t kWidth = 16;
  static GYRE_REDUCE_INLINE void load(float* out, const void* src) {
    _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(src))));
  }
  static GYRE_REDUCE_INLINE void store(uint16_t* out, const float* in) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  }
};
template <>
struct VectorConvert<BFloat16> {
  static constexpr bool kAvailable = true;
  static constexpr size_t kWidth = 16;
  static GYRE_REDUCE_INLINE void load(float* out, const void* src) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(src)));
    _mm512_storeu_si512(out, _mm512_slli_epi32(w, 16));
  }
  // toBFloat16 of base/half.h, sixteen lanes at a time.
  static GYRE_REDUCE_INLINE void store(uint16_t* out, const float* in) {
    const __m512 f = _mm512_loadu_ps(in);
    const __m512i x = _mm512_castps_si512(f);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
  }
};
#elif defined(__AVX2__) && defined(__F16C__)
template <>
struct VectorConvert<Float16> {
  static constexpr bool kAvailable = true;
  static constexpr size_t kWidth = 8;
  static GYRE_REDUCE_INLINE void load(float* out, const void* src) {
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(src))));
  }
  static GYRE_REDUCE_INLINE void store(uint16_t* out, const float* in) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), h);
  }
};
template <>
struct VectorConvert<BFloat16> {
  static constexpr bool kAvailable = true;
  static constexpr size_t kWidth = 8;
  static GYRE_REDUCE_INLINE void load(float* out, const void* src) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(src)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_slli_epi32(w, 16));
  }
  // toBFloat16 of base/half.h, eight lanes at a time.
  static GYRE_REDUCE_INLINE void store(uint16_t* out, const float* in) {
    const __m256 f = _mm256_loadu_ps(in);
    const __m256i x = _mm256_castps_si256(f);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, bias), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(nan));
    // Every lane is <= 0xffff, so the unsigned saturation of packus never triggers.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
  }
};
#endif

// Lanes per block: one register of the compute type.
template <typename T>
inline constexpr size_t kLanes = kVectorBytes / sizeof(typename ElementTraits<T>::Compute);

// The element-wise work of one lane: op, then (for avg) rounding to T and finalising.
template <typename T, typename Op, bool kAvg>
GYRE_REDUCE_INLINE T reduceElement(T x, T y,
                                   const AvgFinalize<typename ElementTraits<T>::Compute>& fin) {
  using Traits = ElementTraits<T>;
  T r = Traits::store(Op()(Traits::load(x), Traits::load(y)));
  if constexpr (kAvg) r = Traits::store(fin(Traits::load(r)));
  return r;
}

// dst = a op b for the block at byte `offset`.
template <typename T, typename Op, bool kDual, bool kAvg>
GYRE_REDUCE_INLINE void reduceBlock(char* dst0, char* dst1, const char* a, const char* b,
                                    size_t offset,
                                    const AvgFinalize<typename ElementTraits<T>::Compute>& fin) {
  constexpr size_t kN = kLanes<T>;
  if constexpr (VectorConvert<T>::kAvailable) {
    using Convert = VectorConvert<T>;
    float va[kN], vb[kN];
    uint16_t bits[kN];
    for (size_t k = 0; k < kN; k += Convert::kWidth) {
      Convert::load(va + k, a + offset + 2 * k);
      Convert::load(vb + k, b + offset + 2 * k);
    }
    const Op op;
    for (size_t j = 0; j < kN; ++j) va[j] = op(va[j], vb[j]);
    if constexpr (kAvg) {
      // Round the sum to T before scaling, as two passes (sum, then scaleCopy) would.
      for (size_t k = 0; k < kN; k += Convert::kWidth) Convert::store(bits + k, va + k);
      for (size_t k = 0; k < kN; k += Convert::kWidth) Convert::load(va + k, bits + k);
      for (size_t j = 0; j < kN; ++j) va[j] = fin(va[j]);
    }
    for (size_t k = 0; k < kN; k += Convert::kWidth) Convert::store(bits + k, va + k);
    copyBlock<sizeof bits>(dst0 + offset, bits);
    if constexpr (kDual) copyBlock<sizeof bits>(dst1 + offset, bits);
  } else {
    T va[kN], vb[kN];
    copyBlock<sizeof va>(va, a + offset);
    copyBlock<sizeof vb>(vb, b + offset);
    for (size_t j = 0; j < kN; ++j) va[j] = reduceElement<T, Op, kAvg>(va[j], vb[j], fin);
    copyBlock<sizeof va>(dst0 + offset, va);
    if constexpr (kDual) copyBlock<sizeof va>(dst1 + offset, va);
  }
}

template <typename T, typename Op, bool kDual, bool kAvg>
void reduceLoop(char* dst0, char* dst1, const char* a, const char* b, size_t count,
                uint32_t avgDivisor) {
  constexpr size_t kN = kLanes<T>;
  const AvgFinalize<typename ElementTraits<T>::Compute> fin(kAvg ? avgDivisor : 1);
  size_t i = 0;
  for (; count - i >= kUnroll * kN; i += kUnroll * kN) {
#pragma GCC unroll 4
    for (size_t u = 0; u < kUnroll; ++u) {
      reduceBlock<T, Op, kDual, kAvg>(dst0, dst1, a, b, (i + u * kN) * sizeof(T), fin);
    }
  }
  for (; count - i >= kN; i += kN) {
    reduceBlock<T, Op, kDual, kAvg>(dst0, dst1, a, b, i * sizeof(T), fin);
  }
  for (; i < count; ++i) {
    const size_t offset = i * sizeof(T);
    T x, y;
    std::memcpy(&x, a + offset, sizeof x);
    std::memcpy(&y, b + offset, sizeof y);
    const T r = reduceElement<T, Op, kAvg>(x, y, fin);
    std::memcpy(dst0 + offset, &r, sizeof r);
    if constexpr (kDual) std::memcpy(dst1 + offset, &r, sizeof r);
  }
}

// dst = finalise(src) for the block at byte `offset`.
template <typename T, bool kDual>
GYRE_REDUCE_INLINE void scaleBlock(char* dst0, char* dst1, const char* src, size_t offset,
                                   const AvgFinalize<typename ElementTraits<T>::Compute>& fin) {
  constexpr size_t kN = kLanes<T>;
  if constexpr (VectorConvert<T>::kAvailable) {
    using Convert = VectorConvert<T>;
    float v[kN];
    uint16_t bits[kN];
    for (size_t k = 0; k < kN; k += Convert::kWidth) Convert::load(v + k, src + offset + 2 * k);
    for (size_t j = 0; j < kN; ++j) v[j] = fin(v[j]);
    for (size_t k = 0; k < kN; k += Convert::kWidth) Convert::store(bits + k, v + k);
    copyBlock<sizeof bits>(dst0 + offset, bits);
    if constexpr (kDual) copyBlock<sizeof bits>(dst1 + offset, bits);
  } else {
    using Traits = ElementTraits<T>;
    T v[kN];
    copyBlock<sizeof v>(v, src + offset);
    for (size_t j = 0; j < kN; ++j) v[j] = Traits::store(fin(Traits::load(v[j])));
    copyBlock<sizeof v>(dst0 + offset, v);
    if constexpr (kDual) copyBlock<sizeof v>(dst1 + offset, v);
  }
}

template <typename T, bool kDual>
void scaleLoop(char* dst0, char* dst1, const char* src, size_t count, uint32_t avgDivisor) {
  using Traits = ElementTraits<T>;
  constexpr size_t kN = kLanes<T>;
  const AvgFinalize<typename Traits::Compute> fin(avgDivisor);
  size_t i = 0;
  for (; count - i >= kN; i += kN) scaleBlock<T, kDual>(dst0, dst1, src, i * sizeof(T), fin);
  for (; i < count; ++i) {
    const size_t offset = i * sizeof(T);
    T x;
    std::memcpy(&x, src + offset, sizeof x);
    const T r = Traits::store(fin(Traits::load(x)));
    std::memcpy(dst0 + offset, &r, sizeof r);
    if constexpr (kDual) std::memcpy(dst1 + offset, &r, sizeof r);
  }
}

// The table's entries: resolve the run-time flags (second destination, avg) into
// template parameters once per call, so the loops carry no branches.
template <typename T, typename Op, bool kAvg>
void reduceEntry(void* dst0, void* dst1, const void* a, const void* b, size_t count,
                 uint32_t avgDivisor) {
  if constexpr (kAvg) {
    if (avgDivisor == 0) return reduceEntry<T, Op, false>(dst0, dst1, a, b, count, 0);
  }
  char* d0 = static_cast<char*>(dst0);
  char* d1 = static_cast<char*>(dst1);
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  if (d1 != nullptr) {
    reduceLoop<T, Op, true, kAvg>(d0, d1, pa, pb, count, avgDivisor);
  } else {
    reduceLoop<T, Op, false, kAvg>(d0, nullptr, pa, pb, count, avgDivisor);
  }
}

template <typename T>
void scaleEntry(void* dst0, void* dst1, const void* src, size_t count, uint32_t avgDivisor) {
  char* d0 = static_cast<char*>(dst0);
  const char* s = static_cast<const char*>(src);
  if (dst1 != nullptr) {
    scaleLoop<T, true>(d0, static_cast<char*>(dst1), s, count, avgDivisor);
  } else {
    scaleLoop<T, false>(d0, nullptr, s, count, avgDivisor);
  }
}

template <typename T>
constexpr void fillRow(ReduceKernelTable& table, DataType dtype) {
  auto& row = table.reduce[static_cast<int>(dtype)];
  row[static_cast<int>(ReduceOp::kSum)] = &reduceEntry<T, SumOp, false>;
  row[static_cast<int>(ReduceOp::kProd)] = &reduceEntry<T, ProdOp, false>;
  row[static_cast<int>(ReduceOp::kMin)] = &reduceEntry<T, MinOp, false>;
  row[static_cast<int>(ReduceOp::kMax)] = &reduceEntry<T, MaxOp, false>;
  row[static_cast<int>(ReduceOp::kAvg)] = &reduceEntry<T, SumOp, true>;
  table.scale[static_cast<int>(dtype)] = &scaleEntry<T>;
}

constexpr ReduceKernelTable makeKernelTable() {
  ReduceKernelTable table{};
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
  return table;
}

#undef GYRE_REDUCE_INLINE

}  // namespace GYRE_REDUCE_ISA_NS
}  // namespace gyre
