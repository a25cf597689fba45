// CudaCommunicator: the enqueue path (caller's thread) and the staging worker.
//
// Per collective, on the worker's copy stream (one stream: the copies are never the
// bottleneck, the host ring is, and one stream orders slot reuse for free):
//   wait(ready event) D2H(0) .. D2H(S-1) | H2D(0) D2H(S) | H2D(1) D2H(S+1) | ... | write flag
// where S = stagingSlots and each "|" is the worker having reduced the next slice on
// the host (after waiting for its D2H event). Slice k uses slot k % S; D2H(k+S) comes
// after H2D(k) on the stream, so a slot is refilled only after its result left it.
#include "cuda/cuda_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <initializer_list>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/log.h"
#include "cuda_kernels/device_reduce.h"
#include "ring/communicator.h"
#include "cuda/ipc_collectives.h"
#include "cuda/ipc_peers.h"
#include "cuda/stream_release.h"
#include "store/tcp_store.h"

namespace gyre {
namespace {

std::string callText(size_t count, DataType dtype, ReduceOp op, uint32_t seq) {
  return fmt::format("device allreduce #{} ({} {}, count {})", seq, dtypeName(dtype), opName(op),
                     count);
}

struct DeviceCall {
  const char* send = nullptr;
  char* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint32_t seq = 0;
  size_t ring = 0;  // index into the ready events
};

}  // namespace

class CudaCommunicator::Impl {
 public:
  Impl(std::unique_ptr<Communicator> host, const CudaOptions& options)
      : host_(std::move(host)), options_(options), rank_(host_->rank()), size_(host_->size()) {
    if (options_.stagingSlots < 2 || options_.maxPending < 1 || options_.sliceBytes < 16 ||
        options_.minSliceBytes > options_.sliceBytes) {
      fail(ErrorCode::kInvalidArgument,
           "rank {}: CudaOptions: need stagingSlots >= 2, maxPending >= 1, 16 <= minSliceBytes "
           "<= sliceBytes",
           rank_);
    }
    try {
      setUp();
    } catch (...) {
      destroyResources();
      throw;
    }
    worker_ = std::thread([this] { workerMain(); });
    log(LogLevel::kInfo, rank_, "cuda communicator on device {}: {}, {} x {} bytes of host staging, {}",
        device_, ipc_ ? "all-reduce on the device through CUDA IPC" : "all-reduce staged through the host",
        slots_.size(), options_.sliceBytes,
        usesMemOps() ? "stream memory operations" : "host-function release");
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    workCv_.notify_all();
    if (worker_.joinable()) worker_.join();
    ipc_.reset();  // collective: the ranks meet before freeing what the others map
    destroyResources();
  }

  bool usesMemOps() const { return release_->usesMemOps(); }
  bool usesIpc() const { return ipc_ != nullptr; }

  void setUp() {
    device_ = options_.device;
    if (device_ < 0) check(cudaGetDevice(&device_), "cudaGetDevice");
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&copyStream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const unsigned eventFlags = cudaEventDisableTiming | cudaEventBlockingSync;
    slots_.resize(options_.stagingSlots);
    for (Slot& slot : slots_) {
      check(cudaHostAlloc(&slot.host, options_.sliceBytes, cudaHostAllocDefault), "cudaHostAlloc");
      check(cudaEventCreateWithFlags(&slot.landed, eventFlags), "cudaEventCreate");
    }
    ready_.resize(options_.maxPending);
    ring_.resize(options_.maxPending);
    for (cudaEvent_t& e : ready_) check(cudaEventCreateWithFlags(&e, eventFlags), "cudaEventCreate");
    release_ = std::make_unique<StreamRelease>(copyStream_, options_.streamMemOps, rank_);
    if (size_ > 1) setUpIpc();
  }

  // Every rank takes the same decision (IpcPeers::open is collective); one line says which.
  void setUpIpc() {
    std::string notWanted;
    if (!host_->options().cudaIpc) {
      notWanted = "GYRE_CUDA_IPC=0";
    } else if (!options_.ipc) {
      notWanted = "CudaOptions::ipc is false";
    }
    const size_t slot = std::max<size_t>(4096, (options_.ipcSlotBytes + 4095) / 4096 * 4096);
    std::string why;
    ipc_ = IpcPeers::open(*host_, device_, slot,
                          IpcPeers::MemOps{release_->waitValueFn(), release_->writeValueFn()},
                          notWanted,
                          [this](ErrorCode code, const std::string& message) {
                            recordIpcFailure(code, message);
                          },
                          &why);
    if (!ipc_) {
      // A warning unless asked for: the device path was expected on one host.
      const bool optedOut = why.find("GYRE_CUDA_IPC=0") != std::string::npos ||
                            why.find("CudaOptions::ipc is false") != std::string::npos;
      log(rank_ == 0 && !optedOut ? LogLevel::kWarn : LogLevel::kInfo, rank_,
          "device all-reduce through CUDA IPC not used ({}): staged through host memory", why);
    }
  }

  // Errors are ignored here: nothing can be done about them while tearing down.
  void destroyResources() noexcept {
    // A stream may still be about to evaluate its wait on the release flag: let the
    // device drain before the flag goes.
    if (copyStream_ != nullptr) cudaStreamSynchronize(copyStream_);
    cudaDeviceSynchronize();
    release_.reset();
    for (Slot& slot : slots_) {
      if (slot.host != nullptr) cudaFreeHost(slot.host);
      if (slot.landed != nullptr) cudaEventDestroy(slot.landed);
    }
    for (cudaEvent_t e : ready_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (copyStream_ != nullptr) cudaStreamDestroy(copyStream_);
    cudaGetLastError();
  }

  // ---- The caller's side ------------------------------------------------------------------

  void allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                 cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    validate(sendbuf, recvbuf, count, dtype, op, seq);
    throwIfFailed(callText(count, dtype, op, seq));
    if (count == 0) return;
    checkPointer(sendbuf, "sendbuf", callText(count, dtype, op, seq));
    checkPointer(recvbuf, "recvbuf", callText(count, dtype, op, seq));
    if (size_ == 1) {
      // As the host's single-rank path: avg scales by 1/1 (which quiets NaN), else a copy.
      deviceScaleCopy(recvbuf, nullptr, sendbuf, count, dtype, op == ReduceOp::kAvg ? 1 : 0,
                      stream);
      return;
    }
    if (ipc_) {
      const std::string what = callText(count, dtype, op, seq);
      enqueueIpc(what, seq, [&] {
        ipcAllReduce(*ipc_, sendbuf, recvbuf, count, dtype, op, stream, what);
      });
      return;
    }
    size_t index;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Rare: more than maxPending collectives ahead of the worker.
      spaceCv_.wait(lock, [&] { return tail_ - head_ < ring_.size(); });
      index = tail_ % ring_.size();
    }
    const std::string what = callText(count, dtype, op, seq);
    checkCall(cudaEventRecord(ready_[index], stream), "cudaEventRecord", what);
    const char* call = "";
    if (const int err = release_->holdUntil(stream, seq, &call); err != 0) {
      fail(ErrorCode::kSystemError, "rank {}: {}: {} failed with error {}", rank_, what, call,
           err);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ring_[index] = DeviceCall{static_cast<const char*>(sendbuf), static_cast<char*>(recvbuf), count,
                          dtype, op, seq, index};
      ++tail_;
      enqueued_ = seq;
    }
    workCv_.notify_one();
  }

  // ---- The other collectives: the device path through CUDA IPC only ---------------------

  void allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                 cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device allgather #{} ({}, count {})", seq,
                                         dtypeName(dtype), count);
    validateOther(what, dtype, count, size_, {sendbuf, recvbuf});
    if (count == 0) return;
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    const size_t bytes = count * dtypeSize(dtype);
    if (size_ == 1) {
      if (sendbuf != recvbuf) {
        checkCall(cudaMemcpyAsync(recvbuf, sendbuf, bytes, cudaMemcpyDefault, stream),
                  "cudaMemcpyAsync", what);
      }
      return;
    }
    requireIpc(what);
    enqueueIpc(what, seq, [&] { ipcAllGather(*ipc_, sendbuf, recvbuf, count, dtype, stream, what); });
  }

  void reduceScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                     ReduceOp op, cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device reducescatter #{} ({} {}, count {})", seq,
                                         dtypeName(dtype), isValid(op) ? opName(op) : "?", count);
    if (!isValid(op)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: invalid op {}", rank_, what, static_cast<int>(op));
    }
    validateOther(what, dtype, count, size_, {sendbuf, recvbuf});
    if (count == 0) return;
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      deviceScaleCopy(recvbuf, nullptr, sendbuf, count, dtype, op == ReduceOp::kAvg ? 1 : 0, stream);
      return;
    }
    requireIpc(what);
    enqueueIpc(what, seq, [&] {
      ipcReduceScatter(*ipc_, sendbuf, recvbuf, count, dtype, op, stream, what);
    });
  }

  void broadcast(void* buffer, size_t count, DataType dtype, int root, cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device broadcast #{} ({}, count {}, root {})", seq,
                                         dtypeName(dtype), count, root);
    if (root < 0 || root >= size_) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: root {} is not a rank of {}", rank_, what,
           root, size_);
    }
    validateOther(what, dtype, count, 1, {buffer});
    if (count == 0 || size_ == 1) return;
    checkPointer(buffer, "buffer", what);
    requireIpc(what);
    enqueueIpc(what, seq, [&] { ipcBroadcast(*ipc_, buffer, count, dtype, root, stream, what); });
  }

  void synchronize() {
    if (ipc_) {
      const char* call = "";
      const int err = ipc_->synchronize(&call);
      if (err != 0) checkCall(static_cast<cudaError_t>(err), call, "synchronize");
      throwIfFailed("synchronize");
      return;
    }
    release_->waitReleased(enqueued_);
    check(cudaStreamSynchronize(copyStream_), "cudaStreamSynchronize");
    throwIfFailed("synchronize");
  }

  void abort() {
    failed_.store(true);
    if (ipc_) ipc_->abort();
    host_->abort();
  }

  // From IpcPeers' monitor: names the last collective enqueued, which the streams were
  // running or about to run.
  void recordIpcFailure(ErrorCode code, std::string message) {
    const std::string self = fmt::format("rank {}: ", rank_);
    if (message.rfind(self, 0) == 0) message.erase(0, self.size());
    std::string last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = lastIpcCall_;
    }
    recordFailure(code, last.empty() ? self + message
                                     : fmt::format("{}{} failed: {}", self, last, message));
  }

  // Enqueues one device collective through CUDA IPC; a failure half-way fails the
  // communicator (the peers' streams would wait for the rest).
  template <typename Run>
  void enqueueIpc(const std::string& what, uint32_t seq, Run run) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      enqueued_ = seq;  // numbers the calls only: the worker never sees them
      lastIpcCall_ = what;
    }
    try {
      run();
    } catch (const Error& e) {
      recordFailure(e.code(), e.what());
      abort();
      throw;
    }
  }

  // An asynchronous failure (of the worker, or of the IPC path: a peer lost, an abort
  // anywhere): logged, the host communicator aborted, the first one kept for the caller.
  void recordFailure(ErrorCode code, const std::string& message) {
    log(LogLevel::kError, rank_, "{}", message);
    failed_.store(true);
    host_->abort();
    std::lock_guard<std::mutex> lock(mu_);
    if (firstError_.empty()) {
      firstError_ = message;
      firstCode_ = code;
    }
  }

  // ---- The worker -------------------------------------------------------------------------

  void workerMain() {
    const cudaError_t err = cudaSetDevice(device_);
    for (;;) {
      DeviceCall work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        workCv_.wait(lock, [&] { return head_ != tail_ || stop_; });
        if (head_ == tail_) return;  // stopped, and nothing left
        work = ring_[head_ % ring_.size()];
      }
      bool freed = false;
      try {
        if (err != cudaSuccess) checkCall(err, "cudaSetDevice", "the worker thread");
        if (failed_.load()) {
          fail(ErrorCode::kAborted, "the communicator was aborted{}",
               firstErrorText().empty() ? "" : " after: " + firstErrorText());
        }
        checkCall(cudaStreamWaitEvent(copyStream_, ready_[work.ring], 0), "cudaStreamWaitEvent",
                  callText(work.count, work.dtype, work.op, work.seq));
        freeRingEntry();  // the event is captured: its entry may be recorded again
        freed = true;
        runSlices(work);
      } catch (const std::exception& e) {
        recordError(e, work);
      }
      if (!freed) freeRingEntry();
      release_->release(work.seq);
    }
  }

  void runSlices(const DeviceCall& w) {
    const size_t esize = dtypeSize(w.dtype);
    const size_t bytes = w.count * esize;
    size_t slice = std::max(options_.minSliceBytes, (bytes + slots_.size() - 1) / slots_.size());
    slice = std::max<size_t>(1, std::min(slice, options_.sliceBytes) / esize);  // elements
    const size_t nslices = (w.count + slice - 1) / slice;
    const size_t nslots = slots_.size();
    const std::string what = callText(w.count, w.dtype, w.op, w.seq);
    auto range = [&](size_t k) {
      return std::pair<size_t, size_t>(k * slice, std::min(slice, w.count - k * slice));
    };
    auto copyIn = [&](size_t k) {
      const auto [first, n] = range(k);
      Slot& slot = slots_[k % nslots];
      checkCall(cudaMemcpyAsync(slot.host, w.send + first * esize, n * esize,
                                cudaMemcpyDeviceToHost, copyStream_),
                "cudaMemcpyAsync (device to host)", what);
      checkCall(cudaEventRecord(slot.landed, copyStream_), "cudaEventRecord", what);
    };
    for (size_t k = 0; k < std::min(nslices, nslots); ++k) copyIn(k);
    for (size_t k = 0; k < nslices; ++k) {
      const auto [first, n] = range(k);
      Slot& slot = slots_[k % nslots];
      cudaError_t err = cudaEventQuery(slot.landed);
      if (err == cudaErrorNotReady) err = cudaEventSynchronize(slot.landed);
      checkCall(err, "cudaEventSynchronize (slice landed)", what);
      host_->allReduce(slot.host, slot.host, n, w.dtype, w.op);
      checkCall(cudaMemcpyAsync(w.recv + first * esize, slot.host, n * esize,
                                cudaMemcpyHostToDevice, copyStream_),
                "cudaMemcpyAsync (host to device)", what);
      if (k + nslots < nslices) copyIn(k + nslots);
    }
  }

 private:
  struct Slot {
    void* host = nullptr;           // pinned, sliceBytes
    cudaEvent_t landed = nullptr;   // its device-to-host copy is complete
  };
  void validate(const void* sendbuf, const void* recvbuf, size_t count, DataType dtype,
                ReduceOp op, uint32_t seq) const {
    if (!isValid(dtype) || !isValid(op)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: device allreduce #{}: invalid dtype {} or op {}",
           rank_, seq, static_cast<int>(dtype), static_cast<int>(op));
    }
    if (count > 0 && (sendbuf == nullptr || recvbuf == nullptr)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {}", rank_,
           callText(count, dtype, op, seq), sendbuf == nullptr ? "sendbuf" : "recvbuf");
    }
    if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: count is too large", rank_,
           callText(count, dtype, op, seq));
    }
  }

  void validateOther(const std::string& what, DataType dtype, size_t count, int blocks,
                     std::initializer_list<const void*> buffers) {
    if (!isValid(dtype)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: invalid dtype {}", rank_, what,
           static_cast<int>(dtype));
    }
    for (const void* p : buffers) {
      if (count > 0 && p == nullptr) {
        fail(ErrorCode::kInvalidArgument, "rank {}: {}: null buffer", rank_, what);
      }
    }
    if (count > (std::numeric_limits<size_t>::max() / 2) / dtypeSize(dtype) / static_cast<size_t>(blocks)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: count is too large", rank_, what);
    }
    throwIfFailed(what);
  }

  void requireIpc(const std::string& what) const {
    if (ipc_) return;
    fail(ErrorCode::kInvalidArgument,
         "rank {}: {}: on device buffers only the device path through CUDA IPC has this "
         "collective, and this communicator stages through the host (ranks on several hosts, "
         "GYRE_CUDA_IPC=0, or no stream memory operations: its log says which); use "
         "Communicator's on host buffers", rank_, what);
  }

  // A host pointer that CUDA does not know would make the copies fail later, on the
  // worker; say so now, in the caller's thread.
  void checkPointer(const void* p, const char* name, const std::string& what) const {
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, p);
    if (err != cudaSuccess) cudaGetLastError();
    if (err != cudaSuccess || attr.type == cudaMemoryTypeUnregistered) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: {} {} is not memory CUDA knows (a plain host "
           "pointer? use Communicator for host buffers)", rank_, what,
           name, p);
    }
    if (attr.type == cudaMemoryTypeDevice && attr.device != device_) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: {} is on device {}, the communicator's is {}",
           rank_, what, name, attr.device, device_);
    }
  }

  void check(cudaError_t err, const char* call) const { checkCall(err, call, "setup"); }

  void checkCall(cudaError_t err, const char* call, const std::string& what) const {
    if (err == cudaSuccess) return;
    cudaGetLastError();
    fail(ErrorCode::kSystemError, "rank {}: {}: {} failed: {} ({})", rank_, what, call,
         cudaGetErrorString(err), cudaGetErrorName(err));
  }

  void recordError(const std::exception& e, const DeviceCall& w) {
    const auto* error = dynamic_cast<const Error*>(&e);
    // Name the device collective; the host error below it names the slice's ring call.
    std::string inner = e.what();
    const std::string self = fmt::format("rank {}: ", rank_);
    if (inner.rfind(self, 0) == 0) inner.erase(0, self.size());
    recordFailure(error != nullptr ? error->code() : ErrorCode::kInternal,
                  fmt::format("rank {}: {} failed: {}", rank_,
                              callText(w.count, w.dtype, w.op, w.seq), inner));
  }

  std::string firstErrorText() {
    std::lock_guard<std::mutex> lock(mu_);
    return firstError_;
  }

  void throwIfFailed(const std::string& what) {
    if (!failed_.load()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (firstError_.empty()) {
      fail(ErrorCode::kAborted, "rank {}: {}: the communicator was aborted", rank_, what);
    }
    fail(firstCode_, "rank {}: {}: the communicator failed earlier: {}", rank_, what, firstError_);
  }

  void freeRingEntry() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++head_;
    }
    spaceCv_.notify_one();
  }

 public:
  const std::unique_ptr<Communicator> host_;  // the worker's alone after construction
  const CudaOptions options_;
  const int rank_;
  const int size_;
  int device_ = -1;

 private:
  cudaStream_t copyStream_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<cudaEvent_t> ready_;  // per ring entry: the caller's stream reached the call
  std::unique_ptr<StreamRelease> release_;
  std::unique_ptr<IpcPeers> ipc_;  // null: all-reduce staged through the host

  std::mutex mu_;  // guards what follows, and firstError_
  std::condition_variable workCv_, spaceCv_;
  std::vector<DeviceCall> ring_;
  size_t head_ = 0, tail_ = 0;  // ring_[head_..tail_) waits for the worker
  uint32_t enqueued_ = 0;       // caller's thread writes it under mu_
  bool stop_ = false;
  std::atomic<bool> failed_{false};
  std::string firstError_;
  std::string lastIpcCall_;  // what the IPC path enqueued last, for its failures
  ErrorCode firstCode_ = ErrorCode::kInternal;
  std::thread worker_;
};

std::unique_ptr<CudaCommunicator> CudaCommunicator::create(std::unique_ptr<Communicator> host,
                                                           const CudaOptions& cuda) {
  if (!host) fail(ErrorCode::kInvalidArgument, "CudaCommunicator::create: null communicator");
  return std::unique_ptr<CudaCommunicator>(
      new CudaCommunicator(std::make_unique<Impl>(std::move(host), cuda)));
}

std::unique_ptr<CudaCommunicator> CudaCommunicator::create(std::shared_ptr<Store> store, int rank,
                                                           int size, const Options& options,
                                                           const CudaOptions& cuda) {
  return create(Communicator::create(std::move(store), rank, size, options), cuda);
}

std::unique_ptr<CudaCommunicator> CudaCommunicator::createBeside(Communicator& bootstrap,
                                                                 const CudaOptions& cuda) {
  const std::string host = masterAddressFromEnvironment();
  const auto timeout = bootstrap.options().timeout;
  std::shared_ptr<TcpStore> store;
  uint32_t port = 0;
  if (bootstrap.rank() == 0) {
    store = TcpStore::serve(host, 0, timeout, bootstrap.options().token);
    port = store->port();
  }
  bootstrap.allReduce(&port, &port, 1, DataType::kUint32, ReduceOp::kMax);
  if (bootstrap.rank() != 0) store = TcpStore::connect(host, static_cast<uint16_t>(port), timeout,
                                                        bootstrap.options().token, bootstrap.rank());
  return create(store, bootstrap.rank(), bootstrap.size(), bootstrap.options(), cuda);
}

CudaCommunicator::CudaCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCommunicator::~CudaCommunicator() = default;

int CudaCommunicator::rank() const { return impl_->rank_; }
int CudaCommunicator::size() const { return impl_->size_; }
int CudaCommunicator::device() const { return impl_->device_; }
bool CudaCommunicator::usesStreamMemOps() const { return impl_->usesMemOps(); }
bool CudaCommunicator::usesDeviceIpc() const { return impl_->usesIpc(); }

void CudaCommunicator::allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                 ReduceOp op, CUstream_st* stream) {
  impl_->allReduce(sendbuf, recvbuf, count, dtype, op, stream);
}

void CudaCommunicator::allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                 CUstream_st* stream) {
  impl_->allGather(sendbuf, recvbuf, count, dtype, stream);
}

void CudaCommunicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, ReduceOp op, CUstream_st* stream) {
  impl_->reduceScatter(sendbuf, recvbuf, count, dtype, op, stream);
}

void CudaCommunicator::broadcast(void* buffer, size_t count, DataType dtype, int root,
                                 CUstream_st* stream) {
  impl_->broadcast(buffer, count, dtype, root, stream);
}

void CudaCommunicator::synchronize() { impl_->synchronize(); }
void CudaCommunicator::abort() { impl_->abort(); }

}  // namespace gyre
