// CheckPattern: inputs for gyre-bench's -c 1 whose reduction is exact in any order, and
// the result every rank must then hold, for each data type and reduction; and the
// helpers that lay such periods over buffers and count the elements that differ.
//
// Contract: makePattern(dtype, op, rank, n) gives this rank's inputs and the expected
// output over one period of kPeriod elements; element i of a buffer uses position
// i % kPeriod. Every partial result of every reduction order is exactly representable
// in the data type (small integers; at most 8 factors of 2 and |sum| <= 256 for half and
// bfloat16), so #wrong is an exact count, as in nccl-tests. Avg follows gyre's contract
// (base/reduce_ops.h): integers divide truncating; floats multiply by 1/n in the
// compute type, so only averages that this leaves exact are used. The inputs are also
// chosen to expose signedness mistakes (values that order differently as signed and as
// unsigned). The expected values are computed independently of gyre's reduction code.
// Pure functions; safe from any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/types.h"

namespace gyre::bench {

// The inputs repeat with this period, so the expected result is tabulated once instead
// of being recomputed over all ranks per element. 61*16 is no divisor of a power of two:
// a chunk landing at a power-of-two offset from where it belongs still reads as wrong.
constexpr size_t kPeriod = 61 * 16;

// This rank's inputs and the expected result for one dtype and op, one period each, as
// raw element bytes; `poison` differs from `expected` in every byte.
struct CheckPattern {
  size_t elemSize = 0;
  std::vector<std::byte> input, expected, poison, neutral;  // neutral: one element
};

namespace check_detail {

// Values are computed exactly in a wide type W and stored in the element type T.
template <typename T>
struct Element {
  using W = std::conditional_t<std::is_floating_point_v<T>, double,
                               std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  static T store(W w) { return static_cast<T>(w); }
};
template <>
struct Element<Float16> {
  using W = double;
  static Float16 store(double w) { return toFloat16(static_cast<float>(w)); }
};
template <>
struct Element<BFloat16> {
  using W = double;
  static BFloat16 store(double w) { return toBFloat16(static_cast<float>(w)); }
};

// Bounds that keep every partial result exact in T, whatever the reduction order.
struct ValueRules {
  int64_t sumRange = 0;           // sum and avg inputs: [-r, r] (signed, floats), [0, r] (unsigned)
  int maxTwos = 0;                // prod inputs are 1, -1 (signed) and at most this many 2s
  std::vector<int64_t> exactAvg;  // floats: averages k for which n*k * (1/n) == k exactly
};

template <typename T>
ValueRules valueRules(int n) {
  constexpr bool kHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
  constexpr bool kFloat = kHalf || std::is_floating_point_v<T>;
  // Exact integer ranges: int8 127, uint8 255; bfloat16 has 8 significand bits, so 256
  // (float16 has 11, but both are held to 256); the wider types are far from any limit.
  int64_t bound = 1 << 20;
  int maxTwos = 30;
  if constexpr (kHalf) {
    bound = 256;
    maxTwos = 8;
  } else if constexpr (sizeof(T) == 1) {
    bound = std::numeric_limits<T>::max();
    maxTwos = std::is_signed_v<T> ? 6 : 7;
  }
  ValueRules rules;
  rules.sumRange = std::min<int64_t>(std::is_signed_v<T> || kFloat ? 30 : 127, bound / n);
  rules.maxTwos = maxTwos;
  if constexpr (kFloat) {
    // Avg on floats is sum * (1/n) in the compute type (float, or double for double), not
    // always the correctly rounded n*k/n: keep the k for which both give exactly k.
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const int64_t kMax = rules.sumRange / 2;
    for (int64_t k = -kMax; k <= kMax; ++k) {
      C sum = static_cast<C>(n * k);
      if (sum * (C(1) / static_cast<C>(n)) == static_cast<C>(k)) rules.exactAvg.push_back(k);
    }
  }
  return rules;
}

// Rank r's input at period position q.
template <typename T>
typename Element<T>::W inputValue(ReduceOp op, size_t q, int r, int n, const ValueRules& rules) {
  using W = typename Element<T>::W;
  constexpr bool kUnsigned = std::is_unsigned_v<W>;
  const auto ur = static_cast<size_t>(r);
  const int64_t h = static_cast<int64_t>((q * 7 + ur * 13) % 61);
  // Unsigned sums use their whole exact range: a uint8 sum over 127 then reads
  // differently as int8, so an avg that divides with the wrong signedness shows.
  const W unsignedSummand =
      static_cast<W>((q * 7 + ur * 13) % static_cast<size_t>(rules.sumRange + 1));
  switch (op) {
    case ReduceOp::kSum:
      if constexpr (kUnsigned) return unsignedSummand;
      return static_cast<W>(h % (2 * rules.sumRange + 1) - rules.sumRange);
    case ReduceOp::kAvg:
      if constexpr (std::is_floating_point_v<W>) {
        // k plus a part that cancels between rank pairs (2j, 2j+1), so the sum is n*k.
        const int64_t k = rules.exactAvg[q % rules.exactAvg.size()];
        const int64_t spread = rules.sumRange - rules.sumRange / 2;
        const int64_t e = static_cast<int64_t>(q * 5 % static_cast<size_t>(spread + 1));
        const bool paired = r < n - n % 2;
        return static_cast<W>(k + (!paired ? 0 : r % 2 == 0 ? e : -e));
      } else if constexpr (kUnsigned) {
        return unsignedSummand;
      } else {
        return static_cast<W>(h % (2 * rules.sumRange + 1) - rules.sumRange);  // truncation
      }
    case ReduceOp::kProd: {
      // Exactly `twos` ranks contribute a 2 at q, so |product| <= 2^maxTwos.
      const size_t twos = q % (static_cast<size_t>(std::min(n, rules.maxTwos)) + 1);
      if ((ur + q) % static_cast<size_t>(n) < twos) return 2;
      if (!kUnsigned && (ur * 3 + q) % 7 == 0) return static_cast<W>(-1);
      return 1;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      // Unsigned: small values mixed with values near the top, whose order a signed
      // comparison would get wrong.
      if constexpr (kUnsigned) {
        return h % 2 == 0 ? static_cast<W>(h) : static_cast<W>(std::numeric_limits<T>::max()) - h;
      }
      return static_cast<W>(h - 30);
  }
  return 0;
}

template <typename T>
CheckPattern makePatternFor(ReduceOp op, int rank, int n) {
  using W = typename Element<T>::W;
  const ValueRules rules = valueRules<T>(n);
  std::vector<T> input(kPeriod), expected(kPeriod);
  for (size_t q = 0; q < kPeriod; ++q) {
    W acc{};
    for (int r = 0; r < n; ++r) {
      W v = inputValue<T>(op, q, r, n, rules);
      if (r == rank) input[q] = Element<T>::store(v);
      if (r == 0) {
        acc = v;
      } else if (op == ReduceOp::kProd) {
        acc *= v;
      } else if (op == ReduceOp::kMin) {
        acc = std::min(acc, v);
      } else if (op == ReduceOp::kMax) {
        acc = std::max(acc, v);
      } else {
        acc += v;
      }
    }
    if (op == ReduceOp::kAvg) acc /= static_cast<W>(n);  // integers truncate; floats exact
    expected[q] = Element<T>::store(acc);
  }
  CheckPattern p;
  p.elemSize = sizeof(T);
  auto bytes = [](const std::vector<T>& v) {
    const auto* b = reinterpret_cast<const std::byte*>(v.data());
    return std::vector<std::byte>(b, b + v.size() * sizeof(T));
  };
  p.input = bytes(input);
  p.expected = bytes(expected);
  p.poison = p.expected;
  for (std::byte& b : p.poison) b = ~b;
  p.neutral = bytes({Element<T>::store(op == ReduceOp::kProd ? W(1) : W(0))});
  return p;
}

}  // namespace check_detail

inline CheckPattern makePattern(DataType t, ReduceOp op, int rank, int n) {
  using check_detail::makePatternFor;
  switch (t) {
    case DataType::kInt8:
      return makePatternFor<int8_t>(op, rank, n);
    case DataType::kUint8:
      return makePatternFor<uint8_t>(op, rank, n);
    case DataType::kInt32:
      return makePatternFor<int32_t>(op, rank, n);
    case DataType::kUint32:
      return makePatternFor<uint32_t>(op, rank, n);
    case DataType::kInt64:
      return makePatternFor<int64_t>(op, rank, n);
    case DataType::kUint64:
      return makePatternFor<uint64_t>(op, rank, n);
    case DataType::kFloat16:
      return makePatternFor<Float16>(op, rank, n);
    case DataType::kBFloat16:
      return makePatternFor<BFloat16>(op, rank, n);
    case DataType::kFloat32:
      return makePatternFor<float>(op, rank, n);
    case DataType::kFloat64:
      return makePatternFor<double>(op, rank, n);
  }
  fail(ErrorCode::kInternal, "no check pattern for data type {}", static_cast<int>(t));
}

// Repeats `period` (whole elements of `elemSize` bytes) over `count` elements of `dst`,
// starting at element `phase` of the period: dst[i] = period[(phase + i) % length].
inline void tile(std::byte* dst, size_t count, const std::vector<std::byte>& period,
                 size_t elemSize, size_t phase = 0) {
  const size_t periodCount = period.size() / elemSize;
  phase %= periodCount;
  const size_t head = std::min(count, periodCount - phase);
  std::memcpy(dst, period.data() + phase * elemSize, head * elemSize);
  for (size_t i = head; i < count; i += periodCount) {
    std::memcpy(dst + i * elemSize, period.data(), std::min(periodCount, count - i) * elemSize);
  }
}

// How many of the `count` elements at `out` differ from `period` repeated from element
// `phase` on (what tile() writes).
inline size_t countWrong(const std::byte* out, size_t count, const std::vector<std::byte>& period,
                         size_t elemSize, size_t phase = 0) {
  const size_t s = elemSize;
  const size_t periodCount = period.size() / s;
  size_t q = phase % periodCount;  // period position of out[i]
  size_t wrong = 0;
  for (size_t i = 0; i < count;) {
    const size_t m = std::min(periodCount - q, count - i);
    const std::byte* got = out + i * s;
    const std::byte* want = period.data() + q * s;
    if (std::memcmp(got, want, m * s) != 0) {
      for (size_t j = 0; j < m; ++j) wrong += std::memcmp(got + j * s, want + j * s, s) != 0;
    }
    i += m;
    q = 0;
  }
  return wrong;
}

// How many of the `count` elements at `out` differ from the expected result.
inline size_t countWrong(const std::byte* out, size_t count, const CheckPattern& p) {
  return countWrong(out, count, p.expected, p.elemSize);
}

// Rank `rank`'s data for the collectives that only move data (broadcast, all-gather,
// all-to-all, send/recv), one period: the max inputs, which differ between any two of
// up to 61 ranks at every position, so data from the wrong rank always reads as wrong.
inline std::vector<std::byte> movedInput(DataType t, int rank, int n) {
  return makePattern(t, ReduceOp::kMax, rank, n).input;
}

// The byte-wise complement of `period`: differs from it in every byte.
inline std::vector<std::byte> complement(std::vector<std::byte> period) {
  for (std::byte& b : period) b = ~b;
  return period;
}

}  // namespace gyre::bench
