// All-reduce on device buffers staged through the host (CudaOptions::ipc off: the path
// of ranks on several hosts; the device path through CUDA IPC has
// cuda_ipc_allreduce_test): 1 to 4 ranks (processes) sharing GPU 0, every dtype and
// op, in place and out of place, odd and 16-byte-unaligned buffers, tiny slices so that
// every staging slot is reused many times, both stream releases (stream memory
// operations and the host-function fallback), stream order with back-to-back calls,
// the host time of an enqueue, the stream's earlier work as the input, and a lost peer
// that fails every rank instead of hanging. Without a GPU every case skips, saying why.
// Built as fake_cuda_allreduce_test against the fake CUDA runtime (cuda/fake/), the same
// cases run on the CPU.
#include <gtest/gtest.h>

#if !GYRE_HAVE_CUDA

TEST(CudaAllReduce, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without CUDA: no CUDA toolkit was found at configure time";
}

#else

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "ring/communicator.h"
#include "cuda/cuda_communicator.h"
#include "ring/spawn.h"
#include "test_values.h"
#include "cuda_test_support.h"

namespace gyre {
namespace {

using testing::check;
using testing::cudaCheck;
using testing::DeviceBuffer;

SpawnOptions spawnOptions() {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  o.options.slotBytes = 64 * 1024;
  return o;
}

// Small slices: a 1 MiB buffer crosses the three slots many times.
CudaOptions smallSlices(bool memOps) {
  CudaOptions o;
  o.sliceBytes = 64 * 1024;
  o.minSliceBytes = 16 * 1024;
  o.stagingSlots = 3;
  o.streamMemOps = memOps;
  o.ipc = false;
  return o;
}

// The staged path with the default slices.
CudaOptions staged() {
  CudaOptions o;
  o.ipc = false;
  return o;
}

std::unique_ptr<CudaCommunicator> deviceCommunicator(Communicator& comm, const CudaOptions& o) {
  cudaCheck(cudaSetDevice(0), "cudaSetDevice");
  return CudaCommunicator::createBeside(comm, o);
}

// One all-reduce through device memory, checked exactly, and the same bits on every
// rank (compared over the host communicator, which the device one does not use).
void checkDeviceAllReduce(Communicator& comm, CudaCommunicator& cuda, cudaStream_t stream,
                          DataType t, ReduceOp op, size_t count, bool inPlace,
                          size_t offsetElements) {
  const size_t esize = dtypeSize(t);
  const size_t bytes = count * esize;
  const size_t offset = offsetElements * esize;
  const std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), count);
  DeviceBuffer send(offset + bytes + 16), recv(offset + bytes + 16);
  cudaCheck(cudaMemset(recv.get(), 0x5a, recv.bytes()), "cudaMemset");
  cudaCheck(cudaMemset(send.get(), 0x3c, send.bytes()), "cudaMemset");
  if (bytes > 0) send.upload(input.data(), bytes, offset);
  char* out = inPlace ? send.get() + offset : recv.get() + offset;
  cuda.allReduce(send.get() + offset, out, count, t, op, stream);
  cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda.synchronize();
  const std::string what = fmt::format("rank {}/{}: {} {} count {} offset {} {}", comm.rank(),
                                       comm.size(), dtypeName(t), opName(op), count, offset,
                                       inPlace ? "in place" : "out of place");
  const std::vector<std::byte> sendAfter = send.download();
  const std::vector<std::byte> recvAfter = recv.download();
  const std::vector<std::byte>& result = inPlace ? sendAfter : recvAfter;
  const std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), count);
  check(std::memcmp(result.data() + offset, expected.data(), bytes) == 0, "{}: wrong result",
        what);
  const std::byte guard{static_cast<unsigned char>(inPlace ? 0x3c : 0x5a)};
  check(result[offset + bytes] == guard &&
            result[offset > 0 ? offset - 1 : offset + bytes + 1] == guard,
        "{}: wrote outside recvbuf", what);
  if (!inPlace) {
    check(std::memcmp(sendAfter.data() + offset, input.data(), bytes) == 0,
          "{}: sendbuf was modified", what);
  }
  uint64_t sum = testing::checksum(result.data() + offset, bytes), lo = sum, hi = sum;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  check(lo == hi, "{}: ranks hold different bits", what);
}

class CudaAllReduceRanks : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

TEST_P(CudaAllReduceRanks, EveryDtypeOpAndEdgeCount) {
  const auto [n, memOps] = GetParam();
  spawn(n, [n = n, memOps = memOps](Communicator& comm) {
    auto cuda = deviceCommunicator(comm, smallSlices(memOps));
    check(cuda->size() == n && cuda->rank() == comm.rank(), "bad rank/size");
    if (memOps && !cuda->usesStreamMemOps() && comm.rank() == 0) {
      std::fprintf(stderr, "note: stream memory operations are unavailable: host-function "
                           "release used in the memops case too\n");
    }
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
    const size_t counts[] = {0, 1, static_cast<size_t>(n + 1), 1009};
    for (DataType t : testing::kAllTypes) {
      for (ReduceOp op : testing::kAllOps) {
        for (size_t count : counts) {
          checkDeviceAllReduce(comm, *cuda, stream, t, op, count, false, 0);
          checkDeviceAllReduce(comm, *cuda, stream, t, op, count, true, 1);
        }
      }
    }
    // Many slices per call: 64 KiB slices through 3 slots.
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kInt8,
                       DataType::kFloat64}) {
      checkDeviceAllReduce(comm, *cuda, stream, t, ReduceOp::kSum, (1 << 18) + 13, false, 3);
      checkDeviceAllReduce(comm, *cuda, stream, t, ReduceOp::kAvg, (1 << 18) + 13, true, 0);
    }
    checkDeviceAllReduce(comm, *cuda, stream, DataType::kInt32, ReduceOp::kMax, 1 << 20, true, 0);
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaAllReduceRanks,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("{}ranks_{}", std::get<0>(info.param),
                                              std::get<1>(info.param) ? "memops" : "hostfunc");
                         });

class CudaAllReduce : public ::testing::Test {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

// Back-to-back calls on one stream with no host wait between them: each call's input
// is the previous call's output, so only stream order makes the result right.
TEST_F(CudaAllReduce, ChainedCallsKeepStreamOrder) {
  spawn(3, [](Communicator& comm) {
    auto cuda = deviceCommunicator(comm, smallSlices(true));
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
    const size_t count = 300007;
    std::vector<int64_t> host(count, comm.rank() + 1);
    DeviceBuffer x(count * 8), y(count * 8);
    cudaCheck(cudaMemcpyAsync(x.get(), host.data(), count * 8, cudaMemcpyHostToDevice, stream),
              "H2D");
    // x = 1+2+3 = 6; y = 6*3 = 18; x = 18*3 = 54; ... ten calls, no synchronisation.
    for (int k = 0; k < 10; ++k) {
      const bool even = k % 2 == 0;
      cuda->allReduce(even ? x.get() : y.get(), even ? y.get() : x.get(), count,
                      DataType::kInt64, ReduceOp::kSum, stream);
    }
    cudaCheck(cudaMemcpyAsync(host.data(), x.get(), count * 8, cudaMemcpyDeviceToHost, stream),
              "D2H");
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    int64_t want = 6;
    for (int k = 1; k < 10; ++k) want *= 3;
    check(std::all_of(host.begin(), host.end(), [&](int64_t v) { return v == want; }),
          "rank {}: chained result {} != {}", comm.rank(), host[0], want);
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// The stream's work before the call is the call's input: here a host function holds the
// stream until well after allReduce() has returned, and only then is the input copied in.
// The worker must wait for that (the call's ready event) rather than copy what the
// buffer held at the call, and the copy back that follows the call on the stream must
// see the result (the release). Both releases.
TEST_F(CudaAllReduce, WaitsForTheStreamsEarlierWork) {
  spawn(2, [](Communicator& comm) {
    for (bool memOps : {true, false}) {
      auto cuda = deviceCommunicator(comm, smallSlices(memOps));
      cudaStream_t stream;
      cudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
      const size_t count = 100003;  // several slices
      DeviceBuffer x(count * 4), y(count * 4);
      cudaCheck(cudaMemset(x.get(), 0, x.bytes()), "cudaMemset");
      cudaCheck(cudaMemset(y.get(), 0, y.bytes()), "cudaMemset");
      cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      // Pinned: CUDA may copy from pageable memory synchronously, which would block this
      // thread behind the gate below.
      int32_t* input = nullptr;
      cudaCheck(cudaMallocHost(reinterpret_cast<void**>(&input), count * 4), "cudaMallocHost");
      std::fill(input, input + count, comm.rank() + 1);
      std::vector<int32_t> output(count);
      std::atomic<bool> gate{false};
      cudaCheck(cudaLaunchHostFunc(
                    stream,
                    [](void* arg) {
                      while (!static_cast<std::atomic<bool>*>(arg)->load()) {
                        std::this_thread::sleep_for(std::chrono::milliseconds(1));
                      }
                    },
                    &gate),
                "cudaLaunchHostFunc");
      cudaCheck(cudaMemcpyAsync(x.get(), input, count * 4, cudaMemcpyHostToDevice, stream), "H2D");
      cuda->allReduce(x.get(), y.get(), count, DataType::kInt32, ReduceOp::kSum, stream);
      // Time for a worker that does not wait to copy x as it was at the call (zeros).
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      gate.store(true);
      cudaCheck(cudaMemcpyAsync(output.data(), y.get(), count * 4, cudaMemcpyDeviceToHost, stream),
                "D2H");
      cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      cuda->synchronize();
      const auto wrong = std::find_if(output.begin(), output.end(), [](int32_t v) { return v != 3; });
      check(wrong == output.end(),
            "rank {} ({} release): y[{}] = {}, expected 1 + 2 = 3: the all-reduce did not run "
            "between the stream's earlier and later work", comm.rank(),
            memOps ? "stream memory operation" : "host function", wrong - output.begin(),
            wrong == output.end() ? 0 : *wrong);
      cudaCheck(cudaStreamDestroy(stream), "cudaStreamDestroy");
      cudaCheck(cudaFreeHost(input), "cudaFreeHost");
    }
  }, spawnOptions());
}

// The call only enqueues. The bound here is loose (tests share the machine); the
// benchmark (bench/cuda_allreduce_bench.cc) reports the figure against 20 us.
TEST_F(CudaAllReduce, EnqueueDoesNotBlock) {
  spawn(2, [](Communicator& comm) {
    auto cuda = deviceCommunicator(comm, staged());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
    const size_t count = size_t{16} << 20;  // 64 MiB of float
    DeviceBuffer buf(count * 4);
    cudaCheck(cudaMemset(buf.get(), 0, buf.bytes()), "cudaMemset");
    std::vector<double> us;
    for (int k = 0; k < 12; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      cuda->allReduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, stream);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                       .count());
    }
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda->synchronize();
    std::sort(us.begin() + 2, us.end());  // the first calls warm up
    const double median = us[2 + (us.size() - 2) / 2];
    std::fprintf(stderr, "rank %d: enqueue of a 64 MiB device allreduce: median %.1f us, max %.1f us\n",
                 comm.rank(), median, us.back());
    check(median < 200, "rank {}: enqueue took {} us (median): the call blocks", comm.rank(),
          median);
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// A rank that leaves: the others' collective fails with an error naming the rank and
// the collective, their stream is still released, and later calls fail at once.
TEST_F(CudaAllReduce, LostPeerFailsInsteadOfHanging) {
  SpawnOptions o = spawnOptions();
  o.options.timeout = std::chrono::seconds(20);
  spawn(2, [](Communicator& comm) {
    auto cuda = deviceCommunicator(comm, smallSlices(true));
    comm.barrier();
    if (comm.rank() == 1) return;  // leaves: its communicators close
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream), "cudaStreamCreate");
    DeviceBuffer buf(1 << 20);
    cuda->allReduce(buf.get(), buf.get(), (1 << 20) / 4, DataType::kFloat32, ReduceOp::kSum,
                    stream);
    cudaCheck(cudaStreamSynchronize(stream), "the stream must be released");
    std::string message;
    try {
      cuda->synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    check(message.find("rank 0") != std::string::npos &&
              message.find("device allreduce #1") != std::string::npos,
          "rank 0: expected an error naming rank 0 and device allreduce #1, got '{}'", message);
    bool threw = false;
    try {
      cuda->allReduce(buf.get(), buf.get(), 16, DataType::kFloat32, ReduceOp::kSum, stream);
    } catch (const Error&) {
      threw = true;
    }
    check(threw, "rank 0: a call after the failure must throw");
    cudaStreamDestroy(stream);
  }, o);
}

TEST_F(CudaAllReduce, HostPointerIsRejectedAtTheCall) {
  spawn(1, [](Communicator& comm) {
    auto cuda = deviceCommunicator(comm, staged());
    std::vector<float> host(64);
    ErrorCode code = ErrorCode::kInternal;
    try {
      cuda->allReduce(host.data(), host.data(), host.size(), DataType::kFloat32, ReduceOp::kSum,
                      nullptr);
    } catch (const Error& e) {
      code = e.code();
    }
    check(code == ErrorCode::kInvalidArgument, "a pageable host pointer must be refused");
  }, spawnOptions());
}

}  // namespace
}  // namespace gyre

#endif  // GYRE_HAVE_CUDA
