// Reduction arithmetic: what sum, prod, min, max and avg mean for each element type.
//
// Contract: the single definition of the element-wise operators, shared by the host
// reduction (host_kernels/reduce_impl.h) and device kernels (GYRE_HOST_DEVICE), so that host
// and device give the same bits. Stateless or immutable functors: safe from any thread.
//
// An element type T is loaded into its compute type (ElementTraits<T>::Compute), the
// operator runs there, and the result is stored back:
//   - integers compute in themselves; sum and prod wrap modulo 2^bits (done in
//     unsigned arithmetic, so signed overflow is never undefined behaviour);
//   - float32 and float64 compute in themselves (plain IEEE operations);
//   - float16 and bfloat16 compute in float and are rounded to nearest-even once per
//     binary operation, so a reduction of n inputs rounds n-1 times, whatever the ISA.
// NaN: min and max propagate it (if either input is NaN the result is NaN), and every
// NaN that sum, prod, min, max or the avg scaling produces is the canonical quiet NaN
// (positive, payload 0: 0x7fc00000 as float, 0x7e00 as float16, 0x7fc0 as bfloat16).
// Why: the hardware picks the payload of NaN + NaN from operand order, which the
// compiler may swap between the vector body and the scalar tail, and GPUs return their
// own default NaN; a canonical NaN keeps every ISA and device bit-identical.
// For operands that compare equal, such as -0.0 and +0.0, min and max return b.
// Avg is sum followed by AvgFinalize: floating types multiply by 1/n computed in the
// compute type (float for float16/bfloat16/float32, double for float64); integers
// divide by n, truncating toward zero as C++ does.
// Requires IEEE semantics: do not compile users of this header with -ffast-math.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/half.h"

namespace gyre {

template <typename T>
struct ElementTraits {
  static_assert(std::is_arithmetic_v<T>, "no reduction defined for this element type");
  using Compute = T;
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE static Compute load(T x) { return x; }
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE static T store(Compute c) { return c; }
};

template <>
struct ElementTraits<Float16> {
  using Compute = float;
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE static float load(Float16 x) { return toFloat(x); }
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE static Float16 store(float c) { return toFloat16(c); }
};

template <>
struct ElementTraits<BFloat16> {
  using Compute = float;
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE static float load(BFloat16 x) { return toFloat(x); }
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE static BFloat16 store(float c) { return toBFloat16(c); }
};

namespace reduce_ops_detail {

// The unsigned type in which C's sum and product wrap without undefined behaviour. At
// least `unsigned`, because narrower unsigned types promote to (signed) int.
template <typename C>
using WrapType = std::common_type_t<std::make_unsigned_t<C>, unsigned>;

template <typename C>
GYRE_HOST_DEVICE GYRE_FORCE_INLINE C canonicalNaN() {
  if constexpr (sizeof(C) == 4) {
    return half_detail::bitsFloat(0x7fc00000u);
  } else {
    static_assert(sizeof(C) == 8);
    const uint64_t bits = 0x7ff8000000000000u;
    C value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
}

// Written as selects on masks so that they vectorise to compare + blend.
template <typename C>
GYRE_HOST_DEVICE GYRE_FORCE_INLINE C canonicalizeNaN(C x) {
  return x != x ? canonicalNaN<C>() : x;
}

}  // namespace reduce_ops_detail

struct SumOp {
  template <typename C>
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      using W = reduce_ops_detail::WrapType<C>;
      return static_cast<C>(static_cast<W>(a) + static_cast<W>(b));
    } else {
      return reduce_ops_detail::canonicalizeNaN(a + b);
    }
  }
};

struct ProdOp {
  template <typename C>
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      using W = reduce_ops_detail::WrapType<C>;
      return static_cast<C>(static_cast<W>(a) * static_cast<W>(b));
    } else {
      return reduce_ops_detail::canonicalizeNaN(a * b);
    }
  }
};

// Not std::fmin/fmax: they return the other operand when one is NaN, hiding it.
struct MinOp {
  template <typename C>
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return a < b ? a : b;
    } else {
      return (a != a || b != b) ? reduce_ops_detail::canonicalNaN<C>() : (a < b ? a : b);
    }
  }
};

struct MaxOp {
  template <typename C>
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return a > b ? a : b;
    } else {
      return (a != a || b != b) ? reduce_ops_detail::canonicalNaN<C>() : (a > b ? a : b);
    }
  }
};

// Turns a sum of n contributions into their average. n must be > 0.
template <typename C>
struct AvgFinalize {
  GYRE_HOST_DEVICE GYRE_FORCE_INLINE explicit AvgFinalize(uint32_t n) {
    if constexpr (std::is_floating_point_v<C>) {
      // One reciprocal per call, one multiply per element: a division per element would
      // cost more than the memory traffic. This is not always the correctly rounded x/n.
      factor = C(1) / static_cast<C>(n);
    } else {
      factor = n;
    }
  }

  GYRE_HOST_DEVICE GYRE_FORCE_INLINE C operator()(C x) const {
    if constexpr (std::is_floating_point_v<C>) {
      return reduce_ops_detail::canonicalizeNaN(x * factor);
    } else if constexpr (sizeof(C) <= 4) {
      // Integer division does not vectorise; double division does, and gives the same
      // result here: for |x| < 2^32 the quotient's rounding error, below |x|/n * 2^-53,
      // is less than 1/n, its least distance to an integer it is not, so truncation
      // lands on the same integer as x / n.
      const double q = static_cast<double>(x) / static_cast<double>(factor);
      if constexpr (std::is_signed_v<C>) {
        return static_cast<C>(static_cast<int32_t>(q));
      } else {
        return static_cast<C>(static_cast<uint32_t>(q));
      }
    } else if constexpr (std::is_signed_v<C>) {
      return static_cast<C>(x / static_cast<int64_t>(factor));
    } else {
      return static_cast<C>(x / factor);
    }
  }

  // 1/n for floating types, n for integers.
  std::conditional_t<std::is_floating_point_v<C>, C, uint32_t> factor;
};

}  // namespace gyre
