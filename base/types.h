// Data types and reduction operators: the vocabulary shared by every layer.
//
// Contract: plain enums plus pure helper functions; no state, safe from any thread.
// The numeric values are part of the wire protocol (they travel in collective
// fingerprints) and of the C API, so append only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/export.h"

namespace gyre {

enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,  // sum, then scaled by 1/n (floats) or divided by n (integers)
};
inline constexpr int kNumReduceOps = 5;

inline bool isValid(DataType t) { return static_cast<unsigned>(t) < kNumDataTypes; }
inline bool isValid(ReduceOp op) { return static_cast<unsigned>(op) < kNumReduceOps; }

// Bytes per element; 0 for an invalid type.
GYRE_API size_t dtypeSize(DataType t);
GYRE_API bool isFloating(DataType t);
GYRE_API const char* dtypeName(DataType t);  // "float", "bfloat16", ... ("?" if invalid)
GYRE_API const char* opName(ReduceOp op);    // "sum", "prod", ... ("?" if invalid)

}  // namespace gyre
