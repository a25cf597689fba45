// Float16 (IEEE 754 binary16) and BFloat16 storage types and their conversions to float.
//
// Contract: Float16 and BFloat16 are trivial 2-byte wrappers around the bit pattern; no
// arithmetic is defined on them, callers convert to float, compute, and convert back.
// float -> half rounds to nearest, ties to even, overflows to infinity and produces
// subnormals; half -> float is exact. NaNs stay NaNs with the sign kept and the quiet
// bit set, the payload truncated to what fits, which is what x86 F16C
// (vcvtps2ph/vcvtph2ps) does: the vectorised host reduction uses those instructions and
// must match this scalar code bit for bit (tests/reduce_test.cc checks it). BFloat16
// follows the same NaN rule, so that no conversion ever turns a NaN into infinity.
// The code depends neither on the floating-point environment (rounding mode,
// FTZ/DAZ) nor on any library, so the same functions compile under nvcc for device
// code and give device and host the same bits. Pure functions: safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GYRE_HOST_DEVICE __host__ __device__
#define GYRE_FORCE_INLINE __forceinline__
#else
#define GYRE_HOST_DEVICE
// Always inlined, not merely inline: the host reduction includes these functions in
// translation units built for different ISAs (-mavx512f, ...). An out-of-line copy
// would be one COMDAT symbol that the linker may take from the AVX-512 unit and call
// from the portable one, which faults on a CPU without AVX-512.
#define GYRE_FORCE_INLINE inline __attribute__((always_inline))
#endif

namespace gyre {

struct Float16 {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(Float16) == 2 && sizeof(BFloat16) == 2);

namespace half_detail {

// std::bit_cast is not usable in device code; memcpy of 4 bytes compiles to a move.
GYRE_HOST_DEVICE GYRE_FORCE_INLINE uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
GYRE_HOST_DEVICE GYRE_FORCE_INLINE float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace half_detail

// Both directions compute every case and select one, without branches: the loops that
// call them then vectorise where the ISA allows it, and random data costs no mispredicts.
GYRE_HOST_DEVICE GYRE_FORCE_INLINE float toFloat(Float16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t magnitude = h.bits & 0x7fffu;
  const uint32_t normal = (magnitude << 13) + ((127u - 15u) << 23);  // rebias the exponent
  // Infinity, or NaN made quiet (as vcvtph2ps does).
  const uint32_t special = (magnitude << 13) | 0x7f800000u | (magnitude > 0x7c00u ? 0x400000u : 0u);
  // Zero or subnormal: magnitude * 2^-24. Exact, and the result is a normal float, so
  // neither the rounding mode nor FTZ/DAZ can change it.
  const uint32_t subnormal =
      half_detail::floatBits(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  const uint32_t bits = magnitude >= 0x7c00u ? special : magnitude >= 0x400u ? normal : subnormal;
  return half_detail::bitsFloat(sign | bits);
}

GYRE_HOST_DEVICE GYRE_FORCE_INLINE Float16 toFloat16(float f) {
  const uint32_t x = half_detail::floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // NaN: quiet it, keep the top payload bits (as vcvtps2ph).
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  // Normal half (ax >= 2^-14): rebias, then round to nearest even on the 13 lost bits.
  uint32_t normal = ax - ((127u - 15u) << 23);
  normal = (normal + 0xfffu + ((normal >> 13) & 1u)) >> 13;
  // Subnormal half: the result counts units of 2^-24. The float is m * 2^(e-150) with a
  // 24-bit m, so the count is m >> (126 - e), rounded to nearest even; a carry may
  // reach 0x400, the smallest normal, which is the right encoding. Below 2^-25 (e <
  // 102) the result is 0, which a shift of 31 also gives; 31 also keeps the shifts
  // defined for the exponents whose result is not chosen.
  const uint32_t exponent = ax >> 23;
  const uint32_t shift = exponent >= 102 && exponent <= 112 ? 126u - exponent : 31u;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  uint32_t subnormal = m >> shift;
  subnormal += (rem > halfway) | ((rem == halfway) & subnormal);
  // 65520 (0x477ff000) is halfway between the largest half, 65504, and 2^16; the tie
  // goes to the even neighbour, which is infinity.
  const uint32_t bits = ax > 0x7f800000u    ? nan
                        : ax >= 0x477ff000u ? 0x7c00u
                        : ax >= 0x38800000u ? normal
                                            : subnormal;
  return Float16{static_cast<uint16_t>(sign | bits)};
}

GYRE_HOST_DEVICE GYRE_FORCE_INLINE float toFloat(BFloat16 h) {
  return half_detail::bitsFloat(static_cast<uint32_t>(h.bits) << 16);
}

GYRE_HOST_DEVICE GYRE_FORCE_INLINE BFloat16 toBFloat16(float f) {
  const uint32_t x = half_detail::floatBits(f);
  // NaN: truncating could drop every payload bit and leave infinity; quiet it instead.
  const uint32_t nan = (x >> 16) | 0x40u;
  // Round to nearest even on the 16 dropped bits; a carry out of the largest finite
  // value correctly becomes infinity.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return BFloat16{static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}

}  // namespace gyre
