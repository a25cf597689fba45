// The schedules' shared arithmetic: forEachSlice visits every element once, in order, in
// slices of at most `slice`, and makes exactly one empty pass for count 0 (what keeps a
// mismatched call of count 0 from being skipped); floorLog2 and lowerPowerOfTwo agree
// with the definitions for every rank count a test could use; overlaps sees a shared
// byte and nothing else.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "base/error.h"
#include "collectives/schedule_math.h"

namespace gyre {
namespace {

std::vector<std::pair<size_t, size_t>> slicesOf(size_t count, size_t slice) {
  std::vector<std::pair<size_t, size_t>> calls;
  forEachSlice(count, slice, [&](size_t offset, size_t len) { calls.emplace_back(offset, len); });
  return calls;
}

TEST(ForEachSlice, CountZeroMakesExactlyOneEmptyPass) {
  for (size_t slice : {size_t{1}, size_t{7}, size_t{1} << 20}) {
    EXPECT_EQ(slicesOf(0, slice), (std::vector<std::pair<size_t, size_t>>{{0, 0}})) << slice;
  }
}

TEST(ForEachSlice, CoversEveryElementOnceInOrder) {
  for (size_t slice = 1; slice <= 9; ++slice) {
    for (size_t count = 1; count <= 40; ++count) {
      const auto calls = slicesOf(count, slice);
      ASSERT_EQ(calls.size(), (count + slice - 1) / slice) << count << "/" << slice;
      size_t next = 0;
      for (const auto& [offset, len] : calls) {
        EXPECT_EQ(offset, next) << count << "/" << slice;
        EXPECT_GE(len, 1u);
        EXPECT_LE(len, slice);
        next = offset + len;
      }
      EXPECT_EQ(next, count) << count << "/" << slice;
      // Every slice but the last is full.
      for (size_t i = 0; i + 1 < calls.size(); ++i) EXPECT_EQ(calls[i].second, slice);
    }
  }
}

TEST(ForEachSlice, ZeroSliceIsAnInternalErrorNotAnEndlessLoop) {
  try {
    forEachSlice(5, 0, [](size_t, size_t) {});
    FAIL() << "a slice of 0 elements was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
  }
}

TEST(ScheduleMath, PowersOfTwo) {
  static_assert(floorLog2(1) == 0 && floorLog2(2) == 1 && floorLog2(3) == 1 &&
                floorLog2(8) == 3 && lowerPowerOfTwo(7) == 4 && lowerPowerOfTwo(8) == 8);
  for (int n = 1; n <= 4096; ++n) {
    const int p = lowerPowerOfTwo(n);
    EXPECT_EQ(p, 1 << floorLog2(n)) << n;
    EXPECT_TRUE(p <= n && n < 2 * p) << n;
    EXPECT_EQ(p & (p - 1), 0) << n;
  }
}

TEST(ScheduleMath, OverlapsMeansAtLeastOneSharedByte) {
  char buf[16];
  EXPECT_TRUE(overlaps(buf, 8, buf + 7, 1));
  EXPECT_TRUE(overlaps(buf + 7, 4, buf, 8));
  EXPECT_TRUE(overlaps(buf, 16, buf + 4, 4));  // one inside the other
  EXPECT_FALSE(overlaps(buf, 8, buf + 8, 8));  // adjacent
  EXPECT_FALSE(overlaps(buf + 8, 8, buf, 8));
  EXPECT_FALSE(overlaps(buf, 0, buf, 8));  // empty
  EXPECT_FALSE(overlaps(buf, 8, buf + 4, 0));
}

}  // namespace
}  // namespace gyre
