// Tests for the host reduction (host_kernels/reduce.h); the float16/bfloat16 conversions
// it rounds with are half_test.cc.
//
// The reference (reduce_reference.h) is written from the contract, not from
// base/reduce_ops.h, and every ISA this CPU runs must match it bit for bit: NaNs
// included, which is how the "all ISAs give identical bits" promise is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "host_kernels/reduce.h"
#include "reduce_reference.h"

namespace gyre {
namespace {

using namespace reduce_reference;

constexpr ReduceIsa kIsas[] = {ReduceIsa::kPortable, ReduceIsa::kAvx2, ReduceIsa::kAvx512};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAvg};
constexpr size_t kCounts[] = {0, 1, 7, 15, 17, 1023, 100003};

uint32_t floatBits(float f) { return half_detail::floatBits(f); }

std::vector<DataType> allTypes() {
  std::vector<DataType> types;
  for (int t = 0; t < kNumDataTypes; ++t) types.push_back(static_cast<DataType>(t));
  return types;
}

std::vector<ReduceIsa> supportedIsas() {
  std::vector<ReduceIsa> isas;
  for (ReduceIsa isa : kIsas) {
    if (reduceIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Restores the ISA choice that a test changes with setReduceIsa.
class IsaScope {
 public:
  IsaScope() : saved_(activeReduceIsa()) {}
  ~IsaScope() { setReduceIsa(saved_); }

 private:
  ReduceIsa saved_;
};

// ---- inputs ----------------------------------------------------------------------------

// Random elements with the special values mixed in: NaNs with several payloads and
// signs, infinities, signed zeros, subnormals, the largest finite values.
std::vector<uint8_t> randomInput(DataType dtype, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t size = dtypeSize(dtype);
  std::vector<uint8_t> out(n * size);
  auto put = [&](size_t i, auto value) { std::memcpy(out.data() + i * size, &value, size); };
  std::uniform_real_distribution<double> moderate(-4.0, 4.0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = rng();
    const bool special = rng() % 8 == 0;
    switch (dtype) {
      case DataType::kFloat16:
      case DataType::kBFloat16:
        // Random patterns hit NaN, inf and subnormals; moderate values hit rounding.
        if (special) {
          put(i, static_cast<uint16_t>(bits));
        } else if (dtype == DataType::kFloat16) {
          put(i, toFloat16(static_cast<float>(moderate(rng))).bits);
        } else {
          put(i, toBFloat16(static_cast<float>(moderate(rng))).bits);
        }
        break;
      case DataType::kFloat32: {
        static const uint32_t kSpecial[] = {0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000,
                                            0x7f800000, 0xff800000, 0x00000000, 0x80000000,
                                            0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff};
        if (special) {
          put(i, kSpecial[bits % std::size(kSpecial)]);
        } else {
          put(i, static_cast<float>(moderate(rng)));
        }
        break;
      }
      case DataType::kFloat64: {
        static const uint64_t kSpecial[] = {
            0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001, 0x7ff0000000000000,
            0xfff0000000000000, 0x0000000000000000, 0x8000000000000000, 0x0000000000000001,
            0x7fefffffffffffff, 0xffefffffffffffff};
        if (special) {
          put(i, kSpecial[bits % std::size(kSpecial)]);
        } else {
          put(i, moderate(rng));
        }
        break;
      }
      default:
        std::memcpy(out.data() + i * size, &bits, size);
    }
  }
  return out;
}

// A buffer whose data() sits `offset` bytes past a 64-byte boundary, with guard bytes
// before and after it that no call may touch.
class Buffer {
 public:
  Buffer(size_t bytes, size_t offset) : bytes_(bytes), storage_(bytes + offset + 128, kGuard) {
    const size_t misalignment = reinterpret_cast<uintptr_t>(storage_.data()) % 64;
    start_ = (64 - misalignment) % 64 + offset;
  }
  uint8_t* data() { return storage_.data() + start_; }
  std::vector<uint8_t> contents() const {
    return {storage_.begin() + start_, storage_.begin() + start_ + bytes_};
  }
  void fill(const std::vector<uint8_t>& v) { std::copy(v.begin(), v.end(), data()); }
  bool guardIntact() const {
    for (size_t i = 0; i < storage_.size(); ++i) {
      if ((i < start_ || i >= start_ + bytes_) && storage_[i] != kGuard) return false;
    }
    return true;
  }

 private:
  static constexpr uint8_t kGuard = 0xa5;
  size_t bytes_;
  std::vector<uint8_t> storage_;
  size_t start_;
};

// Names the first differing element, in hex, on failure.
::testing::AssertionResult sameBits(const std::vector<uint8_t>& expected,
                                    const std::vector<uint8_t>& actual, DataType dtype) {
  if (expected == actual) return ::testing::AssertionSuccess();
  const size_t size = dtypeSize(dtype);
  for (size_t i = 0; i < expected.size(); i += size) {
    if (std::memcmp(&expected[i], &actual[i], size) == 0) continue;
    uint64_t e = 0, a = 0;
    std::memcpy(&e, &expected[i], size);
    std::memcpy(&a, &actual[i], size);
    return ::testing::AssertionFailure()
           << "element " << i / size << ": expected 0x" << std::hex << e << ", got 0x" << a;
  }
  return ::testing::AssertionFailure() << "sizes differ";
}

std::string describe(ReduceIsa isa, DataType dtype, ReduceOp op, size_t n, uint32_t divisor) {
  return std::string(reduceIsaName(isa)) + " " + dtypeName(dtype) + " " + opName(op) +
         " count=" + std::to_string(n) + " divisor=" + std::to_string(divisor);
}

// ---- reduceCopy ------------------------------------------------------------------------

TEST(ReduceTest, EveryTypeOpAndLengthMatchesReference) {
  IsaScope scope;
  for (ReduceIsa isa : supportedIsas()) {
    setReduceIsa(isa);
    for (DataType dtype : allTypes()) {
      for (ReduceOp op : kOps) {
        for (size_t n : kCounts) {
          const uint32_t divisor = op == ReduceOp::kAvg ? 7 : 0;
          SCOPED_TRACE(describe(isa, dtype, op, n, divisor));
          const size_t bytes = n * dtypeSize(dtype);
          const auto a = randomInput(dtype, n, 1 + n);
          const auto b = randomInput(dtype, n, 2 + n);
          Buffer pa(bytes, 0), pb(bytes, 0), dst(bytes, 0);
          pa.fill(a);
          pb.fill(b);
          reduceCopy(dst.data(), nullptr, pa.data(), pb.data(), n, dtype, op, divisor);
          ASSERT_TRUE(sameBits(reference(dtype, op, a.data(), b.data(), n, divisor), dst.contents(),
                               dtype));
          ASSERT_TRUE(dst.guardIntact());
        }
      }
    }
  }
}

TEST(ReduceTest, AvgDivisors) {
  IsaScope scope;
  for (ReduceIsa isa : supportedIsas()) {
    setReduceIsa(isa);
    for (DataType dtype : allTypes()) {
      for (uint32_t divisor : {0u, 1u, 2u, 3u, 8u, 200u, 100000u, 0xffffffffu}) {
        const size_t n = 1023;
        SCOPED_TRACE(describe(isa, dtype, ReduceOp::kAvg, n, divisor));
        const auto a = randomInput(dtype, n, divisor), b = randomInput(dtype, n, divisor + 9);
        std::vector<uint8_t> dst(a.size());
        reduceCopy(dst.data(), nullptr, a.data(), b.data(), n, dtype, ReduceOp::kAvg, divisor);
        ASSERT_TRUE(
            sameBits(reference(dtype, ReduceOp::kAvg, a.data(), b.data(), n, divisor), dst, dtype));
        // Fused avg is exactly sum followed by scaleCopy.
        std::vector<uint8_t> twoPass(a.size());
        reduceCopy(twoPass.data(), nullptr, a.data(), b.data(), n, dtype, ReduceOp::kSum);
        scaleCopy(twoPass.data(), nullptr, twoPass.data(), n, dtype, divisor);
        ASSERT_TRUE(sameBits(twoPass, dst, dtype));
      }
    }
  }
}

TEST(ReduceTest, UnalignedInPlaceAndDualDestination) {
  IsaScope scope;
  const size_t n = 1023;
  for (ReduceIsa isa : supportedIsas()) {
    setReduceIsa(isa);
    for (DataType dtype : allTypes()) {
      for (ReduceOp op : kOps) {
        const uint32_t divisor = op == ReduceOp::kAvg ? 3 : 0;
        SCOPED_TRACE(describe(isa, dtype, op, n, divisor));
        const size_t bytes = n * dtypeSize(dtype);
        const auto a = randomInput(dtype, n, 11), b = randomInput(dtype, n, 12);
        const auto expected = reference(dtype, op, a.data(), b.data(), n, divisor);
        for (size_t offset = 1; offset < 16; ++offset) {
          SCOPED_TRACE("offset " + std::to_string(offset));
          Buffer pa(bytes, offset), pb(bytes, (offset * 7) % 16), d0(bytes, (offset * 3) % 16),
              d1(bytes, 15 - offset);
          pa.fill(a);
          pb.fill(b);
          reduceCopy(d0.data(), d1.data(), pa.data(), pb.data(), n, dtype, op, divisor);
          ASSERT_TRUE(sameBits(expected, d0.contents(), dtype));
          ASSERT_TRUE(sameBits(expected, d1.contents(), dtype));
          ASSERT_TRUE(d0.guardIntact() && d1.guardIntact());
          // In place, into either source.
          reduceCopy(pa.data(), nullptr, pa.data(), pb.data(), n, dtype, op, divisor);
          ASSERT_TRUE(sameBits(expected, pa.contents(), dtype));
          pa.fill(a);
          reduceCopy(pb.data(), d1.data(), pa.data(), pb.data(), n, dtype, op, divisor);
          ASSERT_TRUE(sameBits(expected, pb.contents(), dtype));
          ASSERT_TRUE(sameBits(expected, d1.contents(), dtype));
          ASSERT_TRUE(pa.guardIntact() && pb.guardIntact());
        }
      }
    }
  }
}

// The same inputs through every ISA, compared with the portable loops byte for byte.
TEST(ReduceTest, AllIsasBitwiseIdenticalToPortable) {
  IsaScope scope;
  const size_t n = 100003;
  for (DataType dtype : allTypes()) {
    const auto a = randomInput(dtype, n, 21), b = randomInput(dtype, n, 22);
    for (ReduceOp op : kOps) {
      setReduceIsa(ReduceIsa::kPortable);
      std::vector<uint8_t> portable(a.size());
      reduceCopy(portable.data(), nullptr, a.data(), b.data(), n, dtype, op, 5);
      for (ReduceIsa isa : supportedIsas()) {
        SCOPED_TRACE(describe(isa, dtype, op, n, 5));
        setReduceIsa(isa);
        std::vector<uint8_t> out(a.size());
        reduceCopy(out.data(), nullptr, a.data(), b.data(), n, dtype, op, 5);
        ASSERT_TRUE(sameBits(portable, out, dtype));
      }
    }
  }
}

TEST(ReduceTest, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  const float a[] = {1.0f, -0.0f, 0.0f, inf, -inf, inf, nan, 2.0f, nan, -inf};
  const float b[] = {nan, 0.0f, -0.0f, -inf, -inf, 3.0f, 2.0f, -nan, nan, 1.0f};
  const size_t n = std::size(a);
  float out[n];
  reduceCopy(out, nullptr, a, b, n, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(floatBits(out[3]), 0x7fc00000u);  // inf + -inf: the canonical NaN
  EXPECT_EQ(out[4], -inf);
  EXPECT_EQ(out[5], inf);
  reduceCopy(out, nullptr, a, b, n, DataType::kFloat32, ReduceOp::kMin);
  for (size_t i : {0, 6, 7, 8}) EXPECT_EQ(floatBits(out[i]), 0x7fc00000u) << i;
  EXPECT_EQ(floatBits(out[1]), floatBits(0.0f));  // equal operands: b
  EXPECT_EQ(floatBits(out[2]), floatBits(-0.0f));
  EXPECT_EQ(out[3], -inf);
  EXPECT_EQ(out[9], -inf);
  reduceCopy(out, nullptr, a, b, n, DataType::kFloat32, ReduceOp::kMax);
  for (size_t i : {0, 6, 7, 8}) EXPECT_TRUE(std::isnan(out[i])) << i;
  EXPECT_EQ(out[3], inf);
  EXPECT_EQ(out[5], inf);
  EXPECT_EQ(out[9], 1.0f);
  // float16: 65504 + 16 is the tie with 2^16 and overflows to infinity.
  const Float16 ha[] = {toFloat16(65504.0f), toFloat16(1.0f), toFloat16(1.0f)};
  const Float16 hb[] = {toFloat16(16.0f), toFloat16(std::ldexp(1.0f, -11)),
                        toFloat16(3 * std::ldexp(1.0f, -11))};
  Float16 hout[3];
  reduceCopy(hout, nullptr, ha, hb, 3, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(hout[0].bits, 0x7c00);
  EXPECT_EQ(hout[1].bits, 0x3c00);  // 1 + 2^-11: tie, stays at the even 1.0
  EXPECT_EQ(hout[2].bits, 0x3c02);  // 1 + 3 * 2^-11: tie, up to the even 0x3c02
}

TEST(ReduceTest, IntegersWrapAndAverageTruncates) {
  const int8_t a[] = {127, -128, -7, 7, 100};
  const int8_t b[] = {1, -1, 0, 0, 100};
  int8_t out[5];
  reduceCopy(out, nullptr, a, b, 5, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  reduceCopy(out, nullptr, a, b, 5, DataType::kInt8, ReduceOp::kAvg, 2);
  EXPECT_EQ(out[2], -3);  // toward zero
  EXPECT_EQ(out[3], 3);
  EXPECT_EQ(out[4], -28);  // 200 wraps to -56 before the division
  const int64_t big[] = {INT64_MIN, INT64_MAX};
  const int64_t two[] = {-1, 2};
  int64_t out64[2];
  reduceCopy(out64, nullptr, big, two, 2, DataType::kInt64, ReduceOp::kProd);
  EXPECT_EQ(out64[0], INT64_MIN);
  EXPECT_EQ(out64[1], -2);
}

// ---- scaleCopy and copy2 ---------------------------------------------------------------

TEST(ReduceTest, ScaleCopyMatchesReference) {
  IsaScope scope;
  for (ReduceIsa isa : supportedIsas()) {
    setReduceIsa(isa);
    for (DataType dtype : allTypes()) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1023}}) {
        for (uint32_t divisor : {1u, 3u, 64u}) {
          SCOPED_TRACE(describe(isa, dtype, ReduceOp::kAvg, n, divisor));
          const size_t bytes = n * dtypeSize(dtype);
          const auto src = randomInput(dtype, n, 31 + n);
          const auto expected = referenceScale(dtype, src.data(), n, divisor);
          Buffer s(bytes, 5), d0(bytes, 3), d1(bytes, 0);
          s.fill(src);
          scaleCopy(d0.data(), d1.data(), s.data(), n, dtype, divisor);
          ASSERT_TRUE(sameBits(expected, d0.contents(), dtype));
          ASSERT_TRUE(sameBits(expected, d1.contents(), dtype));
          scaleCopy(s.data(), nullptr, s.data(), n, dtype, divisor);  // in place
          ASSERT_TRUE(sameBits(expected, s.contents(), dtype));
          ASSERT_TRUE(s.guardIntact() && d0.guardIntact() && d1.guardIntact());
        }
      }
    }
  }
  // Divisor 0 is a plain copy: bits pass through untouched, NaN payloads included.
  const uint32_t src[] = {0x7f800001, 0xffc12345, 0x3f800000};
  uint32_t dst[3];
  scaleCopy(dst, nullptr, src, 3, DataType::kFloat32, 0);
  EXPECT_EQ(std::memcmp(src, dst, sizeof src), 0);
}

TEST(ReduceTest, Copy2) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{100}, size_t{16 * 1024 + 3}, size_t{100003}}) {
    const auto src = randomInput(DataType::kUint8, bytes, bytes);
    Buffer s(bytes, 1), d0(bytes, 2), d1(bytes, 3);
    s.fill(src);
    copy2(d0.data(), d1.data(), s.data(), bytes);
    EXPECT_EQ(d0.contents(), src);
    EXPECT_EQ(d1.contents(), src);
    Buffer d2(bytes, 7);
    copy2(d2.data(), nullptr, s.data(), bytes);
    EXPECT_EQ(d2.contents(), src);
    copy2(s.data(), d2.data(), s.data(), bytes);  // dst0 == src
    EXPECT_EQ(s.contents(), src);
    EXPECT_TRUE(d0.guardIntact() && d1.guardIntact() && d2.guardIntact() && s.guardIntact());
  }
}

// ---- arguments and ISA choice ----------------------------------------------------------

TEST(ReduceTest, InvalidArgumentsThrow) {
  float x[4] = {};
  auto expectInvalid = [](auto&& call) {
    try {
      call();
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  };
  expectInvalid(
      [&] { reduceCopy(x, nullptr, x, x, 4, static_cast<DataType>(10), ReduceOp::kSum); });
  expectInvalid(
      [&] { reduceCopy(x, nullptr, x, x, 4, DataType::kFloat32, static_cast<ReduceOp>(5)); });
  expectInvalid([&] { reduceCopy(x, nullptr, nullptr, x, 4, DataType::kFloat32, ReduceOp::kSum); });
  expectInvalid([&] { scaleCopy(x, nullptr, x, 4, static_cast<DataType>(99), 2); });
  expectInvalid([&] { copy2(nullptr, x, x, 4); });
  // Nothing to do is not an error, whatever the pointers.
  reduceCopy(nullptr, nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  copy2(nullptr, nullptr, nullptr, 0);
  for (ReduceIsa isa : kIsas) {
    if (!reduceIsaSupported(isa)) expectInvalid([&] { setReduceIsa(isa); });
  }
}

TEST(ReduceTest, PortableIsAlwaysSupportedAndDefaultIsBest) {
  EXPECT_TRUE(reduceIsaSupported(ReduceIsa::kPortable));
  if (std::getenv("GYRE_REDUCE_ISA") == nullptr) {
    EXPECT_EQ(activeReduceIsa(), supportedIsas().back());
  }
}

// GYRE_REDUCE_ISA is read once per process, so these run in a fresh process
// ("threadsafe" death tests re-execute the binary) that sets it first.
TEST(ReduceIsaEnvDeathTest, EnvironmentForcesIsa) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("GYRE_REDUCE_ISA", "portable", 1);
        std::exit(activeReduceIsa() == ReduceIsa::kPortable ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("GYRE_REDUCE_ISA", "sse9", 1);
        try {
          activeReduceIsa();
        } catch (const Error& e) {
          std::exit(e.code() == ErrorCode::kInvalidArgument ? 0 : 1);
        }
        std::exit(2);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gyre
