// The host reduction's reference, written from its contract (host_kernels/reduce.h), not
// from base/reduce_ops.h: what every element of reduceCopy and scaleCopy must be, bit for
// bit, for every dtype and op. Integers wrap, and avg divides the wrapped sum (truncating);
// floats compute in their own type, float16 and bfloat16 in float, rounded once per
// operation; a NaN operand gives the canonical quiet NaN; min and max of equal operands
// give the second; avg multiplies the rounded sum by 1/divisor. reduce_test.cc checks
// every ISA against it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/half.h"
#include "base/types.h"

namespace gyre::reduce_reference {

template <typename T>
T loadAt(const uint8_t* p, size_t i) {
  T x;
  std::memcpy(&x, p + i * sizeof(T), sizeof x);
  return x;
}

template <typename T>
T referenceInteger(ReduceOp op, T a, T b, uint32_t divisor) {
  using U = std::make_unsigned_t<T>;
  T r{};
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      r = static_cast<T>(static_cast<U>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)));
      break;
    case ReduceOp::kProd:
      r = static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) *
                                        static_cast<uint64_t>(static_cast<U>(b))));
      break;
    case ReduceOp::kMin:
      r = a < b ? a : b;
      break;
    case ReduceOp::kMax:
      r = a > b ? a : b;
      break;
  }
  if (op == ReduceOp::kAvg && divisor > 0) {
    if constexpr (std::is_signed_v<T>) {
      r = static_cast<T>(static_cast<int64_t>(r) / static_cast<int64_t>(divisor));
    } else {
      r = static_cast<T>(static_cast<uint64_t>(r) / divisor);
    }
  }
  return r;
}

// T is stored, F computed in: the codecs convert between them.
template <typename T, typename F>
struct Codec {
  static F in(T x) {
    if constexpr (std::is_same_v<T, F>) {
      return x;
    } else {
      return toFloat(x);
    }
  }
  static T out(F f) {
    if constexpr (std::is_same_v<T, Float16>) {
      return toFloat16(f);
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return toBFloat16(f);
    } else {
      return f;
    }
  }
};

template <typename F>
F canonical(F x) {
  return std::isnan(x) ? std::numeric_limits<F>::quiet_NaN() : x;
}

template <typename T, typename F>
T referenceFloating(ReduceOp op, T ta, T tb, uint32_t divisor) {
  using C = Codec<T, F>;
  const F a = C::in(ta), b = C::in(tb);
  const bool nan = std::isnan(a) || std::isnan(b);
  F r{};
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      r = a + b;
      break;
    case ReduceOp::kProd:
      r = a * b;
      break;
    case ReduceOp::kMin:
      r = nan ? NAN : (a < b ? a : b);  // equal operands (-0, +0): b
      break;
    case ReduceOp::kMax:
      r = nan ? NAN : (a > b ? a : b);
      break;
  }
  T t = C::out(canonical(r));
  if (op == ReduceOp::kAvg && divisor > 0) {
    t = C::out(canonical(C::in(t) * (F(1) / static_cast<F>(divisor))));
  }
  return t;
}

template <typename T>
T referenceElement(ReduceOp op, T a, T b, uint32_t divisor) {
  if constexpr (std::is_integral_v<T>) {
    return referenceInteger(op, a, b, divisor);
  } else if constexpr (std::is_floating_point_v<T>) {
    return referenceFloating<T, T>(op, a, b, divisor);
  } else {
    return referenceFloating<T, float>(op, a, b, divisor);
  }
}

template <typename T>
std::vector<uint8_t> referenceTyped(ReduceOp op, const uint8_t* a, const uint8_t* b, size_t n,
                                    uint32_t divisor) {
  std::vector<uint8_t> out(n * sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    const T r = referenceElement<T>(op, loadAt<T>(a, i), loadAt<T>(b, i), divisor);
    std::memcpy(out.data() + i * sizeof(T), &r, sizeof r);
  }
  return out;
}

template <typename T>
std::vector<uint8_t> referenceScaleTyped(const uint8_t* src, size_t n, uint32_t divisor) {
  std::vector<uint8_t> out(n * sizeof(T));
  for (size_t i = 0; i < n; ++i) {
    const T x = loadAt<T>(src, i);
    T r;
    if constexpr (std::is_integral_v<T>) {
      r = referenceInteger<T>(ReduceOp::kAvg, x, T{0}, divisor);  // x + 0 == x
    } else {
      using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
      using C = Codec<T, F>;
      r = C::out(canonical(C::in(x) * (F(1) / static_cast<F>(divisor))));
    }
    std::memcpy(out.data() + i * sizeof(T), &r, sizeof r);
  }
  return out;
}

// Calls f(std::type_identity<T>{}) for the element type T of dtype.
template <typename F>
std::vector<uint8_t> withType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kInt8:
      return f(std::type_identity<int8_t>{});
    case DataType::kUint8:
      return f(std::type_identity<uint8_t>{});
    case DataType::kInt32:
      return f(std::type_identity<int32_t>{});
    case DataType::kUint32:
      return f(std::type_identity<uint32_t>{});
    case DataType::kInt64:
      return f(std::type_identity<int64_t>{});
    case DataType::kUint64:
      return f(std::type_identity<uint64_t>{});
    case DataType::kFloat16:
      return f(std::type_identity<Float16>{});
    case DataType::kBFloat16:
      return f(std::type_identity<BFloat16>{});
    case DataType::kFloat32:
      return f(std::type_identity<float>{});
    case DataType::kFloat64:
      return f(std::type_identity<double>{});
  }
  return {};
}

inline std::vector<uint8_t> reference(DataType dtype, ReduceOp op, const uint8_t* a,
                                      const uint8_t* b, size_t n, uint32_t divisor) {
  return withType(dtype, [&](auto tag) {
    return referenceTyped<typename decltype(tag)::type>(op, a, b, n, divisor);
  });
}

inline std::vector<uint8_t> referenceScale(DataType dtype, const uint8_t* src, size_t n,
                                           uint32_t divisor) {
  return withType(dtype, [&](auto tag) {
    return referenceScaleTyped<typename decltype(tag)::type>(src, n, divisor);
  });
}

}  // namespace gyre::reduce_reference
