// Device reduction kernels against the host reduction, bit for bit: every dtype and op,
// random bit patterns (NaN, infinities and subnormals included), one and two
// destinations, in place, 16-byte-unaligned and mutually misaligned pointers, odd
// counts, every float16/bfloat16 bit pattern, and a count above 2^31; and against the
// reference written from the contract (tests/reduce_reference.h) on each type's edge values.
// Without a GPU the GPU cases skip with the reason; the argument checks still run. Built
// as fake_cuda_reduce_test against the fake CUDA runtime (cuda/fake/), the same cases run
// on the CPU, on the kernel templates compiled for the host.
#include <gtest/gtest.h>

#if !GYRE_HAVE_CUDA

TEST(CudaReduce, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without CUDA: no CUDA toolkit was found at configure time";
}

#else

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "cuda_kernels/device_reduce.h"
#include "host_kernels/reduce.h"
#include "test_values.h"
#include "reduce_reference.h"
#include "cuda_test_support.h"

namespace gyre {
namespace {

using testing::cudaCheck;
using testing::DeviceBuffer;

constexpr unsigned char kPoison = 0xa5;
constexpr size_t kGuardBytes = 64;

enum class Place { kOutOfPlace, kIntoA, kIntoB };

struct Case {
  DataType dtype;
  ReduceOp op;
  size_t count;
  size_t offsetA, offsetB, offsetD;  // in elements, from a 256-byte aligned allocation
  bool dual;
  uint32_t divisor;
  Place place = Place::kOutOfPlace;
  bool scale = false;  // deviceScaleCopy(a) instead of deviceReduceCopy(a, b)
};

std::string describeCase(const Case& c) {
  return fmt::format("{} {} count {} offsets a{} b{} d{} {} divisor {} {}{}", dtypeName(c.dtype),
                     opName(c.op), c.count, c.offsetA, c.offsetB, c.offsetD,
                     c.dual ? "dual" : "single", c.divisor,
                     c.place == Place::kOutOfPlace ? "out of place"
                     : c.place == Place::kIntoA    ? "dst0 == a"
                                                   : "dst0 == b",
                     c.scale ? " (scaleCopy)" : "");
}

std::vector<std::byte> randomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(out.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return out;
}

// A device buffer with `data` at `offset` bytes and poison everywhere else.
struct Placed {
  DeviceBuffer buffer;
  size_t offset;
  Placed(const std::vector<std::byte>& data, size_t offset)
      : buffer(offset + data.size() + kGuardBytes), offset(offset) {
    cudaCheck(cudaMemset(buffer.get(), kPoison, buffer.bytes()), "cudaMemset");
    if (!data.empty()) buffer.upload(data.data(), data.size(), offset);
  }
  char* at() const { return buffer.get() + offset; }
};

// Checks `placed` holds `expected` at its offset and poison around it.
void expectHolds(const Placed& placed, const std::vector<std::byte>& expected,
                 const std::string& what) {
  const std::vector<std::byte> all = placed.buffer.download();
  const size_t end = placed.offset + expected.size();
  const auto poison = [](std::byte b) { return b == std::byte{kPoison}; };
  if ((expected.empty() ||
       std::memcmp(all.data() + placed.offset, expected.data(), expected.size()) == 0) &&
      std::all_of(all.begin(), all.begin() + placed.offset, poison) &&
      std::all_of(all.begin() + end, all.end(), poison)) {
    return;  // the usual case, without a loop over every byte (slow under sanitizers)
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const bool inside = i >= placed.offset && i < placed.offset + expected.size();
    const std::byte want = inside ? expected[i - placed.offset] : std::byte{kPoison};
    if (all[i] != want) {
      FAIL() << what << ": byte " << i << (inside ? " (data)" : " (guard)") << " is "
             << std::to_integer<int>(all[i]) << ", expected " << std::to_integer<int>(want);
    }
  }
}

void runCase(const Case& c, std::mt19937_64& rng) {
  const size_t esize = dtypeSize(c.dtype);
  const size_t bytes = c.count * esize;
  const std::vector<std::byte> a = randomBytes(bytes, rng);
  const std::vector<std::byte> b = randomBytes(bytes, rng);
  std::vector<std::byte> expected(bytes);
  if (c.scale) {
    scaleCopy(expected.data(), nullptr, a.data(), c.count, c.dtype, c.divisor);
  } else {
    reduceCopy(expected.data(), nullptr, a.data(), b.data(), c.count, c.dtype, c.op, c.divisor);
  }
  Placed pa(a, c.offsetA * esize), pb(b, c.offsetB * esize);
  const std::vector<std::byte> none(bytes, std::byte{kPoison});
  Placed d0(none, c.offsetD * esize), d1(none, c.offsetD * esize);
  char* dst0 = c.place == Place::kIntoA ? pa.at() : c.place == Place::kIntoB ? pb.at() : d0.at();
  char* dst1 = c.dual ? d1.at() : nullptr;
  if (c.scale) {
    deviceScaleCopy(dst0, dst1, pa.at(), c.count, c.dtype, c.divisor, nullptr);
  } else {
    deviceReduceCopy(dst0, dst1, pa.at(), pb.at(), c.count, c.dtype, c.op, c.divisor, nullptr);
  }
  cudaCheck(cudaDeviceSynchronize(), "the kernel");
  const std::string what = describeCase(c);
  expectHolds(c.place == Place::kIntoA ? pa : c.place == Place::kIntoB ? pb : d0, expected,
              what + ", dst0");
  if (c.place != Place::kIntoA) expectHolds(pa, a, what + ", a (must not change)");
  if (c.place != Place::kIntoB && !c.scale) expectHolds(pb, b, what + ", b (must not change)");
  if (c.dual) expectHolds(d1, expected, what + ", dst1");
  if (c.place != Place::kOutOfPlace) expectHolds(d0, none, what + ", unused dst0 buffer");
}

class CudaReduce : public ::testing::Test {
 protected:
  void SetUp() override {
    GYRE_SKIP_WITHOUT_GPU();
    cudaCheck(cudaSetDevice(0), "cudaSetDevice");
  }
  std::mt19937_64 rng_{20240611};
};

TEST_F(CudaReduce, EveryDtypeAndOpMatchesTheHost) {
  const size_t counts[] = {1, 2, 7, 8, 31, 1000, 65539};
  for (DataType t : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (uint32_t divisor : op == ReduceOp::kAvg ? std::vector<uint32_t>{0, 3}
                                                   : std::vector<uint32_t>{0}) {
        for (size_t count : counts) {
          for (size_t offset : {0, 1, 3}) {
            for (bool dual : {false, true}) {
              for (Place place : {Place::kOutOfPlace, Place::kIntoA, Place::kIntoB}) {
                runCase({t, op, count, offset, offset, offset, dual, divisor, place}, rng_);
                if (HasFatalFailure() || HasFailure()) return;
              }
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaReduce, MutuallyMisalignedPointersTakeTheScalarPath) {
  for (DataType t : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (size_t count : {size_t{5}, size_t{1000}, size_t{65539}}) {
        const uint32_t divisor = op == ReduceOp::kAvg ? 5 : 0;
        runCase({t, op, count, 0, 1, 2, false, divisor}, rng_);
        runCase({t, op, count, 3, 0, 1, true, divisor}, rng_);
        if (HasFailure()) return;
      }
    }
  }
}

TEST_F(CudaReduce, ScaleCopyMatchesTheHost) {
  for (DataType t : testing::kAllTypes) {
    for (uint32_t divisor : {0u, 1u, 3u, 7u}) {
      for (size_t count : {size_t{1}, size_t{9}, size_t{4099}}) {
        for (size_t offset : {0, 1}) {
          for (bool dual : {false, true}) {
            Case c{t, ReduceOp::kSum, count, offset, 0, offset, dual, divisor};
            c.scale = true;
            runCase(c, rng_);
            c.offsetD = offset + 1;  // misaligned against the source
            runCase(c, rng_);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// Every float16 and bfloat16 bit pattern as `a`, against random and special partners:
// the paired hardware conversions must round exactly as base/half.h.
TEST_F(CudaReduce, EveryHalfBitPatternMatchesTheHost) {
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const size_t count = 65536;
    std::vector<std::byte> a(count * 2);
    for (size_t i = 0; i < count; ++i) {
      const uint16_t bits = static_cast<uint16_t>(i);
      std::memcpy(a.data() + 2 * i, &bits, 2);
    }
    Placed pa(a, 0);
    for (int round = 0; round < 24; ++round) {
      std::vector<std::byte> b = randomBytes(count * 2, rng_);
      if (round % 3 == 1) {  // the same value: exact doubles, ties, overflow to inf
        b = a;
      } else if (round % 3 == 2) {  // a neighbour: cancellation to subnormals and zeros
        for (size_t i = 0; i < count; ++i) {
          const uint16_t bits = static_cast<uint16_t>((i ^ 0x8000u) + (round & 7) - 3);
          std::memcpy(b.data() + 2 * i, &bits, 2);
        }
      }
      Placed pb(b, 0);
      for (ReduceOp op : testing::kAllOps) {
        for (uint32_t divisor : {0u, 3u}) {
          std::vector<std::byte> expected(count * 2);
          reduceCopy(expected.data(), nullptr, a.data(), b.data(), count, t, op, divisor);
          Placed d(std::vector<std::byte>(count * 2), 0);
          deviceReduceCopy(d.at(), nullptr, pa.at(), pb.at(), count, t, op, divisor, nullptr);
          cudaCheck(cudaDeviceSynchronize(), "the kernel");
          expectHolds(d, expected, fmt::format("{} {} divisor {} round {}", dtypeName(t),
                                               opName(op), divisor, round));
          if (HasFailure()) return;
        }
      }
    }
    for (uint32_t divisor : {1u, 3u, 7u, 100u}) {
      std::vector<std::byte> expected(count * 2);
      scaleCopy(expected.data(), nullptr, a.data(), count, t, divisor);
      Placed d(std::vector<std::byte>(count * 2), 0);
      deviceScaleCopy(d.at(), nullptr, pa.at(), count, t, divisor, nullptr);
      cudaCheck(cudaDeviceSynchronize(), "the kernel");
      expectHolds(d, expected, fmt::format("{} scale divisor {}", dtypeName(t), divisor));
    }
  }
}

// Bit patterns at each type's edges: zeros of both signs, one, the largest and smallest
// normals, subnormals, infinities, quiet and signalling NaNs with payloads; for integers
// 0, 1, all ones, the signed extremes.
std::vector<uint64_t> edgeBits(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return {0x0000, 0x8000, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x0400, 0x0001,
              0x83ff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe3f, 0x3555};
    case DataType::kBFloat16:
      return {0x0000, 0x8000, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x0080, 0x0001,
              0x807f, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x3eab};
    case DataType::kFloat32:
      return {0x00000000, 0x80000000, 0x3f800000, 0xbf800000, 0x7f7fffff, 0xff7fffff,
              0x00800000, 0x00000001, 0x807fffff, 0x7f800000, 0xff800000, 0x7fc00000,
              0x7f800001, 0xffc00123, 0x4b000001, 0x3eaaaaab};
    case DataType::kFloat64:
      return {0x0000000000000000, 0x8000000000000000, 0x3ff0000000000000, 0xbff0000000000000,
              0x7fefffffffffffff, 0xffefffffffffffff, 0x0010000000000000, 0x0000000000000001,
              0x800fffffffffffff, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000,
              0x7ff0000000000001, 0xfff8000000000123, 0x4330000000000001, 0x3fd5555555555555};
    default: {
      const size_t bits = 8 * dtypeSize(t);
      const uint64_t ones = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
      const uint64_t top = uint64_t{1} << (bits - 1);
      return {0, 1, 2, 3, ones, ones - 1, top, top - 1, top + 1, 0x55, 0xaa};
    }
  }
}

// Half edge values, half random bits.
std::vector<std::byte> edgeBytes(DataType t, size_t count, std::mt19937_64& rng) {
  const std::vector<uint64_t> edges = edgeBits(t);
  const size_t esize = dtypeSize(t);
  std::vector<std::byte> out(count * esize);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng();
    const uint64_t v = (r & 1) != 0 ? edges[(r >> 1) % edges.size()] : rng();
    std::memcpy(out.data() + i * esize, &v, esize);  // the low bytes (little-endian)
  }
  return out;
}

std::vector<std::byte> asBytes(const std::vector<uint8_t>& v) {
  std::vector<std::byte> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), v.size());
  return out;
}

const uint8_t* asU8(const std::vector<std::byte>& v) {
  return reinterpret_cast<const uint8_t*>(v.data());
}

// Every dtype and op against the contract's reference (which tests/reduce_test.cc holds
// the host reduction to): the vector path (all pointers one element past 16-byte
// alignment) and the scalar path (b aligned differently), two destinations, and the
// scale and copy kernels.
TEST_F(CudaReduce, EveryDtypeAndOpMatchesTheReference) {
  for (DataType t : testing::kAllTypes) {
    const size_t esize = dtypeSize(t);
    for (ReduceOp op : testing::kAllOps) {
      for (uint32_t divisor : op == ReduceOp::kAvg ? std::vector<uint32_t>{0, 1, 3, 7}
                                                   : std::vector<uint32_t>{0}) {
        for (size_t count : {size_t{1}, size_t{33}, size_t{4099}}) {
          for (bool vector : {true, false}) {
            const std::vector<std::byte> a = edgeBytes(t, count, rng_);
            const std::vector<std::byte> b = edgeBytes(t, count, rng_);
            const std::vector<std::byte> expected =
                asBytes(reduce_reference::reference(t, op, asU8(a), asU8(b), count, divisor));
            const std::vector<std::byte> none(count * esize, std::byte{kPoison});
            Placed pa(a, esize), pb(b, vector ? esize : 0), d0(none, esize), d1(none, esize);
            deviceReduceCopy(d0.at(), d1.at(), pa.at(), pb.at(), count, t, op, divisor, nullptr);
            cudaCheck(cudaDeviceSynchronize(), "the kernel");
            const std::string what = fmt::format("{} {} divisor {} count {} ({} path)",
                                                 dtypeName(t), opName(op), divisor, count,
                                                 vector ? "vector" : "scalar");
            expectHolds(d0, expected, what + ", dst0");
            expectHolds(d1, expected, what + ", dst1");
            if (HasFailure()) return;
          }
        }
      }
    }
    for (uint32_t divisor : {0u, 1u, 3u, 7u}) {
      for (size_t count : {size_t{1}, size_t{4099}}) {
        const std::vector<std::byte> a = edgeBytes(t, count, rng_);
        // Divisor 0 with two destinations: the copy kernel.
        const std::vector<std::byte> expected =
            divisor == 0 ? a : asBytes(reduce_reference::referenceScale(t, asU8(a), count, divisor));
        const std::vector<std::byte> none(count * esize, std::byte{kPoison});
        Placed pa(a, esize), d0(none, esize), d1(none, esize);
        deviceScaleCopy(d0.at(), d1.at(), pa.at(), count, t, divisor, nullptr);
        cudaCheck(cudaDeviceSynchronize(), "the kernel");
        const std::string what =
            fmt::format("{} scale divisor {} count {}", dtypeName(t), divisor, count);
        expectHolds(d0, expected, what + ", dst0");
        expectHolds(d1, expected, what + ", dst1");
        if (HasFailure()) return;
      }
    }
  }
}

// 64-bit counts: 2^31 + 37 bytes, so that 32-bit element or byte indices would wrap.
TEST_F(CudaReduce, CountAbove2To31) {
#if GYRE_FAKE_CUDA
  GTEST_SKIP() << "the fake CUDA runtime keeps device memory in host memory, and this case "
                  "needs 14 GiB of it";
#endif
  const size_t count = (size_t{1} << 31) + 37;
  std::vector<uint8_t> a(count), b(count), expected(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<uint8_t>(i * 7 + (i >> 20));
    b[i] = static_cast<uint8_t>((i * 13) ^ (i >> 27));
  }
  reduceCopy(expected.data(), nullptr, a.data(), b.data(), count, DataType::kUint8,
             ReduceOp::kSum);
  DeviceBuffer da(count + 1), db(count), dd(count + 1);
  da.upload(a.data(), count, 1);  // offset 1: a head of 15 elements
  db.upload(b.data(), count);
  deviceReduceCopy(dd.get() + 1, nullptr, da.get() + 1, db.get(), count, DataType::kUint8,
                   ReduceOp::kSum, 0, nullptr);  // mutually misaligned: scalar path
  deviceReduceCopy(da.get() + 1, nullptr, da.get() + 1, da.get() + 1, count, DataType::kUint8,
                   ReduceOp::kMax, 0, nullptr);  // in place, vector path: a = max(a, a)
  cudaCheck(cudaDeviceSynchronize(), "the kernels");
  std::vector<uint8_t> got(count);
  cudaCheck(cudaMemcpy(got.data(), dd.get() + 1, count, cudaMemcpyDeviceToHost), "D2H");
  EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), count)) << "sum, scalar path";
  cudaCheck(cudaMemcpy(got.data(), da.get() + 1, count, cudaMemcpyDeviceToHost), "D2H");
  EXPECT_EQ(0, std::memcmp(got.data(), a.data(), count)) << "max in place, vector path";
}

// The argument checks come before any CUDA call, so they run without a GPU too.
TEST(CudaReduceArguments, AreCheckedBeforeAnyLaunch) {
  char* fake = reinterpret_cast<char*>(uintptr_t{1} << 40);  // never dereferenced
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(ErrorCode::kInvalidArgument, code([&] {
              deviceReduceCopy(fake, nullptr, fake, fake, 4, static_cast<DataType>(99),
                               ReduceOp::kSum, 0, nullptr);
            }));
  EXPECT_EQ(ErrorCode::kInvalidArgument, code([&] {
              deviceReduceCopy(fake, nullptr, fake, fake, 4, DataType::kFloat32,
                               static_cast<ReduceOp>(9), 0, nullptr);
            }));
  EXPECT_EQ(ErrorCode::kInvalidArgument, code([&] {
              deviceReduceCopy(fake, nullptr, nullptr, fake, 4, DataType::kFloat32,
                               ReduceOp::kSum, 0, nullptr);
            }));
  EXPECT_EQ(ErrorCode::kInvalidArgument, code([&] {
              deviceReduceCopy(fake + 2, nullptr, fake, fake, 4, DataType::kFloat32,
                               ReduceOp::kSum, 0, nullptr);
            }));
  EXPECT_EQ(ErrorCode::kInvalidArgument, code([&] {
              deviceScaleCopy(fake, fake + 1, fake, 4, DataType::kInt64, 2, nullptr);
            }));
  // Nothing to do: returns without touching CUDA or the pointers.
  deviceReduceCopy(nullptr, nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum, 0,
                   nullptr);
  deviceScaleCopy(nullptr, nullptr, nullptr, 0, DataType::kFloat32, 0, nullptr);
}

}  // namespace
}  // namespace gyre

#endif  // GYRE_HAVE_CUDA
