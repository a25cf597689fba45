// The fake CUDA runtime: the CUDA runtime calls of gyre's device path, run on the CPU, so
// that CudaCommunicator, StreamRelease and the kernels of cuda_kernels/reduce_kernels.cuh
// (compiled for the host) run their tests without a GPU (docs/testing.md).
//
// What it models, as the CUDA programming guide states the semantics:
// - Device and pinned memory are heap memory, recorded as such: cudaPointerGetAttributes
//   answers device, host or unregistered, and a copy or memset whose range leaves its
//   allocation, or whose kind names the wrong side, fails with cudaErrorInvalidValue and
//   a line on stderr. New allocations hold a byte pattern (0xd5), so a read of what was
//   never written shows.
// - A stream is a thread that runs a FIFO of operations in order: copies, memsets, host
//   functions, kernels (cudaLaunchHostFunc from cuda/fake/reduce_launch_host.cc), event
//   waits and the driver's 32-bit wait-value/write-value. The legacy default stream
//   (nullptr) synchronises with the blocking streams both ways; cudaStreamNonBlocking
//   streams do not.
// - An event is "stream S has completed its first N operations", recorded in S's order;
//   cudaStreamWaitEvent is an operation that waits for it.
// - Host-side blocking as CUDA documents it: cudaMemcpy and cudaStreamSynchronize wait;
//   an async copy from pageable memory takes its bytes at the call, one into pageable
//   memory returns when done; cudaFree, cudaFreeHost and cudaStreamDestroy wait for the
//   work before them.
// - A host function runs on its stream's thread; a CUDA call from it (or from any
//   stream operation) fails with cudaErrorNotPermitted.
// - The child of a fork() after the runtime was used gets cudaErrorInitializationError
//   from every call, as CUDA's context does not survive fork.
// - Every wait is bounded: one that lasts GYRE_FAKE_CUDA_WAIT_S seconds (default 60)
//   prints what it waited for and aborts, so a stream that is never released fails its
//   test instead of hanging it.
// - CUDA IPC between processes: every device allocation is a shared mapping of its own
//   memfd, and cudaIpcGetMemHandle writes (pid, fd, allocation serial, size) into the
//   handle's 64 bytes; cudaIpcOpenMemHandle in another process maps the same bytes through
//   /proc/<pid>/fd/<fd> (nothing is named in /dev/shm, so nothing outlives the processes),
//   with CUDA's errors: a handle that is not one, cudaErrorInvalidValue; the exporting
//   process, or its allocation, gone, cudaErrorMapBufferObjectFailed; the exporting
//   process itself, cudaErrorDeviceUninitialized ("invalid device context"); a second
//   open of one handle returns the same pointer and counts (cudaIpcCloseMemHandle unmaps
//   at zero). Interprocess events (cudaEventInterprocess | cudaEventDisableTiming) keep
//   "recorded" and "completed" counters in a shared mapping of their own, so that
//   cudaStreamWaitEvent, cudaEventSynchronize and cudaEventQuery in one process see a
//   cudaEventRecord of another (the last record before the wait, as CUDA's). Stream
//   memory operations on shared words wake waiters in any process (futex).
//   GYRE_FAKE_CUDA_IPC_OPEN_FAILS=1 makes cudaIpcOpenMemHandle fail in that process
//   (cudaErrorMapBufferObjectFailed), for the tests of what happens when it does.
// What it does not model: time, the real concurrency of copy engines and SMs (a kernel's
// threads run one after another), code generation, several devices, hardware queues
// (CUDA_DEVICE_MAX_CONNECTIONS), peer access between devices.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// The handles the API hands out. Fields are guarded by the runtime's mutex.
struct CUstream_st {
  bool legacy = false;
  bool blocking = true;  // synchronises with the legacy default stream
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0;   // operations ever enqueued
  uint64_t completed = 0;  // operations that have run, in order
  bool stopping = false;
  std::condition_variable work;
  std::thread thread;
};

// An interprocess event's state, in a shared mapping of its own (a memfd page).
struct FakeIpcEventState {
  char magic[8];
  std::atomic<uint32_t> recorded;   // cudaEventRecord calls, in any process
  std::atomic<uint32_t> completed;  // the highest record its stream has passed (futex word)
};

struct CUevent_st {
  std::shared_ptr<CUstream_st> stream;  // null until recorded
  uint64_t target = 0;                  // done when stream->completed >= target
  FakeIpcEventState* ipc = nullptr;     // interprocess events: the shared state
  int fd = -1;                          // the exporter's memfd (-1 when imported)
  uint64_t serial = 0;
};

namespace {

using Clock = std::chrono::steady_clock;
using StreamPtr = std::shared_ptr<CUstream_st>;

constexpr int kDevices = 1;
constexpr int kMultiprocessors = 2;  // few, so that the kernels' grid-stride loops go round
constexpr std::align_val_t kAlignment{256};  // cudaMalloc's alignment
constexpr unsigned char kFreshByte = 0xd5;

struct Allocation {
  size_t size;
  bool device;        // else pinned host memory
  int fd = -1;        // device memory: the memfd behind the shared mapping (-1: imported)
  uint64_t serial = 0;
  size_t mapped = 0;  // device memory: the mapping's length
  // Imported through cudaIpcOpenMemHandle: the exporter and its serial, and the count of
  // opens not yet closed.
  pid_t owner = 0;
  int opens = 0;
};

struct Runtime {
  std::mutex mu;
  std::condition_variable progress;  // an operation completed somewhere
  std::map<CUstream_st*, StreamPtr> streams;
  StreamPtr legacy;  // created at first use
  std::map<CUevent_st*, std::unique_ptr<CUevent_st>> events;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  uint64_t serial = 0;                           // allocations and IPC events made
};

std::atomic<bool> forkedChild{false};
thread_local bool onStreamThread = false;
thread_local cudaError_t lastError = cudaSuccess;
thread_local int currentDevice = 0;

Runtime& rt() {
  // Never destroyed: stream threads may still be waiting when the process exits.
  static Runtime* const runtime = [] {
    pthread_atfork(nullptr, nullptr, [] { forkedChild.store(true); });
    return new Runtime;
  }();
  return *runtime;
}

std::string format(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

cudaError_t finish(cudaError_t err) {
  if (err != cudaSuccess && err != cudaErrorNotReady) lastError = err;
  return err;
}

cudaError_t complain(cudaError_t err, const char* call, const std::string& why) {
  std::fprintf(stderr, "fake CUDA: %s: %s\n", call, why.c_str());
  return finish(err);
}

// Refuses calls in a forked child and from stream threads (host functions).
cudaError_t entry() {
  if (forkedChild.load(std::memory_order_relaxed)) return cudaErrorInitializationError;
  if (onStreamThread) return cudaErrorNotPermitted;
  return cudaSuccess;
}

#define GYRE_FAKE_ENTRY()                                          \
  do {                                                             \
    if (const cudaError_t entry_ = entry(); entry_ != cudaSuccess) \
      return finish(entry_);                                       \
  } while (0)

double waitLimitSeconds() {
  static const double limit = [] {
    const char* s = std::getenv("GYRE_FAKE_CUDA_WAIT_S");
    const double v = s != nullptr ? std::atof(s) : 0;
    return v > 0 ? v : 60.0;
  }();
  return limit;
}

// When a wait begun now gives up (GYRE_FAKE_CUDA_WAIT_S), and how: the test aborts,
// saying what it waited for, instead of hanging.
Clock::time_point waitDeadline() {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(waitLimitSeconds()));
}
[[noreturn]] void abortWaiting(const std::string& what) {
  std::fprintf(stderr,
               "fake CUDA: %s: still waiting after %.0f s (a stream that is never released, "
               "or a deadlock); aborting\n",
               what.c_str(), waitLimitSeconds());
  std::fflush(stderr);
  std::abort();
}

// Waits (rt().mu held through `lock`) until done(); progress is notified whenever an
// operation completes, and the timed wait also catches a word changed by other means.
template <typename Done, typename What>
void boundedWait(std::unique_lock<std::mutex>& lock, Done done, What what) {
  if (done()) return;
  const auto deadline = waitDeadline();
  while (!done()) {
    if (Clock::now() >= deadline) abortWaiting(std::string(what()));
    rt().progress.wait_for(lock, std::chrono::milliseconds(10));
  }
}

// Waits (no lock held) until done(`*word`), for a word that any process may change:
// a futex wait on it, woken by wakeWord(), with the same bound as boundedWait.
template <typename Done, typename What>
void sharedWait(std::atomic<uint32_t>* word, Done done, What what) {
  const auto deadline = waitDeadline();
  for (;;) {
    const uint32_t seen = word->load(std::memory_order_acquire);
    if (done(seen)) return;
    if (Clock::now() >= deadline) abortWaiting(std::string(what()));
    timespec ts{0, 10 * 1000 * 1000};  // 10 ms: the deadline is checked between waits
    ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
}

void wakeWord(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::atomic<uint32_t>* asAtomic(uint32_t* word) {
  static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free);
  return reinterpret_cast<std::atomic<uint32_t>*>(word);
}

// Cyclic "a >= b", as CU_STREAM_WAIT_VALUE_GEQ compares.
bool reached(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }

// ---- Streams ------------------------------------------------------------------------------

void streamMain(CUstream_st* s) {
  onStreamThread = true;
  Runtime& r = rt();
  std::unique_lock<std::mutex> lock(r.mu);
  for (;;) {
    s->work.wait(lock, [&] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) return;
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    op();
    op = nullptr;
    lock.lock();
    ++s->completed;
    r.progress.notify_all();
  }
}

StreamPtr newStream(bool legacy, bool blocking) {
  auto s = std::make_shared<CUstream_st>();
  s->legacy = legacy;
  s->blocking = blocking;
  s->thread = std::thread(streamMain, s.get());
  return s;
}

// The stream behind a handle (lock held); null for an unknown handle.
StreamPtr resolve(cudaStream_t handle) {
  Runtime& r = rt();
  if (handle == nullptr || handle == cudaStreamLegacy) {
    if (!r.legacy) r.legacy = newStream(true, true);
    return r.legacy;
  }
  const auto it = r.streams.find(handle);
  return it == r.streams.end() ? nullptr : it->second;
}

std::function<void()> waitForStream(StreamPtr other, uint64_t target, const char* why) {
  return [other = std::move(other), target, why] {
    std::unique_lock<std::mutex> lock(rt().mu);
    boundedWait(lock, [&] { return other->completed >= target; },
                [&] { return format("a stream waiting for %s", why); });
  };
}

void push(CUstream_st* s, std::function<void()> op) {
  s->queue.push_back(std::move(op));
  ++s->enqueued;
  s->work.notify_one();
}

// Enqueues `op` on `s` (lock held), after the legacy default stream's implicit
// synchronisation: work on it waits for the earlier work of every blocking stream, and
// work on a blocking stream waits for its earlier work.
void enqueue(const StreamPtr& s, std::function<void()> op) {
  Runtime& r = rt();
  if (s->legacy) {
    for (const auto& [handle, other] : r.streams) {
      if (other->blocking && other->completed < other->enqueued) {
        push(s.get(), waitForStream(other, other->enqueued, "a blocking stream (legacy sync)"));
      }
    }
  } else if (s->blocking && r.legacy && r.legacy->completed < r.legacy->enqueued) {
    push(s.get(), waitForStream(r.legacy, r.legacy->enqueued, "the legacy stream (legacy sync)"));
  }
  push(s.get(), std::move(op));
}

void waitStream(std::unique_lock<std::mutex>& lock, const StreamPtr& s, uint64_t target,
                const char* call) {
  boundedWait(lock, [&] { return s->completed >= target; }, [&] { return std::string(call); });
}

void synchronizeAll(std::unique_lock<std::mutex>& lock, const char* call) {
  Runtime& r = rt();
  std::vector<std::pair<StreamPtr, uint64_t>> targets;
  if (r.legacy) targets.emplace_back(r.legacy, r.legacy->enqueued);
  for (const auto& [handle, s] : r.streams) targets.emplace_back(s, s->enqueued);
  boundedWait(
      lock,
      [&] {
        return std::all_of(targets.begin(), targets.end(),
                           [](const auto& t) { return t.first->completed >= t.second; });
      },
      [&] { return format("%s (every stream)", call); });
}

// ---- Memory -------------------------------------------------------------------------------

// The allocation holding `p` (lock held), or null.
const Allocation* findAllocation(const void* p, uintptr_t* base = nullptr) {
  auto& m = rt().allocations;
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(a);
  if (it == m.begin()) return nullptr;
  --it;
  if (a >= it->first + it->second.size) return nullptr;
  if (base != nullptr) *base = it->first;
  return &it->second;
}

enum class Side { kDevice, kHost, kAny };

// "" when [p, p + n) is memory of `side`, else why not (lock held). Pageable host memory
// is unknown to CUDA and cannot be checked beyond null.
std::string checkRange(const void* p, size_t n, Side side, const char* name) {
  if (p == nullptr) return format("%s is null", name);
  uintptr_t base = 0;
  const Allocation* a = findAllocation(p, &base);
  if (a != nullptr && reinterpret_cast<uintptr_t>(p) + n > base + a->size) {
    return format("%s %p + %zu bytes runs past the end of its %s allocation of %zu bytes at %p",
                  name, p, n, a->device ? "device" : "pinned host", a->size,
                  reinterpret_cast<void*>(base));
  }
  const bool device = a != nullptr && a->device;
  if (side == Side::kDevice && !device) return format("%s %p is not device memory", name, p);
  if (side == Side::kHost && device) {
    return format("%s %p is device memory, where the copy's kind says host", name, p);
  }
  return "";
}

std::string memfdName(const char* kind, pid_t pid, uint64_t serial) {
  return format("fake-cuda-%s-%d-%llu", kind, static_cast<int>(pid),
                static_cast<unsigned long long>(serial));
}

size_t pageRound(size_t n) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

// A shared mapping of `bytes` backed by a fresh memfd named `name`; its fd in *fd.
void* sharedMapping(const std::string& name, size_t bytes, int* fd) {
  *fd = static_cast<int>(::syscall(SYS_memfd_create, name.c_str(), MFD_CLOEXEC));
  if (*fd < 0) return nullptr;
  void* mem = MAP_FAILED;
  if (::ftruncate(*fd, static_cast<off_t>(bytes)) == 0) {
    mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  }
  if (mem == MAP_FAILED) {
    ::close(*fd);
    *fd = -1;
    return nullptr;
  }
  return mem;
}

cudaError_t allocate(void** p, size_t size, bool device, const char* call) {
  GYRE_FAKE_ENTRY();
  if (p == nullptr) return complain(cudaErrorInvalidValue, call, "null result pointer");
  const size_t bytes = std::max<size_t>(size, 1);
  Allocation a{bytes, device};
  void* mem = nullptr;
  if (device) {
    // A memfd of its own, so that cudaIpcGetMemHandle can hand it to another process.
    {
      std::lock_guard<std::mutex> lock(rt().mu);
      a.serial = ++rt().serial;
    }
    a.mapped = pageRound(bytes);
    mem = sharedMapping(memfdName("mem", ::getpid(), a.serial), a.mapped, &a.fd);
  } else {
    mem = ::operator new(bytes, kAlignment, std::nothrow);
  }
  if (mem == nullptr) return finish(cudaErrorMemoryAllocation);
  std::memset(mem, kFreshByte, bytes);
  std::lock_guard<std::mutex> lock(rt().mu);
  rt().allocations[reinterpret_cast<uintptr_t>(mem)] = a;
  *p = mem;
  return cudaSuccess;
}

cudaError_t release(void* p, bool device, const char* call) {
  GYRE_FAKE_ENTRY();
  if (p == nullptr) return cudaSuccess;
  Allocation a{};
  {
    std::unique_lock<std::mutex> lock(rt().mu);
    synchronizeAll(lock, call);  // as CUDA's: the work before it may still use the memory
    const auto it = rt().allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == rt().allocations.end() || it->second.device != device || it->second.opens > 0) {
      return complain(cudaErrorInvalidValue, call,
                      format("%p is not the start of a %s allocation%s", p,
                             device ? "device" : "pinned host",
                             it != rt().allocations.end() && it->second.opens > 0
                                 ? " (it was opened with cudaIpcOpenMemHandle: close it)"
                                 : ""));
    }
    a = it->second;
    rt().allocations.erase(it);
  }
  if (device) {
    ::munmap(p, a.mapped);
    ::close(a.fd);
  } else {
    ::operator delete(p, kAlignment);
  }
  return cudaSuccess;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                 bool sync, const char* call) {
  GYRE_FAKE_ENTRY();
  if (n == 0) return cudaSuccess;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return complain(cudaErrorInvalidValue, call, format("invalid kind %d", static_cast<int>(kind)));
  }
  const bool srcDevice = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool dstDevice = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const Side srcSide = kind == cudaMemcpyDefault ? Side::kAny : srcDevice ? Side::kDevice : Side::kHost;
  const Side dstSide = kind == cudaMemcpyDefault ? Side::kAny : dstDevice ? Side::kDevice : Side::kHost;
  std::unique_lock<std::mutex> lock(rt().mu);
  std::string why = checkRange(src, n, srcSide, "src");
  if (why.empty()) why = checkRange(dst, n, dstSide, "dst");
  if (why.empty()) {
    const uintptr_t s = reinterpret_cast<uintptr_t>(src), d = reinterpret_cast<uintptr_t>(dst);
    if (s < d + n && d < s + n) why = "src and dst overlap";
  }
  if (!why.empty()) return complain(cudaErrorInvalidValue, call, why);
  const StreamPtr s = resolve(stream);
  if (!s) return complain(cudaErrorInvalidResourceHandle, call, "unknown stream");
  // Pageable host memory as CUDA treats it: an async copy from it takes the bytes at the
  // call; one into it returns once the copy is done.
  const bool srcPageable = findAllocation(src) == nullptr;
  const bool dstPageable = findAllocation(dst) == nullptr;
  if (srcPageable && !sync) {
    auto bytes = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                     static_cast<const char*>(src) + n);
    enqueue(s, [dst, bytes] { std::memcpy(dst, bytes->data(), bytes->size()); });
  } else {
    enqueue(s, [dst, src, n] { std::memcpy(dst, src, n); });
  }
  if (sync || dstPageable) waitStream(lock, s, s->enqueued, call);
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t n, cudaStream_t stream, const char* call) {
  GYRE_FAKE_ENTRY();
  if (n == 0) return cudaSuccess;
  std::unique_lock<std::mutex> lock(rt().mu);
  const Allocation* a = findAllocation(dst);
  std::string why = a == nullptr ? format("dst %p is not memory CUDA knows", dst)
                                 : checkRange(dst, n, Side::kAny, "dst");
  if (!why.empty()) return complain(cudaErrorInvalidValue, call, why);
  const StreamPtr s = resolve(stream);
  if (!s) return complain(cudaErrorInvalidResourceHandle, call, "unknown stream");
  enqueue(s, [dst, value, n] { std::memset(dst, value, n); });
  return cudaSuccess;
}

// ---- The driver's stream memory operations ------------------------------------------------

CUresult memOpEntry() {
  if (forkedChild.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_INITIALIZED;
  if (onStreamThread) return CUDA_ERROR_NOT_PERMITTED;
  return CUDA_SUCCESS;
}

// The flag word (lock held): 4-byte aligned device memory.
uint32_t* memOpWord(CUdeviceptr addr, const char* call) {
  auto* p = reinterpret_cast<uint32_t*>(static_cast<uintptr_t>(addr));
  std::string why = addr % 4 != 0 ? format("address %#llx is not 4-byte aligned", addr)
                                  : checkRange(p, 4, Side::kDevice, "address");
  if (!why.empty()) {
    std::fprintf(stderr, "fake CUDA: %s: %s\n", call, why.c_str());
    return nullptr;
  }
  return p;
}

bool waitCondition(uint32_t word, uint32_t value, unsigned condition) {
  switch (condition) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return static_cast<int32_t>(word - value) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return word == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (word & value) != 0;
    default:  // CU_STREAM_WAIT_VALUE_NOR
      return ~(word | value) != 0;
  }
}

CUresult fakeStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                               unsigned int flags) {
  if (const CUresult r = memOpEntry(); r != CUDA_SUCCESS) return r;
  if ((flags & ~(3u | CU_STREAM_WAIT_VALUE_FLUSH)) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(rt().mu);
  uint32_t* word = memOpWord(addr, "cuStreamWaitValue32");
  if (word == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const StreamPtr s = resolve(stream);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  const unsigned condition = flags & 3u;
  // The word may be written by another process (IPC-shared memory): a futex wait.
  enqueue(s, [word, value, condition] {
    sharedWait(
        asAtomic(word), [&](uint32_t seen) { return waitCondition(seen, value, condition); },
        [&] { return format("cuStreamWaitValue32 on %p for %u (mode %u)", word, value, condition); });
  });
  return CUDA_SUCCESS;
}

CUresult fakeStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                unsigned int flags) {
  if (const CUresult r = memOpEntry(); r != CUDA_SUCCESS) return r;
  if ((flags & ~1u) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(rt().mu);
  uint32_t* word = memOpWord(addr, "cuStreamWriteValue32");
  if (word == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const StreamPtr s = resolve(stream);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  enqueue(s, [word, value] {
    asAtomic(word)->store(value, std::memory_order_release);
    wakeWord(asAtomic(word));
  });
  return CUDA_SUCCESS;
}

// ---- Events ---------------------------------------------------------------------------------

CUevent_st* findEvent(cudaEvent_t e) {
  const auto it = rt().events.find(e);
  return it == rt().events.end() ? nullptr : it->second.get();
}

}  // namespace

extern "C" {

// ---- Device and errors --------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  GYRE_FAKE_ENTRY();
  if (count == nullptr) return finish(cudaErrorInvalidValue);
  *count = kDevices;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  GYRE_FAKE_ENTRY();
  if (device == nullptr) return finish(cudaErrorInvalidValue);
  *device = currentDevice;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  GYRE_FAKE_ENTRY();
  if (device < 0 || device >= kDevices) return finish(cudaErrorInvalidDevice);
  currentDevice = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  GYRE_FAKE_ENTRY();
  if (value == nullptr) return finish(cudaErrorInvalidValue);
  if (device < 0 || device >= kDevices) return finish(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = kMultiprocessors;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    default:
      return complain(cudaErrorInvalidValue, "cudaDeviceGetAttribute",
                      format("attribute %d is not modelled", static_cast<int>(attr)));
  }
}

cudaError_t cudaDeviceSynchronize(void) {
  GYRE_FAKE_ENTRY();
  std::unique_lock<std::mutex> lock(rt().mu);
  synchronizeAll(lock, "cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t err = lastError;
  lastError = cudaSuccess;
  return err;
}

cudaError_t cudaPeekAtLastError(void) { return lastError; }

#define GYRE_FAKE_ERRORS(X)                                                     \
  X(cudaSuccess, "no error")                                                    \
  X(cudaErrorInvalidValue, "invalid argument")                                  \
  X(cudaErrorMemoryAllocation, "out of memory")                                 \
  X(cudaErrorInitializationError, "initialization error")                       \
  X(cudaErrorInsufficientDriver,                                                \
    "CUDA driver version is insufficient for CUDA runtime version")             \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                    \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                           \
  X(cudaErrorDeviceUninitialized, "invalid device context")                     \
  X(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed")          \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                  \
  X(cudaErrorSymbolNotFound, "named symbol not found")                          \
  X(cudaErrorNotReady, "device not ready")                                      \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")        \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                       \
  X(cudaErrorNotPermitted, "operation not permitted")                           \
  X(cudaErrorNotSupported, "operation not supported")                           \
  X(cudaErrorUnknown, "unknown error")

const char* cudaGetErrorName(cudaError_t error) {
#define GYRE_FAKE_NAME(code, text) \
  case code:                       \
    return #code;
  switch (error) {
    GYRE_FAKE_ERRORS(GYRE_FAKE_NAME)
    default:
      return "cudaErrorUnknown";
  }
#undef GYRE_FAKE_NAME
}

const char* cudaGetErrorString(cudaError_t error) {
#define GYRE_FAKE_TEXT(code, text) \
  case code:                       \
    return text;
  switch (error) {
    GYRE_FAKE_ERRORS(GYRE_FAKE_TEXT)
    default:
      return "unrecognized error code";
  }
#undef GYRE_FAKE_TEXT
}

// ---- Memory -------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return allocate(devPtr, size, true, "cudaMalloc");
}
cudaError_t cudaFree(void* devPtr) { return release(devPtr, true, "cudaFree"); }
cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return allocate(ptr, size, false, "cudaMallocHost");
}
cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int /*flags*/) {
  return allocate(pHost, size, false, "cudaHostAlloc");
}
cudaError_t cudaFreeHost(void* ptr) { return release(ptr, false, "cudaFreeHost"); }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  GYRE_FAKE_ENTRY();
  if (attributes == nullptr) return finish(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(rt().mu);
  const Allocation* a = findAllocation(ptr);
  *attributes = cudaPointerAttributes{};
  void* p = const_cast<void*>(ptr);
  if (a == nullptr) {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;  // cudaInvalidDeviceId
  } else if (a->device) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = 0;
    attributes->devicePointer = p;
  } else {
    attributes->type = cudaMemoryTypeHost;
    attributes->device = 0;
    attributes->devicePointer = p;  // mapped, as with unified addressing
    attributes->hostPointer = p;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, nullptr, true, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy(dst, src, count, kind, stream, false, "cudaMemcpyAsync");
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  // Asynchronous to the host for device memory, as CUDA's; synchronous for pinned memory.
  const cudaError_t err = fill(devPtr, value, count, nullptr, "cudaMemset");
  if (err != cudaSuccess || count == 0) return err;
  std::unique_lock<std::mutex> lock(rt().mu);
  const Allocation* a = findAllocation(devPtr);
  if (a != nullptr && !a->device) waitStream(lock, rt().legacy, rt().legacy->enqueued, "cudaMemset");
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return fill(devPtr, value, count, stream, "cudaMemsetAsync");
}

// ---- Streams ------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  GYRE_FAKE_ENTRY();
  if (pStream == nullptr || (flags & ~unsigned{cudaStreamNonBlocking}) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  std::lock_guard<std::mutex> lock(rt().mu);
  StreamPtr s = newStream(false, (flags & cudaStreamNonBlocking) == 0);
  *pStream = s.get();
  rt().streams.emplace(s.get(), std::move(s));
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  GYRE_FAKE_ENTRY();
  StreamPtr s;
  {
    std::unique_lock<std::mutex> lock(rt().mu);
    const auto it = rt().streams.find(stream);
    if (it == rt().streams.end()) {
      return complain(cudaErrorInvalidResourceHandle, "cudaStreamDestroy", "unknown stream");
    }
    s = it->second;
    rt().streams.erase(it);
    // CUDA returns at once and finishes the work later; waiting for it here keeps the
    // thread's lifetime simple and changes no order.
    waitStream(lock, s, s->enqueued, "cudaStreamDestroy");
    s->stopping = true;
    s->work.notify_one();
  }
  s->thread.join();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  GYRE_FAKE_ENTRY();
  std::unique_lock<std::mutex> lock(rt().mu);
  const StreamPtr s = resolve(stream);
  if (!s) return complain(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize", "unknown stream");
  waitStream(lock, s, s->enqueued, "cudaStreamSynchronize");
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  GYRE_FAKE_ENTRY();
  std::lock_guard<std::mutex> lock(rt().mu);
  const StreamPtr s = resolve(stream);
  if (!s) return complain(cudaErrorInvalidResourceHandle, "cudaStreamQuery", "unknown stream");
  return finish(s->completed >= s->enqueued ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  GYRE_FAKE_ENTRY();
  std::lock_guard<std::mutex> lock(rt().mu);
  const StreamPtr s = resolve(stream);
  CUevent_st* e = findEvent(event);
  if (!s || e == nullptr || flags != 0) {
    return complain(!s || e == nullptr ? cudaErrorInvalidResourceHandle : cudaErrorInvalidValue,
                    "cudaStreamWaitEvent", "unknown stream or event, or flags");
  }
  if (e->ipc != nullptr) {
    FakeIpcEventState* state = e->ipc;
    const uint32_t target = state->recorded.load();  // the last record before this call
    if (!reached(state->completed.load(), target)) {
      enqueue(s, [state, target] {
        sharedWait(&state->completed, [&](uint32_t seen) { return reached(seen, target); },
                   [&] { return format("an interprocess event, record %u (cudaStreamWaitEvent)",
                                       target); });
      });
    }
    return cudaSuccess;
  }
  if (e->stream) enqueue(s, waitForStream(e->stream, e->target, "an event (cudaStreamWaitEvent)"));
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  GYRE_FAKE_ENTRY();
  if (fn == nullptr) return finish(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(rt().mu);
  const StreamPtr s = resolve(stream);
  if (!s) return complain(cudaErrorInvalidResourceHandle, "cudaLaunchHostFunc", "unknown stream");
  enqueue(s, [fn, userData] { fn(userData); });
  return cudaSuccess;
}

// ---- Events -------------------------------------------------------------------------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  GYRE_FAKE_ENTRY();
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~known) != 0) return finish(cudaErrorInvalidValue);
  auto e = std::make_unique<CUevent_st>();
  if ((flags & cudaEventInterprocess) != 0) {
    if ((flags & cudaEventDisableTiming) == 0) {
      return complain(cudaErrorInvalidValue, "cudaEventCreateWithFlags",
                      "cudaEventInterprocess needs cudaEventDisableTiming");
    }
    {
      std::lock_guard<std::mutex> lock(rt().mu);
      e->serial = ++rt().serial;
    }
    void* mem = sharedMapping(memfdName("event", ::getpid(), e->serial), pageRound(1), &e->fd);
    if (mem == nullptr) return finish(cudaErrorMemoryAllocation);
    e->ipc = new (mem) FakeIpcEventState{{'g', 'y', 'r', 'e', 'e', 'v', 't', 0}, {0}, {0}};
  }
  std::lock_guard<std::mutex> lock(rt().mu);
  *event = e.get();
  rt().events.emplace(e.get(), std::move(e));
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  GYRE_FAKE_ENTRY();
  std::lock_guard<std::mutex> lock(rt().mu);
  CUevent_st* e = findEvent(event);
  const StreamPtr s = resolve(stream);
  if (e == nullptr || !s) {
    return complain(cudaErrorInvalidResourceHandle, "cudaEventRecord", "unknown event or stream");
  }
  if (e->ipc != nullptr) {
    // Counted at the call, in the shared state: a wait in any process from now on waits
    // for this record.
    FakeIpcEventState* state = e->ipc;
    const uint32_t mine = state->recorded.fetch_add(1) + 1;
    enqueue(s, [state, mine] {
      uint32_t seen = state->completed.load();
      while (!reached(seen, mine) && !state->completed.compare_exchange_weak(seen, mine)) {
      }
      wakeWord(&state->completed);
    });
    return cudaSuccess;
  }
  enqueue(s, [] {});  // the event's place in the stream: after the legacy sync as well
  e->stream = s;
  e->target = s->enqueued;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  GYRE_FAKE_ENTRY();
  std::lock_guard<std::mutex> lock(rt().mu);
  CUevent_st* e = findEvent(event);
  if (e == nullptr) return complain(cudaErrorInvalidResourceHandle, "cudaEventQuery", "unknown event");
  if (e->ipc != nullptr) {
    return finish(reached(e->ipc->completed.load(), e->ipc->recorded.load()) ? cudaSuccess
                                                                           : cudaErrorNotReady);
  }
  return finish(!e->stream || e->stream->completed >= e->target ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  GYRE_FAKE_ENTRY();
  std::unique_lock<std::mutex> lock(rt().mu);
  CUevent_st* e = findEvent(event);
  if (e == nullptr) {
    return complain(cudaErrorInvalidResourceHandle, "cudaEventSynchronize", "unknown event");
  }
  if (e->ipc != nullptr) {
    FakeIpcEventState* state = e->ipc;
    const uint32_t target = state->recorded.load();
    lock.unlock();
    sharedWait(&state->completed, [&](uint32_t seen) { return reached(seen, target); },
               [&] { return format("cudaEventSynchronize (interprocess event, record %u)", target); });
    return cudaSuccess;
  }
  if (e->stream) waitStream(lock, e->stream, e->target, "cudaEventSynchronize");
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  GYRE_FAKE_ENTRY();
  std::unique_ptr<CUevent_st> e;
  {
    std::lock_guard<std::mutex> lock(rt().mu);
    const auto it = rt().events.find(event);
    if (it == rt().events.end()) {
      return complain(cudaErrorInvalidResourceHandle, "cudaEventDestroy", "unknown event");
    }
    e = std::move(it->second);
    rt().events.erase(it);
  }
  // A queued record or wait holds the state's address: CUDA also lets the work finish.
  if (e->ipc != nullptr) {
    std::unique_lock<std::mutex> lock(rt().mu);
    synchronizeAll(lock, "cudaEventDestroy (interprocess event)");
    lock.unlock();
    ::munmap(e->ipc, pageRound(1));
    if (e->fd >= 0) ::close(e->fd);
  }
  return cudaSuccess;
}

// ---- The driver's entry points ------------------------------------------------------------

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int /*cudaVersion*/,
                                             unsigned long long /*flags*/,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  GYRE_FAKE_ENTRY();
  if (symbol == nullptr || funcPtr == nullptr) return finish(cudaErrorInvalidValue);
  const std::string name = symbol;
  void* fn = nullptr;
  if (name == "cuStreamWaitValue32") fn = reinterpret_cast<void*>(&fakeStreamWaitValue32);
  if (name == "cuStreamWriteValue32") fn = reinterpret_cast<void*>(&fakeStreamWriteValue32);
  *funcPtr = fn;
  if (driverStatus != nullptr) {
    *driverStatus = fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  }
  return cudaSuccess;
}

// ---- IPC ----------------------------------------------------------------------------------
// A handle's 64 bytes: what the importing process needs to map the exporter's memfd.

}  // extern "C"

namespace {

struct FakeIpcHandle {
  char magic[8];  // "gyremem" or "gyreevt"
  int32_t pid;
  int32_t fd;
  uint64_t serial;
  uint64_t size;
};
static_assert(sizeof(FakeIpcHandle) <= CUDA_IPC_HANDLE_SIZE);

constexpr char kMemMagic[8] = {'g', 'y', 'r', 'e', 'm', 'e', 'm', 0};
constexpr char kEventMagic[8] = {'g', 'y', 'r', 'e', 'e', 'v', 't', 0};

template <typename Handle>
void writeHandle(Handle* out, const char* magic, int fd, uint64_t serial, uint64_t size) {
  FakeIpcHandle h{};
  std::memcpy(h.magic, magic, sizeof h.magic);
  h.pid = static_cast<int32_t>(::getpid());
  h.fd = fd;
  h.serial = serial;
  h.size = size;
  std::memset(out->reserved, 0, sizeof out->reserved);
  std::memcpy(out->reserved, &h, sizeof h);
}

// Opens the exporter's memfd (cudaErrorMapBufferObjectFailed when the process or the
// allocation is gone: its fd no longer names the memfd of that serial).
cudaError_t openExported(const FakeIpcHandle& h, const char* kind, const char* call, int* fd) {
  const std::string path = format("/proc/%d/fd/%d", h.pid, h.fd);
  const std::string want = "/memfd:" + memfdName(kind, h.pid, h.serial);
  char target[256] = {};
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n <= 0 || std::string(target, static_cast<size_t>(n)).rfind(want + " ", 0) != 0) {
    return complain(cudaErrorMapBufferObjectFailed, call,
                    format("the exporting process %d or its %s #%llu is gone", h.pid,
                           kind, static_cast<unsigned long long>(h.serial)));
  }
  *fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (*fd < 0) {
    return complain(cudaErrorMapBufferObjectFailed, call,
                    format("opening %s: %s", path.c_str(), std::strerror(errno)));
  }
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  GYRE_FAKE_ENTRY();
  if (handle == nullptr) return complain(cudaErrorInvalidValue, "cudaIpcGetMemHandle", "null handle");
  std::lock_guard<std::mutex> lock(rt().mu);
  uintptr_t base = 0;
  const Allocation* a = findAllocation(devPtr, &base);
  if (a == nullptr || !a->device || a->fd < 0) {
    return complain(cudaErrorInvalidValue, "cudaIpcGetMemHandle",
                    format("%p is not memory of a cudaMalloc of this process", devPtr));
  }
  // The handle names the whole allocation: the importer maps it from its base.
  writeHandle(handle, kMemMagic, a->fd, a->serial, a->size);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
  GYRE_FAKE_ENTRY();
  const char* call = "cudaIpcOpenMemHandle";
  FakeIpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (devPtr == nullptr || flags != cudaIpcMemLazyEnablePeerAccess) {
    return complain(cudaErrorInvalidValue, call, "null devPtr, or flags other than "
                    "cudaIpcMemLazyEnablePeerAccess");
  }
  if (std::memcmp(h.magic, kMemMagic, sizeof h.magic) != 0 || h.pid <= 0 || h.fd < 0 ||
      h.size == 0) {
    return complain(cudaErrorInvalidValue, call, "not a memory handle of cudaIpcGetMemHandle");
  }
  if (h.pid == ::getpid()) {
    return complain(cudaErrorDeviceUninitialized, call,
                    "the handle is this process's own (CUDA cannot open it here)");
  }
  if (const char* fails = std::getenv("GYRE_FAKE_CUDA_IPC_OPEN_FAILS");
      fails != nullptr && std::string(fails) == "1") {
    return complain(cudaErrorMapBufferObjectFailed, call, "GYRE_FAKE_CUDA_IPC_OPEN_FAILS=1");
  }
  {
    // Opened before in this process: the same pointer, counted.
    std::lock_guard<std::mutex> lock(rt().mu);
    for (auto& [base, a] : rt().allocations) {
      if (a.opens > 0 && a.owner == h.pid && a.serial == h.serial) {
        ++a.opens;
        *devPtr = reinterpret_cast<void*>(base);
        return cudaSuccess;
      }
    }
  }
  int fd = -1;
  if (const cudaError_t err = openExported(h, "mem", call, &fd); err != cudaSuccess) return err;
  struct stat st{};
  const size_t mapped = pageRound(h.size);
  void* mem = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= mapped) {
    mem = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  ::close(fd);  // the mapping keeps the memory
  if (mem == MAP_FAILED) {
    return complain(cudaErrorMapBufferObjectFailed, call, "mapping the exported memory failed");
  }
  Allocation a{h.size, true};
  a.serial = h.serial;
  a.mapped = mapped;
  a.owner = h.pid;
  a.opens = 1;
  std::lock_guard<std::mutex> lock(rt().mu);
  rt().allocations[reinterpret_cast<uintptr_t>(mem)] = a;
  *devPtr = mem;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  GYRE_FAKE_ENTRY();
  size_t mapped = 0;
  {
    std::unique_lock<std::mutex> lock(rt().mu);
    const auto it = rt().allocations.find(reinterpret_cast<uintptr_t>(devPtr));
    if (it == rt().allocations.end() || it->second.opens == 0) {
      return complain(cudaErrorInvalidValue, "cudaIpcCloseMemHandle",
                      format("%p is not a pointer of cudaIpcOpenMemHandle", devPtr));
    }
    if (--it->second.opens > 0) return cudaSuccess;
    synchronizeAll(lock, "cudaIpcCloseMemHandle");  // work before it may still use the memory
    mapped = it->second.mapped;
    rt().allocations.erase(it);
  }
  ::munmap(devPtr, mapped);
  return cudaSuccess;
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  GYRE_FAKE_ENTRY();
  if (handle == nullptr) return complain(cudaErrorInvalidValue, "cudaIpcGetEventHandle", "null handle");
  std::lock_guard<std::mutex> lock(rt().mu);
  CUevent_st* e = findEvent(event);
  if (e == nullptr || e->ipc == nullptr || e->fd < 0) {
    return complain(cudaErrorInvalidResourceHandle, "cudaIpcGetEventHandle",
                    "not an event of this process created with cudaEventInterprocess | "
                    "cudaEventDisableTiming");
  }
  writeHandle(handle, kEventMagic, e->fd, e->serial, pageRound(1));
  return cudaSuccess;
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  GYRE_FAKE_ENTRY();
  const char* call = "cudaIpcOpenEventHandle";
  FakeIpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (event == nullptr || std::memcmp(h.magic, kEventMagic, sizeof h.magic) != 0 || h.pid <= 0 ||
      h.fd < 0) {
    return complain(cudaErrorInvalidValue, call, "null event, or not an event handle of "
                    "cudaIpcGetEventHandle");
  }
  if (h.pid == ::getpid()) {
    return complain(cudaErrorDeviceUninitialized, call, "the handle is this process's own");
  }
  int fd = -1;
  if (const cudaError_t err = openExported(h, "event", call, &fd); err != cudaSuccess) return err;
  void* mem = ::mmap(nullptr, pageRound(1), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) return complain(cudaErrorMapBufferObjectFailed, call, "mmap failed");
  auto e = std::make_unique<CUevent_st>();
  e->ipc = static_cast<FakeIpcEventState*>(mem);
  e->serial = h.serial;
  std::lock_guard<std::mutex> lock(rt().mu);
  *event = e.get();
  rt().events.emplace(e.get(), std::move(e));
  return cudaSuccess;
}

}  // extern "C"
