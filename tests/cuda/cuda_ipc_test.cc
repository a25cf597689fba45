// CUDA IPC between processes, as gyre's device all-reduce uses it: device memory shared
// through cudaIpcGetMemHandle / cudaIpcOpenMemHandle (the exact bytes both ways, a second
// open counted, close), interprocess events ordering one process's stream after another's
// record (cudaStreamWaitEvent, cudaEventSynchronize, cudaEventQuery), stream memory
// operations on shared words, CUDA's errors for wrong handles, and nothing left behind.
// Every rank is a forked process that starts CUDA itself (a context does not survive
// fork). Built as cuda_ipc_test on a GPU and as fake_cuda_ipc_test against the fake CUDA
// runtime (cuda/fake/), where the same cases run on the CPU.
#include <gtest/gtest.h>

#if !GYRE_HAVE_CUDA

TEST(CudaIpc, NeedsTheCudaToolkit) {
  GTEST_SKIP() << "built without CUDA: no CUDA toolkit was found at configure time";
}

#else

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "test_values.h"

namespace gyre {
namespace {

using testing::check;
using testing::cudaCheck;
using testing::DeviceBuffer;
using testing::ForkedRanks;

std::string bytesOf(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

cudaIpcMemHandle_t memHandleFrom(const std::string& s) {
  cudaIpcMemHandle_t h;
  check(s.size() == sizeof h, "a handle of {} bytes", s.size());
  std::memcpy(&h, s.data(), sizeof h);
  return h;
}
cudaIpcEventHandle_t eventHandleFrom(const std::string& s) {
  cudaIpcEventHandle_t h;
  check(s.size() == sizeof h, "a handle of {} bytes", s.size());
  std::memcpy(&h, s.data(), sizeof h);
  return h;
}

void expectError(cudaError_t got, cudaError_t want, const char* what) {
  cudaGetLastError();
  check(got == want, "{}: got {} ({}), want {}", what, cudaGetErrorName(got),
        static_cast<int>(got), cudaGetErrorName(want));
}

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return v;
}

void* openMem(const std::string& handle) {
  void* p = nullptr;
  cudaCheck(cudaIpcOpenMemHandle(&p, memHandleFrom(handle), cudaIpcMemLazyEnablePeerAccess),
            "cudaIpcOpenMemHandle");
  return p;
}

using MemOpFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
MemOpFn driverMemOp(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<MemOpFn>(fn);
}

class CudaIpc : public ::testing::Test {
 protected:
  void SetUp() override { GYRE_SKIP_WITHOUT_GPU(); }
};

// Rank 0 exports an odd-sized allocation; the others read its exact bytes, rank 1 writes
// a range that rank 0 then reads; a second open returns the same pointer and closes count.
TEST_F(CudaIpc, MemoryIsTheSameBytesInEveryProcess) {
  constexpr size_t kBytes = (size_t{1} << 20) + 3;
  constexpr size_t kWriteAt = 4093, kWriteBytes = 70000;
  ForkedRanks ranks(3, std::chrono::seconds(60));
  ranks.start([&](int rank) {
    cudaCheck(cudaSetDevice(0), "cudaSetDevice");
    const std::vector<unsigned char> mine = pattern(kBytes, 1);
    const std::vector<unsigned char> theirs = pattern(kWriteBytes, 2);
    if (rank == 0) {
      DeviceBuffer buf(kBytes);
      buf.upload(mine.data(), kBytes);
      cudaIpcMemHandle_t h;
      // Any pointer inside the allocation names all of it.
      cudaCheck(cudaIpcGetMemHandle(&h, buf.get() + 100), "cudaIpcGetMemHandle");
      ranks.publish("mem", bytesOf(&h, sizeof h));
      ranks.await("written", 1);
      std::vector<unsigned char> want = mine;
      std::memcpy(want.data() + kWriteAt, theirs.data(), kWriteBytes);
      const std::vector<std::byte> got = buf.download();
      check(std::memcmp(got.data(), want.data(), kBytes) == 0, "rank 0 does not see rank 1's write");
      ranks.await("closed", 2);  // the memory stays until the importers are done
      return;
    }
    void* p = openMem(ranks.read("mem"));
    std::vector<unsigned char> got(kBytes);
    cudaCheck(cudaMemcpy(got.data(), p, kBytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    check(got == mine, "rank {}: the imported bytes differ from the exported ones", rank);
    ranks.post("read");  // rank 1 writes only once every importer has read
    cudaPointerAttributes attr{};
    cudaCheck(cudaPointerGetAttributes(&attr, p), "cudaPointerGetAttributes");
    check(attr.type == cudaMemoryTypeDevice, "imported memory is not device memory");
    void* again = openMem(ranks.read("mem"));
    check(again == p, "a second open returned {} for {}", again, p);
    if (rank == 1) {
      ranks.await("read", 2);
      cudaCheck(cudaMemcpy(static_cast<char*>(p) + kWriteAt, theirs.data(), kWriteBytes,
                           cudaMemcpyHostToDevice),
                "cudaMemcpy H2D");
      ranks.post("written");
    }
    cudaCheck(cudaIpcCloseMemHandle(again), "cudaIpcCloseMemHandle (1 of 2)");
    // Still mapped after the first close.
    cudaCheck(cudaMemcpy(got.data(), p, 16, cudaMemcpyDeviceToHost), "cudaMemcpy after one close");
    cudaCheck(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle (2 of 2)");
    expectError(cudaIpcCloseMemHandle(p), cudaErrorInvalidValue, "a third close");
    ranks.post("closed");
  });
  testing::expectAllOk(ranks.join());
}

// Rank 0's stream is held (a host function waits for rank 1's "go") before it writes a
// buffer and records an interprocess event. Rank 1, after the record, queries (not ready),
// makes its stream wait for the event, enqueues a copy of the buffer, then lets rank 0
// go: the copy sees rank 0's bytes only because the wait crossed the processes. Rank 2
// blocks in cudaEventSynchronize. Then the other way round: rank 1 records on the
// imported event and rank 0 waits.
TEST_F(CudaIpc, InterprocessEventsOrderStreamsAcrossProcesses) {
  constexpr size_t kBytes = 256 * 1024 + 5;
  ForkedRanks ranks(3, std::chrono::seconds(60));
  ranks.start([&](int rank) {
    cudaCheck(cudaSetDevice(0), "cudaSetDevice");
    const std::vector<unsigned char> first = pattern(kBytes, 3), second = pattern(kBytes, 4);
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    if (rank == 0) {
      DeviceBuffer buf(kBytes);
      cudaCheck(cudaMemset(buf.get(), 0, kBytes), "cudaMemset");
      cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      cudaEvent_t ev;
      cudaCheck(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming),
                "cudaEventCreateWithFlags");
      cudaIpcEventHandle_t eh;
      cudaCheck(cudaIpcGetEventHandle(&eh, ev), "cudaIpcGetEventHandle");
      cudaIpcMemHandle_t mh;
      cudaCheck(cudaIpcGetMemHandle(&mh, buf.get()), "cudaIpcGetMemHandle");
      ranks.publish("event", bytesOf(&eh, sizeof eh));
      ranks.publish("mem", bytesOf(&mh, sizeof mh));
      ranks.await("opened", 2);
      static ForkedRanks* group = &ranks;
      cudaCheck(cudaLaunchHostFunc(s, [](void*) { group->await("go", 1); }, nullptr),
                "cudaLaunchHostFunc");
      cudaCheck(cudaMemcpyAsync(buf.get(), first.data(), kBytes, cudaMemcpyHostToDevice, s),
                "cudaMemcpyAsync");
      cudaCheck(cudaEventRecord(ev, s), "cudaEventRecord");
      ranks.say("recorded");
      // The reverse direction: rank 1 records `second` on the imported event.
      ranks.waitFor(1, "recorded");
      cudaCheck(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
      std::vector<unsigned char> got(kBytes);
      cudaCheck(cudaMemcpyAsync(got.data(), buf.get(), kBytes, cudaMemcpyDeviceToHost, s),
                "cudaMemcpyAsync D2H");
      cudaCheck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      check(got == second, "rank 0 read the buffer before rank 1's recorded write");
      ranks.await("done", 2);
      cudaCheck(cudaEventDestroy(ev), "cudaEventDestroy");
    } else {
      cudaEvent_t ev;
      cudaCheck(cudaIpcOpenEventHandle(&ev, eventHandleFrom(ranks.read("event"))),
                "cudaIpcOpenEventHandle");
      char* p = static_cast<char*>(openMem(ranks.read("mem")));
      ranks.post("opened");
      ranks.waitFor(0, "recorded");
      if (rank == 1) {
        expectError(cudaEventQuery(ev), cudaErrorNotReady, "cudaEventQuery before rank 0's stream ran");
        void* pinned = nullptr;
        cudaCheck(cudaMallocHost(&pinned, kBytes), "cudaMallocHost");
        cudaCheck(cudaStreamWaitEvent(s, ev, 0), "cudaStreamWaitEvent");
        cudaCheck(cudaMemcpyAsync(pinned, p, kBytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
        ranks.post("go");
        cudaCheck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        check(std::memcmp(pinned, first.data(), kBytes) == 0,
              "rank 1's stream copied before rank 0's recorded write: the wait did not hold");
        cudaCheck(cudaEventQuery(ev), "cudaEventQuery after");
        ranks.await("synchronized", 1);  // rank 2 has seen the first record
        // Rank 1 records on the imported event; rank 0's stream waits for it.
        cudaCheck(cudaMemcpyAsync(p, second.data(), kBytes, cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync H2D");
        cudaCheck(cudaEventRecord(ev, s), "cudaEventRecord (imported)");
        ranks.say("recorded");
        cudaCheck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        cudaCheck(cudaFreeHost(pinned), "cudaFreeHost");
      } else {
        cudaCheck(cudaEventSynchronize(ev), "cudaEventSynchronize");
        check(ranks.count("go") == 1, "cudaEventSynchronize returned before rank 0's stream ran");
        std::vector<unsigned char> got(kBytes);
        cudaCheck(cudaMemcpy(got.data(), p, kBytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        check(got == first, "rank 2 saw other bytes after the event");
        ranks.post("synchronized");
      }
      cudaCheck(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
      cudaCheck(cudaEventDestroy(ev), "cudaEventDestroy (imported)");
      ranks.post("done");
    }
    cudaCheck(cudaStreamDestroy(s), "cudaStreamDestroy");
  });
  testing::expectAllOk(ranks.join());
}

// cuStreamWaitValue32 in one process on a word that another process's stream writes
// (cuStreamWriteValue32 through its import): the order gyre's device all-reduce relies on.
TEST_F(CudaIpc, StreamMemoryOperationsOnSharedWords) {
  constexpr size_t kBytes = 64 * 1024;
  ForkedRanks ranks(2, std::chrono::seconds(60));
  ranks.start([&](int rank) {
    cudaCheck(cudaSetDevice(0), "cudaSetDevice");
    MemOpFn wait = driverMemOp("cuStreamWaitValue32"), write = driverMemOp("cuStreamWriteValue32");
    check(wait != nullptr && write != nullptr, "no stream memory operations in this driver");
    const std::vector<unsigned char> data = pattern(kBytes, 5);
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    if (rank == 0) {
      DeviceBuffer buf(kBytes + 256);  // the flag word after the data
      cudaCheck(cudaMemset(buf.get(), 0, buf.bytes()), "cudaMemset");
      cudaCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      cudaIpcMemHandle_t h;
      cudaCheck(cudaIpcGetMemHandle(&h, buf.get()), "cudaIpcGetMemHandle");
      ranks.publish("mem", bytesOf(&h, sizeof h));
      const auto flag = reinterpret_cast<CUdeviceptr>(buf.get() + kBytes);
      check(wait(s, flag, 7, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS, "cuStreamWaitValue32");
      void* got = nullptr;  // pinned: a copy into pageable memory would block here
      cudaCheck(cudaMallocHost(&got, kBytes), "cudaMallocHost");
      cudaCheck(cudaMemcpyAsync(got, buf.get(), kBytes, cudaMemcpyDeviceToHost, s),
                "cudaMemcpyAsync");
      ranks.say("waiting");
      cudaCheck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      check(std::memcmp(got, data.data(), kBytes) == 0,
            "rank 0's stream went on before rank 1's write of the flag");
      ranks.say("done");
      cudaCheck(cudaFreeHost(got), "cudaFreeHost");
    } else {
      char* p = static_cast<char*>(openMem(ranks.read("mem")));
      ranks.waitFor(0, "waiting");
      check(!ranks.said(0, "done"), "rank 0's stream did not wait");
      cudaCheck(cudaMemcpyAsync(p, data.data(), kBytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
      check(write(s, reinterpret_cast<CUdeviceptr>(p + kBytes), 7, CU_STREAM_WRITE_VALUE_DEFAULT) ==
                CUDA_SUCCESS,
            "cuStreamWriteValue32");
      cudaCheck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      ranks.waitFor(0, "done");
      cudaCheck(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
    }
    cudaCheck(cudaStreamDestroy(s), "cudaStreamDestroy");
  });
  testing::expectAllOk(ranks.join());
}

// CUDA's errors: the exporter's own handle, a handle that is none, one whose allocation
// was freed, one whose process exited, export of what is not device memory, events
// without the interprocess flags.
TEST_F(CudaIpc, WrongHandlesFailAsCudaDoes) {
  ForkedRanks ranks(3, std::chrono::seconds(60));
  ranks.start([&](int rank) {
    cudaCheck(cudaSetDevice(0), "cudaSetDevice");
    if (rank == 0) {
      DeviceBuffer kept(4096);
      cudaIpcMemHandle_t h;
      cudaCheck(cudaIpcGetMemHandle(&h, kept.get()), "cudaIpcGetMemHandle");
      void* p = nullptr;
      expectError(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                  cudaErrorDeviceUninitialized, "opening this process's own handle");
      ranks.publish("kept", bytesOf(&h, sizeof h));
      {
        DeviceBuffer freed(4096);
        cudaIpcMemHandle_t f;
        cudaCheck(cudaIpcGetMemHandle(&f, freed.get()), "cudaIpcGetMemHandle");
        ranks.publish("freed", bytesOf(&f, sizeof f));
      }
      ranks.say("freed");
      std::vector<char> host(64);
      expectError(cudaIpcGetMemHandle(&h, host.data()), cudaErrorInvalidValue,
                  "a handle for pageable host memory");
      void* pinned = nullptr;
      cudaCheck(cudaMallocHost(&pinned, 64), "cudaMallocHost");
      expectError(cudaIpcGetMemHandle(&h, pinned), cudaErrorInvalidValue,
                  "a handle for pinned host memory");
      cudaCheck(cudaFreeHost(pinned), "cudaFreeHost");
      cudaEvent_t plain, timed;
      cudaCheck(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming), "cudaEventCreate");
      cudaIpcEventHandle_t eh;
      expectError(cudaIpcGetEventHandle(&eh, plain), cudaErrorInvalidResourceHandle,
                  "an event handle for an event without cudaEventInterprocess");
      expectError(cudaEventCreateWithFlags(&timed, cudaEventInterprocess), cudaErrorInvalidValue,
                  "cudaEventInterprocess without cudaEventDisableTiming");
      cudaCheck(cudaEventDestroy(plain), "cudaEventDestroy");
      expectError(cudaIpcCloseMemHandle(kept.get()), cudaErrorInvalidValue,
                  "closing memory that was not opened");
      ranks.await("checked", 1);
    } else if (rank == 1) {
      ranks.waitFor(0, "freed");
      void* p = nullptr;
      cudaIpcMemHandle_t junk;
      std::memset(&junk, 0x17, sizeof junk);
      expectError(cudaIpcOpenMemHandle(&p, junk, cudaIpcMemLazyEnablePeerAccess),
                  cudaErrorInvalidValue, "opening a handle that is none");
      const cudaError_t freed = cudaIpcOpenMemHandle(&p, memHandleFrom(ranks.read("freed")),
                                                     cudaIpcMemLazyEnablePeerAccess);
      cudaGetLastError();
      check(freed == cudaErrorMapBufferObjectFailed || freed == cudaErrorInvalidValue,
            "opening a freed allocation's handle: got {}", cudaGetErrorName(freed));
      cudaIpcEventHandle_t ejunk;
      std::memset(&ejunk, 0x2b, sizeof ejunk);
      cudaEvent_t ev;
      expectError(cudaIpcOpenEventHandle(&ev, ejunk), cudaErrorInvalidValue,
                  "opening an event handle that is none");
      ranks.post("checked");
    } else {
      // The exporter is gone: rank 0 has returned and its process exited.
      ranks.waitEnded(0);
      void* p = nullptr;
      const cudaError_t gone = cudaIpcOpenMemHandle(&p, memHandleFrom(ranks.read("kept")),
                                                    cudaIpcMemLazyEnablePeerAccess);
      cudaGetLastError();
      check(gone == cudaErrorMapBufferObjectFailed || gone == cudaErrorInvalidValue,
            "opening the handle of an exited process: got {}", cudaGetErrorName(gone));
    }
  });
  testing::expectAllOk(ranks.join());
}

std::set<std::string> shmEntries() {
  std::set<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) names.insert(e->d_name);
    ::closedir(d);
  }
  return names;
}

// An importer keeps the memory it mapped when the exporter dies (as CUDA does), and
// nothing stays in /dev/shm or among the processes' descriptors afterwards.
TEST_F(CudaIpc, NothingIsLeftBehind) {
  const std::set<std::string> before = shmEntries();
  constexpr size_t kBytes = 100000;
  ForkedRanks ranks(2, std::chrono::seconds(60));
  ranks.start([&](int rank) {
    cudaCheck(cudaSetDevice(0), "cudaSetDevice");
    const std::vector<unsigned char> data = pattern(kBytes, 6);
    if (rank == 0) {
      void* p = nullptr;
      cudaCheck(cudaMalloc(&p, kBytes), "cudaMalloc");
      cudaCheck(cudaMemcpy(p, data.data(), kBytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      cudaIpcMemHandle_t h;
      cudaCheck(cudaIpcGetMemHandle(&h, p), "cudaIpcGetMemHandle");
      ranks.publish("mem", bytesOf(&h, sizeof h));
      ranks.waitFor(1, "opened");
      ::_exit(0);  // no cudaFree: the process ends with the memory exported
    }
    void* p = openMem(ranks.read("mem"));
    ranks.say("opened");
    ranks.waitEnded(0);
    std::vector<unsigned char> got(kBytes);
    cudaCheck(cudaMemcpy(got.data(), p, kBytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    check(got == data, "the imported memory changed when its exporter exited");
    cudaCheck(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
  });
  const std::vector<pid_t> ours = {::getpid(), ranks.pid(0), ranks.pid(1)};
  const std::vector<testing::RankResult> results = ranks.join();
  EXPECT_TRUE(results[1].ok) << results[1].describe();
  // Tests running beside this one make entries of their own, named by their processes'
  // ids: what counts is a new entry naming one of ours.
  std::vector<std::string> left;
  for (const std::string& name : shmEntries()) {
    if (before.count(name)) continue;
    for (pid_t pid : ours) {
      if (name.find(std::to_string(pid)) != std::string::npos) left.push_back(name);
    }
  }
  EXPECT_TRUE(left.empty()) << "the runtime left " << left.size() << " entries in /dev/shm, "
                            << (left.empty() ? "" : left[0]);
}

}  // namespace
}  // namespace gyre

#endif  // GYRE_HAVE_CUDA
