// The arithmetic the schedules share: powers of two of a rank count, the walk over a
// buffer one slice at a time, and whether two buffers share a byte.
//
// Contract: pure functions, no state; any thread. floorLog2 and lowerPowerOfTwo take
// n >= 1. forEachSlice takes slice >= 1 (kInternal otherwise: a schedule would loop
// forever).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/error.h"

namespace gyre {

// floor(log2(n)): 0 for 1, 2 for 4..7.
constexpr int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

// The largest power of two <= n: recursive doubling's group, the double tree's root.
constexpr int lowerPowerOfTwo(int n) { return 1 << floorLog2(n); }

// Calls body(offset, len) for the slices [offset, offset + len) of `count` elements,
// `slice` at a time, in order: ceil(count / slice) calls, and for count 0 exactly one,
// body(0, 0). That one pass is what makes a call of count 0 still exchange its tag with
// the peers, so a rank that runs a different call fails with kMismatch instead of
// skipping it silently.
template <typename Body>
void forEachSlice(size_t count, size_t slice, Body&& body) {
  if (slice == 0) fail(ErrorCode::kInternal, "forEachSlice: a slice of 0 elements");
  size_t offset = 0;
  do {
    body(offset, std::min(slice, count - offset));
    offset += slice;
  } while (offset < count);
}

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte (never for an empty one).
inline bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return aBytes && bBytes && x < y + bBytes && y < x + aBytes;
}

}  // namespace gyre
