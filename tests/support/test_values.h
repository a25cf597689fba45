// Inputs whose reductions are exact in any order, and element access by DataType,
// shared by the multi-process collective tests.
//
// Every value is a small integer, so sums, products, minima and maxima of up to 8
// ranks are exactly representable in every dtype (bfloat16 holds integers up to 256
// exactly; the largest |sum| here is 8 * 10 = 80). The expected result is computed in
// int64 and compared bit for bit after conversion to the dtype.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/half.h"
#include "base/types.h"
#include "host_kernels/reduce.h"

namespace gyre::testing {

inline bool isSigned(DataType t) {
  return t != DataType::kUint8 && t != DataType::kUint32 && t != DataType::kUint64;
}

// Value rank r contributes at index i for op.
inline int64_t inputValue(DataType t, ReduceOp op, int r, size_t i) {
  const int64_t k = static_cast<int64_t>((i * 7 + static_cast<size_t>(r) * 13) % 11);
  switch (op) {
    case ReduceOp::kProd:
      // At most three ranks in eight contribute a 2, at most one in three a -1.
      if ((i + static_cast<size_t>(r)) % 3 == 0 && isSigned(t)) return -1;
      return (i + static_cast<size_t>(r)) % 4 == 1 ? 2 : 1;
    default:
      return isSigned(t) ? k - 5 : k;
  }
}

inline void store(DataType t, void* buf, size_t i, int64_t v) {
  switch (t) {
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = v; break;
    case DataType::kUint64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v); break;
    case DataType::kFloat16:
      static_cast<Float16*>(buf)[i] = toFloat16(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<BFloat16*>(buf)[i] = toBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = static_cast<double>(v); break;
  }
}

// Exact reduction over `size` ranks, as int64.
inline int64_t expectedValue(DataType t, ReduceOp op, int size, size_t i) {
  int64_t acc = inputValue(t, op, 0, i);
  for (int r = 1; r < size; ++r) {
    int64_t v = inputValue(t, op, r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  return acc;
}

// The expected output buffer: exact values; for avg the exact sum finalised once by
// the library's tested scaleCopy (floats multiply by 1/n, integers divide).
inline std::vector<std::byte> expectedBuffer(DataType t, ReduceOp op, int size, size_t count) {
  std::vector<std::byte> out(count * dtypeSize(t) + 1);
  for (size_t i = 0; i < count; ++i) store(t, out.data(), i, expectedValue(t, op, size, i));
  if (op == ReduceOp::kAvg && count > 0) {
    scaleCopy(out.data(), nullptr, out.data(), count, t, static_cast<uint32_t>(size));
  }
  return out;
}

inline std::vector<std::byte> inputBuffer(DataType t, ReduceOp op, int rank, size_t count) {
  std::vector<std::byte> out(count * dtypeSize(t) + 1);
  for (size_t i = 0; i < count; ++i) store(t, out.data(), i, inputValue(t, op, rank, i));
  return out;
}

// memcmp that allows empty ranges with null pointers (an empty vector's data()), which
// memcmp itself does not.
inline bool sameBytes(const void* a, const void* b, size_t bytes) {
  return bytes == 0 || std::memcmp(a, b, bytes) == 0;
}

inline uint64_t checksum(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Throws (inside a spawned rank, where gtest assertions would not reach the parent).
template <typename... Args>
void check(bool ok, fmt::format_string<Args...> f, Args&&... args) {
  if (!ok) throw std::runtime_error(fmt::format(f, std::forward<Args>(args)...));
}

inline constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,    DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64,   DataType::kFloat16, DataType::kBFloat16,
    DataType::kFloat32, DataType::kFloat64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kAvg};

}  // namespace gyre::testing
