// The device collectives through CUDA IPC (cuda/ipc_collectives.h): 2, 3 and 4 ranks
// (processes) on one GPU; all-reduce, all-gather, reduce-scatter and broadcast, every
// dtype and op, 1 element to many staging rounds, in place and out of place, compared bit
// for bit with the host collectives of the same inputs in the same run and across ranks;
// calls on two streams kept in call order; a chain of different collectives with no host
// wait; GYRE_CUDA_IPC=0 keeps the staged path (which runs the others through the host); a
// peer killed mid-collective and an abort on one rank fail the others instead of hanging
// their streams. Built as cuda_ipc_allreduce_test on a GPU and
// as fake_cuda_ipc_allreduce_test on the fake CUDA runtime (cuda/fake/).
#include <gtest/gtest.h>

#if !GYRE_HAVE_CUDA

TEST(CudaIpcAllReduce, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without CUDA: no CUDA toolkit was found at configure time";
}

#else

#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdlib.h>

#include <cstring>
#include <vector>

#include "base/error.h"
#include "cuda/cuda_communicator.h"
#include "cuda_test_support.h"
#include "ring/communicator.h"
#include "ring/spawn.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;
using testing::cudaCheck;
using testing::DeviceBuffer;

SpawnOptions spawnOptions() {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  return o;
}

// The smallest staging slots (4 KiB): a few KiB of data already takes several rounds
// through both slots.
CudaOptions smallRounds() {
  CudaOptions o;
  o.ipcSlotBytes = 4096;
  return o;
}

std::unique_ptr<CudaCommunicator> ipcCommunicator(Communicator& comm, const CudaOptions& o,
                                                  bool wantIpc = true) {
  cudaCheck(cudaSetDevice(0), "cudaSetDevice");
  auto cuda = CudaCommunicator::createBeside(comm, o);
  check(cuda->usesDeviceIpc() == wantIpc, "rank {}: usesDeviceIpc() is {}, expected {}",
        comm.rank(), cuda->usesDeviceIpc(), wantIpc);
  return cuda;
}

// One device all-reduce, compared with the host all-reduce of the same input (bitwise),
// with the exact expected values, and across ranks.
void checkAgainstHost(Communicator& comm, CudaCommunicator& cuda, cudaStream_t stream, DataType t,
                      ReduceOp op, size_t count, bool inPlace) {
  const size_t bytes = count * dtypeSize(t);
  const std::vector<std::byte> input = testing::inputBuffer(t, op, comm.rank(), count);
  std::vector<std::byte> host = input;
  comm.allReduce(host.data(), host.data(), count, t, op);
  DeviceBuffer send(bytes + 64), recv(bytes + 64);
  cudaCheck(cudaMemset(send.get(), 0x3c, send.bytes()), "cudaMemset");
  cudaCheck(cudaMemset(recv.get(), 0x5a, recv.bytes()), "cudaMemset");
  send.upload(input.data(), bytes);
  char* out = inPlace ? send.get() : recv.get();
  cuda.allReduce(send.get(), out, count, t, op, stream);
  cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda.synchronize();
  const std::vector<std::byte> got = inPlace ? send.download() : recv.download();
  const std::string what = fmt::format("rank {}/{}: {} {} count {} {}", comm.rank(), comm.size(),
                                       dtypeName(t), opName(op), count,
                                       inPlace ? "in place" : "out of place");
  check(std::memcmp(got.data(), host.data(), bytes) == 0, "{}: differs from the host all-reduce",
        what);
  const std::vector<std::byte> expected = testing::expectedBuffer(t, op, comm.size(), count);
  check(std::memcmp(got.data(), expected.data(), bytes) == 0, "{}: wrong values", what);
  const std::byte guard{static_cast<unsigned char>(inPlace ? 0x3c : 0x5a)};
  check(got[bytes] == guard && got[bytes + 63] == guard, "{}: wrote past recvbuf", what);
  if (!inPlace) {
    const std::vector<std::byte> sendAfter = send.download();
    check(std::memcmp(sendAfter.data(), input.data(), bytes) == 0, "{}: sendbuf changed", what);
  }
  uint64_t sum = testing::checksum(got.data(), bytes), lo = sum, hi = sum;
  comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
  comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
  check(lo == hi, "{}: ranks hold different bits", what);
}

class CudaIpcAllReduceRanks : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

TEST_P(CudaIpcAllReduceRanks, EveryDtypeAndOpMatchesTheHostBitForBit) {
  const int n = GetParam();
  spawn(n, [n](Communicator& comm) {
    auto cuda = ipcCommunicator(comm, smallRounds());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (DataType t : testing::kAllTypes) {
      const size_t perRound = 4096 / dtypeSize(t);
      // 1 element; fewer than the ranks' chunks; one round less one; several rounds and a
      // ragged tail (chunks of 16-byte multiples leave the last rank short or empty).
      const size_t counts[] = {1, static_cast<size_t>(n + 1), perRound - 1, 5 * perRound + 7};
      for (ReduceOp op : testing::kAllOps) {
        for (size_t count : counts) {
          checkAgainstHost(comm, *cuda, stream, t, op, count, false);
          checkAgainstHost(comm, *cuda, stream, t, op, count, true);
        }
      }
    }
    // Real-valued floats: not exact, but still the same bits on every rank.
    const size_t count = 50000;
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = 1.0f / static_cast<float>(i + 3 + comm.rank());
    DeviceBuffer buf(count * 4);
    buf.upload(values.data(), count * 4);
    cuda->allReduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, stream);
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const std::vector<std::byte> got = buf.download();
    uint64_t sum = testing::checksum(got.data(), got.size()), lo = sum, hi = sum;
    comm.allReduce(&lo, &lo, 1, DataType::kUint64, ReduceOp::kMin);
    comm.allReduce(&hi, &hi, 1, DataType::kUint64, ReduceOp::kMax);
    check(lo == hi, "rank {}: inexact float sums differ between ranks", comm.rank());
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// All-gather, reduce-scatter and broadcast against Communicator's on the same inputs.
void checkOthers(Communicator& comm, CudaCommunicator& cuda, cudaStream_t stream, DataType t,
                 size_t count) {
  const int n = comm.size(), me = comm.rank();
  const size_t esize = dtypeSize(t), bytes = count * esize, all = bytes * static_cast<size_t>(n);
  const std::string what = fmt::format("rank {}/{}: {} count {}", me, n, dtypeName(t), count);
  auto sync = [&] {
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda.synchronize();
  };
  // All-gather, out of place and in place.
  const std::vector<std::byte> mine = testing::inputBuffer(t, ReduceOp::kSum, me, count);
  std::vector<std::byte> host(all);
  comm.allGather(mine.data(), host.data(), count, t);
  for (bool inPlace : {false, true}) {
    DeviceBuffer send(bytes), recv(all);
    cudaCheck(cudaMemset(recv.get(), 0x5a, all), "cudaMemset");
    char* in = inPlace ? recv.get() + static_cast<size_t>(me) * bytes : send.get();
    cudaCheck(cudaMemcpy(in, mine.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda.allGather(in, recv.get(), count, t, stream);
    sync();
    check(std::memcmp(recv.download().data(), host.data(), all) == 0,
          "{}: allgather{} differs from the host's", what, inPlace ? " in place" : "");
  }
  // Reduce-scatter, every op, out of place and in place.
  for (ReduceOp op : testing::kAllOps) {
    std::vector<std::byte> input(all);
    for (int b = 0; b < n; ++b) {
      const std::vector<std::byte> block = testing::inputBuffer(t, op, me + b * 3, count);
      std::memcpy(input.data() + static_cast<size_t>(b) * bytes, block.data(), bytes);
    }
    std::vector<std::byte> expect(bytes);
    comm.reduceScatter(input.data(), expect.data(), count, t, op);
    for (bool inPlace : {false, true}) {
      DeviceBuffer send(all), recv(bytes);
      send.upload(input.data(), all);
      char* out = inPlace ? send.get() + static_cast<size_t>(me) * bytes : recv.get();
      cuda.reduceScatter(send.get(), out, count, t, op, stream);
      sync();
      std::vector<std::byte> got(bytes);
      cudaCheck(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
      check(std::memcmp(got.data(), expect.data(), bytes) == 0,
            "{}: reducescatter {}{} differs from the host's", what, opName(op),
            inPlace ? " in place" : "");
    }
  }
  // Broadcast from every root.
  for (int root = 0; root < n; ++root) {
    std::vector<std::byte> value = testing::inputBuffer(t, ReduceOp::kSum, me + 7 * root, count);
    DeviceBuffer buf(bytes);
    buf.upload(value.data(), bytes);
    comm.broadcast(value.data(), count, t, root);
    cuda.broadcast(buf.get(), count, t, root, stream);
    sync();
    check(std::memcmp(buf.download().data(), value.data(), bytes) == 0,
          "{}: broadcast from {} differs from the host's", what, root);
  }
}

TEST_P(CudaIpcAllReduceRanks, AllGatherReduceScatterBroadcastMatchTheHost) {
  const int n = GetParam();
  spawn(n, [n](Communicator& comm) {
    auto cuda = ipcCommunicator(comm, smallRounds());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    for (DataType t : testing::kAllTypes) {
      const size_t perRound = 4096 / dtypeSize(t);
      // Reduce-scatter's rounds hold 1/n of a slot per block: 5 * perRound takes many.
      for (size_t count : {size_t{1}, static_cast<size_t>(n + 1), perRound - 1, 5 * perRound + 7}) {
        checkOthers(comm, *cuda, stream, t, count);
      }
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// Different collectives back to back on one stream, no host wait between them, each the
// next one's input: the staging slots pass from one kind of collective to the next.
TEST_P(CudaIpcAllReduceRanks, MixedCollectivesChainWithoutHostWaits) {
  const int n = GetParam();
  spawn(n, [n](Communicator& comm) {
    auto cuda = ipcCommunicator(comm, smallRounds());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t count = 3001;  // int32: several rounds of every kind
    const size_t bytes = count * 4;
    std::vector<int32_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = static_cast<int32_t>(i % 97) + comm.rank();
    DeviceBuffer a(bytes), gathered(bytes * n), scattered(bytes);
    a.upload(x.data(), bytes);
    for (int k = 0; k < 3; ++k) {
      cuda->allReduce(a.get(), a.get(), count, DataType::kInt32, ReduceOp::kSum, stream);
      cuda->broadcast(a.get(), count, DataType::kInt32, (k + 1) % n, stream);
      cuda->allGather(a.get(), gathered.get(), count, DataType::kInt32, stream);
      cuda->reduceScatter(gathered.get(), scattered.get(), count, DataType::kInt32, ReduceOp::kMax,
                          stream);
      cuda->allReduce(scattered.get(), a.get(), count, DataType::kInt32, ReduceOp::kMin, stream);
    }
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda->synchronize();
    // The host's answer for the same chain.
    std::vector<int32_t> h = x, g(count * n), sc(count);
    for (int k = 0; k < 3; ++k) {
      comm.allReduce(h.data(), h.data(), count, DataType::kInt32, ReduceOp::kSum);
      comm.broadcast(h.data(), count, DataType::kInt32, (k + 1) % n);
      comm.allGather(h.data(), g.data(), count, DataType::kInt32);
      comm.reduceScatter(g.data(), sc.data(), count, DataType::kInt32, ReduceOp::kMax);
      comm.allReduce(sc.data(), h.data(), count, DataType::kInt32, ReduceOp::kMin);
    }
    const std::vector<std::byte> got = a.download();
    check(std::memcmp(got.data(), h.data(), bytes) == 0, "rank {}/{}: the chain differs from the host's",
          comm.rank(), n);
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaIpcAllReduceRanks, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return fmt::format("{}ranks", info.param); });

class CudaIpcAllReduce : public ::testing::Test {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

// Calls alternate between two streams, each call's input the previous call's output,
// with no host wait: only the communicator's own ordering of its collectives (one after
// the other, whatever the stream) makes the result right.
TEST_F(CudaIpcAllReduce, CallsOnTwoStreamsRunInCallOrder) {
  spawn(3, [](Communicator& comm) {
    auto cuda = ipcCommunicator(comm, smallRounds());
    cudaStream_t a, b;
    cudaCheck(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreate");
    cudaCheck(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t count = 20011;
    std::vector<int64_t> host(count, comm.rank() + 1);
    DeviceBuffer x(count * 8), y(count * 8);
    x.upload(host.data(), count * 8);
    for (int k = 0; k < 6; ++k) {
      const bool even = k % 2 == 0;
      cuda->allReduce(even ? x.get() : y.get(), even ? y.get() : x.get(), count, DataType::kInt64,
                      ReduceOp::kSum, even ? a : b);
    }
    cuda->synchronize();
    std::vector<std::byte> got = x.download();
    std::memcpy(host.data(), got.data(), count * 8);
    int64_t want = 6;
    for (int k = 1; k < 6; ++k) want *= 3;
    check(std::all_of(host.begin(), host.end(), [&](int64_t v) { return v == want; }),
          "rank {}: chained result {} != {}", comm.rank(), host[0], want);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }, spawnOptions());
}

// The call only enqueues: rank 0's all-reduce of 64 MiB returns while rank 1 has not
// even called it, so nothing on rank 0's thread waits for the device or the peer.
TEST_F(CudaIpcAllReduce, TheCallReturnsBeforeThePeersCall) {
  spawn(2, [](Communicator& comm) {
    auto cuda = ipcCommunicator(comm, CudaOptions{});
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t count = size_t{16} << 20;  // 64 MiB of float: 16 rounds of 4 MiB
    DeviceBuffer buf(count * 4);
    cudaCheck(cudaMemset(buf.get(), 0, buf.bytes()), "cudaMemset");
    cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    uint32_t enqueued = 0;
    if (comm.rank() == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      cuda->allReduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, stream);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "rank 0: enqueue of a 64 MiB device allreduce through CUDA IPC: %.1f us\n", us);
      check(cudaStreamQuery(stream) == cudaErrorNotReady, "rank 0's stream did not wait for rank 1");
      enqueued = 1;
    }
    // Rank 1 calls only after rank 0's call has returned (this host all-reduce needs it).
    comm.allReduce(&enqueued, &enqueued, 1, DataType::kUint32, ReduceOp::kMax);
    if (comm.rank() == 1) {
      cuda->allReduce(buf.get(), buf.get(), count, DataType::kFloat32, ReduceOp::kSum, stream);
    }
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda->synchronize();
    cudaGetLastError();
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

TEST_F(CudaIpcAllReduce, OptOutKeepsTheStagedPath) {
  // Read with the other GYRE_* settings, when the host communicator's options are parsed.
  ::setenv("GYRE_CUDA_IPC", "0", 1);
  const SpawnOptions optedOut = spawnOptions();
  ::unsetenv("GYRE_CUDA_IPC");
  spawn(2, [](Communicator& comm) {
    auto cuda = ipcCommunicator(comm, smallRounds(), false);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    checkAgainstHost(comm, *cuda, stream, DataType::kInt32, ReduceOp::kSum, 1000, true);
    // The other collectives are staged too (tests/cuda/cuda_collectives_test.cc has them all).
    checkOthers(comm, *cuda, stream, DataType::kInt32, 1000);
    cudaStreamDestroy(stream);
  }, optedOut);
}

#if GYRE_FAKE_CUDA
// One rank cannot map its peers' memory (the fake runtime fails its cudaIpcOpenMemHandle):
// every rank falls back to the staged path together, the log says why, results are right.
TEST_F(CudaIpcAllReduce, AFailedOpenOnOneRankKeepsEveryRankStaged) {
  Options o;
  o.timeout = std::chrono::seconds(20);
  testing::CommRanks ranks(3, o, std::chrono::seconds(60));
  ranks.start([&](Communicator& comm, int rank) {
    if (rank == 2) ::setenv("GYRE_FAKE_CUDA_IPC_OPEN_FAILS", "1", 1);
    auto cuda = ipcCommunicator(comm, smallRounds(), false);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    checkAgainstHost(comm, *cuda, stream, DataType::kFloat32, ReduceOp::kAvg, 5000, false);
    cudaStreamDestroy(stream);
  });
  const std::vector<testing::RankResult> results = ranks.join();
  testing::expectAllOk(results);
  EXPECT_NE(results[2].log.find("cudaIpcOpenMemHandle of rank 0's region"), std::string::npos)
      << results[2].log;
  EXPECT_NE(results[0].log.find("device all-reduce through CUDA IPC not used"), std::string::npos)
      << results[0].log;
}
#endif

// Rank 2 dies (SIGKILL) while ranks 0 and 1 wait for it inside a collective: their
// streams are released, synchronize() names the peer and the collective, and later
// calls fail at once.
TEST_F(CudaIpcAllReduce, PeerKilledMidCollectiveReleasesTheOthers) {
  Options o;
  o.timeout = std::chrono::seconds(20);
  testing::CommRanks ranks(3, o, std::chrono::seconds(60));
  ranks.start([&](Communicator& comm, int rank) {
    auto cuda = ipcCommunicator(comm, smallRounds());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    DeviceBuffer buf(1 << 16);
    if (rank == 2) {
      ranks.await("enqueued", 2);
      ::raise(SIGKILL);
    }
    cuda->allReduce(buf.get(), buf.get(), (1 << 16) / 4, DataType::kFloat32, ReduceOp::kSum, stream);
    ranks.post("enqueued");
    cudaCheck(cudaStreamSynchronize(stream), "the stream must be released");
    std::string message;
    try {
      cuda->synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    check(message.find("peer rank 2") != std::string::npos &&
              message.find("device allreduce #1") != std::string::npos,
          "rank {}: expected an error naming peer rank 2 and device allreduce #1, got '{}'", rank,
          message);
    bool threw = false;
    try {
      cuda->allReduce(buf.get(), buf.get(), 16, DataType::kFloat32, ReduceOp::kSum, stream);
    } catch (const Error&) {
      threw = true;
    }
    check(threw, "rank {}: a call after the failure must throw", rank);
    cudaStreamDestroy(stream);
  });
  const std::vector<testing::RankResult> results = ranks.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok && !results[r].hung) << results[r].describe();
    EXPECT_LT(results[r].seconds, 30) << results[r].describe();
  }
  EXPECT_TRUE(results[2].killedBy(SIGKILL)) << results[2].describe();
}

// Rank 1 aborts instead of calling: rank 0, waiting for it inside the collective, is
// released and told who aborted.
TEST_F(CudaIpcAllReduce, AbortOnOneRankReleasesTheOthers) {
  Options o;
  o.timeout = std::chrono::seconds(20);
  testing::CommRanks ranks(2, o, std::chrono::seconds(60));
  ranks.start([&](Communicator& comm, int rank) {
    auto cuda = ipcCommunicator(comm, smallRounds());
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    DeviceBuffer buf(1 << 16);
    if (rank == 1) {
      ranks.waitFor(0, "enqueued");
      cuda->abort();
      ranks.waitFor(0, "released");
      cudaStreamDestroy(stream);
      return;
    }
    cuda->allReduce(buf.get(), buf.get(), (1 << 16) / 4, DataType::kFloat32, ReduceOp::kSum, stream);
    ranks.say("enqueued");
    cudaCheck(cudaStreamSynchronize(stream), "the stream must be released");
    ranks.say("released");
    std::string message;
    try {
      cuda->synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    check(message.find("rank 1 aborted") != std::string::npos,
          "rank 0: expected an error saying rank 1 aborted, got '{}'", message);
    cudaStreamDestroy(stream);
  });
  const std::vector<testing::RankResult> results = ranks.join();
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok && !r.hung) << r.describe();
    EXPECT_LT(r.seconds, 30) << r.describe();
  }
}

}  // namespace
}  // namespace gyre

#endif  // GYRE_HAVE_CUDA
