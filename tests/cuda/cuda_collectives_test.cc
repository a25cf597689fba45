// The device all-to-all, all-to-allv, send / recv / sendRecv and barrier, on both paths:
// through CUDA IPC (ranks of one GPU) and staged through the host (CudaOptions::ipc =
// false, as on several hosts or with GYRE_CUDA_IPC=0), 2, 3 and 4 ranks (processes).
// Every result is compared byte for byte with Communicator's on the same data in the
// same run: every dtype for all-to-all, zero counts, uneven all-to-allv blocks with zeros
// and gaps, staging rounds small enough (4 KiB) that a few KiB take many; a send/recv ring,
// a sendRecv ring in place and out, a rank that only receives; a barrier that holds a
// stream until the last rank calls; calls that return before the peers call; refused
// arguments; a mismatched all-to-allv count; a peer killed
// mid-collective and an abort() that releases a stream waiting in a recv. Built as
// cuda_collectives_test on a GPU and as fake_cuda_collectives_test on the fake CUDA
// runtime (cuda/fake/).
#include <gtest/gtest.h>

#if !GYRE_HAVE_CUDA

TEST(CudaCollectives, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without CUDA: no CUDA toolkit was found at configure time";
}

#else

#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdlib.h>

#include <cstring>
#include <thread>
#include <tuple>
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

// memcmp of n bytes, for buffers that may be empty (an empty vector's data() is null).
bool sameBytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

SpawnOptions spawnOptions() {
  SpawnOptions o;
  o.options.timeout = std::chrono::seconds(60);
  return o;
}

// 4 KiB slots on either path: a few KiB already take several rounds.
CudaOptions smallRounds(bool ipc) {
  CudaOptions o;
  o.ipc = ipc;
  o.ipcSlotBytes = 4096;
  o.sliceBytes = 4096;
  o.minSliceBytes = 16;
  return o;
}

std::unique_ptr<CudaCommunicator> makeCuda(Communicator& comm, bool ipc) {
  cudaCheck(cudaSetDevice(0), "cudaSetDevice");
  auto cuda = CudaCommunicator::createBeside(comm, smallRounds(ipc));
  check(cuda->usesDeviceIpc() == ipc, "rank {}: usesDeviceIpc() is {}, expected {}", comm.rank(),
        cuda->usesDeviceIpc(), ipc);
  return cuda;
}

struct Sync {
  CudaCommunicator& cuda;
  cudaStream_t stream;
  void operator()() const {
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda.synchronize();
  }
};

// Distinct bytes per rank, element and salt, for every dtype.
std::vector<std::byte> pattern(DataType t, int rank, size_t count, int salt) {
  return testing::inputBuffer(t, ReduceOp::kSum, rank * 13 + salt * 5 + 1, count);
}

std::vector<std::byte> download(const char* p, size_t bytes) {
  std::vector<std::byte> out(bytes);
  cudaCheck(cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return out;
}

class CudaCollectivesRanks : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

std::string pathName(bool ipc) { return ipc ? "ipc" : "staged"; }

TEST_P(CudaCollectivesRanks, AllToAllEveryDtypeMatchesTheHost) {
  const auto [n, ipc] = GetParam();
  spawn(n, [n = n, ipc = ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const Sync sync{*cuda, stream};
    const int me = comm.rank();
    for (DataType t : testing::kAllTypes) {
      const size_t esize = dtypeSize(t);
      for (size_t count : {size_t{0}, size_t{1}, static_cast<size_t>(n + 1), 2 * 4096 / esize + 5}) {
        const size_t all = count * esize * n;
        const std::vector<std::byte> input = pattern(t, me, count * n, 0);
        std::vector<std::byte> host(all);
        comm.allToAll(input.data(), host.data(), count, t);
        DeviceBuffer send(all + 64), recv(all + 64);
        cudaCheck(cudaMemset(recv.get(), 0x5a, recv.bytes()), "cudaMemset");
        cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the memset runs on the legacy stream
        send.upload(input.data(), all);
        cuda->allToAll(send.get(), recv.get(), count, t, stream);
        sync();
        const std::vector<std::byte> got = recv.download();
        check(sameBytes(got.data(), host.data(), all),
              "rank {}/{} {}: alltoall {} count {} differs from the host's", me, n, pathName(ipc),
              dtypeName(t), count);
        check(got[all] == std::byte{0x5a} && got[all + 63] == std::byte{0x5a},
              "rank {}: alltoall wrote past recvbuf", me);
      }
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// Uneven blocks, zeros among them (a rank sends nothing to one peer, and some pairs
// nothing at all), packed and with gaps between the blocks.
TEST_P(CudaCollectivesRanks, AllToAllvUnevenCountsMatchTheHost) {
  const auto [n, ipc] = GetParam();
  spawn(n, [n = n, ipc = ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const Sync sync{*cuda, stream};
    const int me = comm.rank();
    // Elements rank a sends to rank b: 0 for a few pairs, up to several rounds.
    auto amount = [&](int a, int b, size_t scale) -> size_t {
      const int k = (a * 7 + b * 3) % 5;
      return k == 1 ? 0 : static_cast<size_t>(k) * scale + static_cast<size_t>(a + b);
    };
    for (DataType t : {DataType::kUint8, DataType::kFloat16, DataType::kInt32, DataType::kFloat64}) {
      const size_t esize = dtypeSize(t);
      for (size_t scale : {size_t{0}, size_t{3}, 1500 / esize}) {
        for (bool gaps : {false, true}) {
          std::vector<size_t> sc(n), rc(n), sd(n), rd(n);
          size_t sendTotal = 0, recvTotal = 0;
          for (int p = 0; p < n; ++p) {
            sc[p] = scale == 0 && p != me ? 0 : amount(me, p, scale);
            rc[p] = scale == 0 && p != me ? 0 : amount(p, me, scale);
            sd[p] = sendTotal + (gaps ? 3 : 0);
            rd[p] = recvTotal + (gaps ? 5 : 0);
            sendTotal = sd[p] + sc[p];
            recvTotal = rd[p] + rc[p];
          }
          const std::vector<std::byte> input = pattern(t, me, sendTotal + 1, 1);
          std::vector<std::byte> host(recvTotal * esize + 16, std::byte{0x5a});
          const size_t* sdp = gaps ? sd.data() : nullptr;
          const size_t* rdp = gaps ? rd.data() : nullptr;
          comm.allToAllv(input.data(), sc.data(), sdp, host.data(), rc.data(), rdp, t);
          DeviceBuffer send(sendTotal * esize + 16), recv(recvTotal * esize + 16);
          cudaCheck(cudaMemset(recv.get(), 0x5a, recv.bytes()), "cudaMemset");
          cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the memset runs on the legacy stream
          send.upload(input.data(), sendTotal * esize);
          cuda->allToAllv(send.get(), sc.data(), sdp, recv.get(), rc.data(), rdp, t, stream);
          sync();
          const std::vector<std::byte> got = recv.download();
          check(sameBytes(got.data(), host.data(), got.size()),
                "rank {}/{} {}: alltoallv {} scale {}{} differs from the host's", me, n,
                pathName(ipc), dtypeName(t), scale, gaps ? " with gaps" : "");
        }
      }
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

TEST_P(CudaCollectivesRanks, SendRecvPatternsMatchTheHost) {
  const auto [n, ipc] = GetParam();
  spawn(n, [n = n, ipc = ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const Sync sync{*cuda, stream};
    const int me = comm.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
    const DataType t = DataType::kInt32;
    for (size_t count : {size_t{1}, size_t{1000}, size_t{5000}}) {  // 5000: several slots
      const size_t bytes = count * 4;
      // A ring of plain sends and recvs: even ranks send first, odd ones receive first.
      {
        const std::vector<std::byte> mine = pattern(t, me, count, 2);
        std::vector<std::byte> host(bytes);
        if (me % 2 == 0) {
          comm.send(mine.data(), count, t, next);
          comm.recv(host.data(), count, t, prev);
        } else {
          comm.recv(host.data(), count, t, prev);
          comm.send(mine.data(), count, t, next);
        }
        DeviceBuffer out(bytes), in(bytes);
        out.upload(mine.data(), bytes);
        if (me % 2 == 0) {
          cuda->send(out.get(), count, t, next, stream);
          cuda->recv(in.get(), count, t, prev, stream);
        } else {
          cuda->recv(in.get(), count, t, prev, stream);
          cuda->send(out.get(), count, t, next, stream);
        }
        sync();
        check(sameBytes(in.download().data(), host.data(), bytes),
              "rank {}/{} {}: send/recv ring count {} differs from the host's", me, n,
              pathName(ipc), count);
      }
      // A sendRecv ring, the other way round, with different counts each way; out of
      // place, then in place.
      for (bool inPlace : {false, true}) {
        // Up to 4x apart: the ranks' sendRecvs take different numbers of rounds.
        const size_t sendCount = count * static_cast<size_t>(me + 1) + static_cast<size_t>(me);
        const size_t recvCount = count * static_cast<size_t>(next + 1) + static_cast<size_t>(next);
        const size_t room = std::max(sendCount, recvCount) * 4;
        const std::vector<std::byte> mine = pattern(t, me, sendCount, 3);
        std::vector<std::byte> host(room);
        comm.sendRecv(mine.data(), sendCount, prev, host.data(), recvCount, next, t);
        DeviceBuffer a(room), b(room);
        a.upload(mine.data(), sendCount * 4);
        char* into = inPlace ? a.get() : b.get();
        cuda->sendRecv(a.get(), sendCount, prev, into, recvCount, next, t, stream);
        sync();
        check(sameBytes(download(into, recvCount * 4).data(), host.data(), recvCount * 4),
              "rank {}/{} {}: sendrecv ring count {}{} differs from the host's", me, n,
              pathName(ipc), count, inPlace ? " in place" : "");
      }
      // Rank 0 sends to the last rank, which only receives; the others only meet after.
      {
        const std::vector<std::byte> mine = pattern(t, me, count, 4);
        DeviceBuffer buf(bytes);
        cudaCheck(cudaMemset(buf.get(), 0, bytes), "cudaMemset");
        cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the memset runs on the legacy stream
        if (me == 0) {
          buf.upload(mine.data(), bytes);
          cuda->send(buf.get(), count, t, n - 1, stream);
          cuda->send(buf.get(), 0, t, n - 1, stream);  // nothing to send: a no-op
        } else if (me == n - 1) {
          cuda->recv(buf.get(), count, t, 0, stream);
          cuda->recv(buf.get(), 0, t, 0, stream);
        }
        sync();
        if (me == n - 1) {
          check(sameBytes(buf.download().data(), pattern(t, 0, count, 4).data(), bytes),
                "rank {}/{} {}: the one-way recv of {} from rank 0 differs", me, n, pathName(ipc),
                count);
        }
      }
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// Every rank but the last enqueues the barrier and a copy after it; their streams must
// still wait when the last rank has not called the barrier yet, and go on once it has.
TEST_P(CudaCollectivesRanks, BarrierHoldsTheStreamsUntilTheLastRankCalls) {
  const auto [n, ipc] = GetParam();
  spawn(n, [n = n, ipc = ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const int me = comm.rank();
    DeviceBuffer flag(4);
    cudaCheck(cudaMemset(flag.get(), 0, 4), "cudaMemset");
    cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the memset runs on the legacy stream
    const int32_t one = 1;
    cuda->barrier(stream);  // a first one, so that the ranks start together
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    uint32_t enqueued = 0;
    if (me != n - 1) {
      cuda->barrier(stream);
      cudaCheck(cudaMemcpyAsync(flag.get(), &one, 4, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      check(cudaStreamQuery(stream) == cudaErrorNotReady,
            "rank {}/{} {}: the stream went past the barrier before rank {} called it", me, n,
            pathName(ipc), n - 1);
      enqueued = 1;
    }
    comm.allReduce(&enqueued, &enqueued, 1, DataType::kUint32, ReduceOp::kMax);
    if (me == n - 1) cuda->barrier(stream);
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda->synchronize();
    if (me != n - 1) {
      int32_t got = 0;
      cudaCheck(cudaMemcpy(&got, flag.get(), 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      check(got == 1, "rank {}: the copy after the barrier did not run", me);
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// All-gather, reduce-scatter and broadcast on the staged path too, several rounds.
TEST_P(CudaCollectivesRanks, AllGatherReduceScatterBroadcastMatchTheHost) {
  const auto [n, ipc] = GetParam();
  spawn(n, [n = n, ipc = ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const Sync sync{*cuda, stream};
    const int me = comm.rank();
    for (DataType t : {DataType::kInt8, DataType::kInt32, DataType::kFloat64, DataType::kBFloat16}) {
      const size_t esize = dtypeSize(t);
      for (size_t count : {size_t{0}, size_t{1}, 3 * 4096 / esize + 7}) {
        const size_t bytes = count * esize, all = bytes * n;
        const std::string what = fmt::format("rank {}/{} {}: {} count {}", me, n, pathName(ipc),
                                             dtypeName(t), count);
        for (bool inPlace : {false, true}) {
          const std::vector<std::byte> mine = pattern(t, me, count, 5);
          std::vector<std::byte> host(all);
          comm.allGather(mine.data(), host.data(), count, t);
          DeviceBuffer send(bytes), recv(all);
          char* in = inPlace ? recv.get() + me * bytes : send.get();
          cudaCheck(cudaMemcpy(in, mine.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
          cuda->allGather(in, recv.get(), count, t, stream);
          sync();
          check(sameBytes(recv.download().data(), host.data(), all),
                "{}: allgather{} differs from the host's", what, inPlace ? " in place" : "");

          const std::vector<std::byte> input = pattern(t, me, count * n, 6);
          std::vector<std::byte> expect(bytes);
          comm.reduceScatter(input.data(), expect.data(), count, t, ReduceOp::kSum);
          DeviceBuffer rsIn(all), rsOut(bytes);
          rsIn.upload(input.data(), all);
          char* out = inPlace ? rsIn.get() + me * bytes : rsOut.get();
          cuda->reduceScatter(rsIn.get(), out, count, t, ReduceOp::kSum, stream);
          sync();
          check(sameBytes(download(out, bytes).data(), expect.data(), bytes),
                "{}: reducescatter{} differs from the host's", what, inPlace ? " in place" : "");
        }
        for (int root = 0; root < n; ++root) {
          std::vector<std::byte> value = pattern(t, me, count, 7 + root);
          DeviceBuffer buf(bytes);
          buf.upload(value.data(), bytes);
          comm.broadcast(value.data(), count, t, root);
          cuda->broadcast(buf.get(), count, t, root, stream);
          sync();
          check(sameBytes(buf.download().data(), value.data(), bytes),
                "{}: broadcast from {} differs from the host's", what, root);
        }
      }
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

INSTANTIATE_TEST_SUITE_P(SharedGpu, CudaCollectivesRanks,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return fmt::format("{}ranks{}", std::get<0>(info.param),
                                              std::get<1>(info.param) ? "Ipc" : "Staged");
                         });

class CudaCollectives : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

// A count that differs from the peer's: every rank throws kMismatch naming both ranks
// (device path: before anything is enqueued), or the staged path fails with it.
TEST_P(CudaCollectives, AllToAllvMismatchNamesBothRanks) {
  const bool ipc = GetParam();
  spawn(3, [ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    std::vector<size_t> sc(3, 4), rc(3, 4);
    if (comm.rank() == 1) rc[0] = 5;  // rank 0 sends 4
    DeviceBuffer send(64), recv(64);
    std::string message;
    ErrorCode code = ErrorCode::kInternal;
    try {
      cuda->allToAllv(send.get(), sc.data(), nullptr, recv.get(), rc.data(), nullptr,
                      DataType::kInt32, stream);
      cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      cuda->synchronize();
    } catch (const Error& e) {
      message = e.what();
      code = e.code();
    }
    if (ipc || comm.rank() < 2) {
      check(code == ErrorCode::kMismatch && message.find("rank 0") != std::string::npos &&
                message.find("rank 1") != std::string::npos,
            "rank {}: expected kMismatch naming ranks 0 and 1, got '{}'", comm.rank(), message);
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// Rank 2 dies while ranks 0 and 1 wait for it inside an all-to-all: their streams are
// released and the error names the peer and the collective.
TEST_P(CudaCollectives, PeerKilledMidAllToAllReleasesTheOthers) {
  const bool ipc = GetParam();
  Options o;
  o.timeout = std::chrono::seconds(20);
  testing::CommRanks ranks(3, o, std::chrono::seconds(60));
  ranks.start([&](Communicator& comm, int rank) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t count = 4000;
    DeviceBuffer send(count * 4 * 3), recv(count * 4 * 3);
    if (rank == 2) {
      ranks.await("enqueued", 2);
      ::raise(SIGKILL);
    }
    cuda->allToAll(send.get(), recv.get(), count, DataType::kFloat32, stream);
    ranks.post("enqueued");
    cudaCheck(cudaStreamSynchronize(stream), "the stream must be released");
    std::string message;
    try {
      cuda->synchronize();
    } catch (const Error& e) {
      message = e.what();
    }
    check(message.find("rank 2") != std::string::npos &&
              message.find("device alltoall #1") != std::string::npos,
          "rank {}: expected an error naming rank 2 and device alltoall #1, got '{}'", rank,
          message);
    cudaStreamDestroy(stream);
  });
  const std::vector<testing::RankResult> results = ranks.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(results[r].ok && !results[r].hung) << results[r].describe();
    EXPECT_LT(results[r].seconds, 40) << results[r].describe();
  }
  EXPECT_TRUE(results[2].killedBy(SIGKILL)) << results[2].describe();
}

// Rank 0's stream waits in a recv from rank 1, which never sends; abort() on rank 0
// releases it, and the next call says the communicator was aborted.
TEST_P(CudaCollectives, AbortReleasesAStreamWaitingInRecv) {
  const bool ipc = GetParam();
  Options o;
  o.timeout = std::chrono::seconds(20);
  testing::CommRanks ranks(2, o, std::chrono::seconds(60));
  ranks.start([&](Communicator& comm, int rank) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    DeviceBuffer buf(4096);
    if (rank == 1) {
      ranks.waitFor(0, "released");
      cudaStreamDestroy(stream);
      return;
    }
    cuda->recv(buf.get(), 1024, DataType::kInt32, 1, stream);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    check(cudaStreamQuery(stream) == cudaErrorNotReady, "rank 0: the recv did not wait");
    cuda->abort();
    cudaCheck(cudaStreamSynchronize(stream), "the stream must be released");
    ranks.say("released");
    bool threw = false;
    try {
      cuda->barrier(stream);
    } catch (const Error& e) {
      threw = std::string(e.what()).find("abort") != std::string::npos;
    }
    check(threw, "rank 0: a call after abort() must throw saying so");
    cudaStreamDestroy(stream);
  });
  const std::vector<testing::RankResult> results = ranks.join();
  for (const auto& r : results) {
    EXPECT_TRUE(r.ok && !r.hung) << r.describe();
    EXPECT_LT(r.seconds, 40) << r.describe();
  }
}

// Wrong arguments throw kInvalidArgument from the call, naming the collective, and leave
// the communicator usable.
TEST_P(CudaCollectives, WrongArgumentsThrowAndLeaveTheCommunicatorUsable) {
  const bool ipc = GetParam();
  spawn(2, [ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const int me = comm.rank();
    DeviceBuffer a(4096), b(4096);
    auto expectInvalid = [&](const char* name, const char* mentions, auto call) {
      std::string message;
      ErrorCode code = ErrorCode::kInternal;
      try {
        call();
      } catch (const Error& e) {
        message = e.what();
        code = e.code();
      }
      check(code == ErrorCode::kInvalidArgument && message.find(mentions) != std::string::npos,
            "rank {}: {}: expected kInvalidArgument mentioning '{}', got '{}'", me, name, mentions,
            message);
    };
    expectInvalid("alltoall overlap", "device alltoall", [&] {
      cuda->allToAll(a.get(), a.get() + 8, 16, DataType::kInt32, stream);
    });
    expectInvalid("send to itself", "not another rank", [&] {
      cuda->send(a.get(), 16, DataType::kInt32, me, stream);
    });
    expectInvalid("recv from no rank", "not another rank", [&] {
      cuda->recv(a.get(), 16, DataType::kInt32, 2, stream);
    });
    expectInvalid("sendrecv partial overlap", "overlap", [&] {
      cuda->sendRecv(a.get(), 16, 1 - me, a.get() + 4, 16, 1 - me, DataType::kInt32, stream);
    });
    std::vector<size_t> sc{4, 4}, rc{4, 4};
    rc[me] = 5;
    expectInvalid("alltoallv own block", "device alltoallv", [&] {
      cuda->allToAllv(a.get(), sc.data(), nullptr, b.get(), rc.data(), nullptr, DataType::kInt32, stream);
    });
    expectInvalid("a host pointer", "not memory CUDA knows", [&] {
      std::vector<int32_t> host(64);
      cuda->allToAll(host.data(), b.get(), 16, DataType::kInt32, stream);
    });
    // Still usable: an all-to-all right after.
    std::vector<int32_t> x(32);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i) + 100 * me;
    a.upload(x.data(), x.size() * 4);
    cuda->allToAll(a.get(), b.get(), 16, DataType::kInt32, stream);
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda->synchronize();
    std::vector<int32_t> host(32);
    comm.allToAll(x.data(), host.data(), 16, DataType::kInt32);
    check(sameBytes(b.download().data(), host.data(), 128),
          "rank {}: the all-to-all after the refused calls differs", me);
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

// The calls only enqueue: rank 0's all-to-all, recv and barrier return while rank 1 has
// not called them yet (on either path nothing on the calling thread waits for a peer).
TEST_P(CudaCollectives, CallsReturnBeforeThePeersCall) {
  const bool ipc = GetParam();
  spawn(2, [ipc](Communicator& comm) {
    auto cuda = makeCuda(comm, ipc);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t count = 100000;  // int32 per block: many rounds
    DeviceBuffer send(count * 8), recv(count * 8), p2p(count * 4);
    std::vector<int32_t> x(count * 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i * 3) + comm.rank();
    send.upload(x.data(), x.size() * 4);
    uint32_t enqueued = 0;
    auto calls = [&] {
      cuda->allToAll(send.get(), recv.get(), count, DataType::kInt32, stream);
      if (comm.rank() == 0) {
        cuda->recv(p2p.get(), count, DataType::kInt32, 1, stream);
      } else {
        cuda->send(send.get(), count, DataType::kInt32, 0, stream);
      }
      cuda->barrier(stream);
    };
    if (comm.rank() == 0) {
      calls();
      check(cudaStreamQuery(stream) == cudaErrorNotReady, "rank 0's stream did not wait for rank 1");
      enqueued = 1;
    }
    comm.allReduce(&enqueued, &enqueued, 1, DataType::kUint32, ReduceOp::kMax);
    if (comm.rank() == 1) calls();
    cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    cuda->synchronize();
    std::vector<int32_t> host(count * 2);
    comm.allToAll(x.data(), host.data(), count, DataType::kInt32);
    check(sameBytes(recv.download().data(), host.data(), host.size() * 4),
          "rank {}: the all-to-all differs from the host's", comm.rank());
    if (comm.rank() == 0) {
      std::vector<int32_t> want(count);
      for (size_t i = 0; i < count; ++i) want[i] = static_cast<int32_t>(i * 3) + 1;
      check(sameBytes(p2p.download().data(), want.data(), count * 4),
            "rank 0: the recv differs from rank 1's data");
    }
    cudaStreamDestroy(stream);
  }, spawnOptions());
}

INSTANTIATE_TEST_SUITE_P(BothPaths, CudaCollectives, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Ipc" : "Staged"; });

}  // namespace
}  // namespace gyre

#endif  // GYRE_HAVE_CUDA
