// CudaCommunicator (cuda/cuda_communicator.h): creation, the choice of path, the calls'
// argument checks (cuda/device_call_checks.h) and their forwarding to the path, and the
// record of the first asynchronous failure. The staged path is cuda/staged_path.h; the
// device path through CUDA IPC is cuda/ipc_peers.h and cuda/ipc_collectives.h.
#include "cuda/cuda_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/launch_env.h"
#include "base/log.h"
#include "cuda_kernels/device_reduce.h"
#include "cuda/device_call_checks.h"
#include "cuda/ipc_collectives.h"
#include "cuda/ipc_peers.h"
#include "cuda/staged_path.h"
#include "cuda/stream_release.h"
#include "ring/communicator.h"
#include "store/tcp_store.h"

namespace gyre {

class CudaCommunicator::Impl : private StagedFailures {
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
    device_ = options_.device;
    if (device_ < 0) checkCall(cudaGetDevice(&device_), "cudaGetDevice", "setup");
    checkCall(cudaSetDevice(device_), "cudaSetDevice", "setup");
    staged_ = std::make_unique<StagedPath>(*host_, options_, device_,
                                           static_cast<StagedFailures&>(*this));
    if (size_ > 1) setUpIpc();  // on failure, ~StagedPath frees what it made
    staged_->start();
    log(LogLevel::kInfo, rank_, "cuda communicator on device {}: {}, {} x {} bytes of host staging, {}",
        device_, ipc_ ? "collectives on the device through CUDA IPC" : "collectives staged through the host",
        staged_->slotCount(), options_.sliceBytes,
        usesMemOps() ? "stream memory operations" : "host-function release");
  }

  ~Impl() {
    staged_->stop();
    ipc_.reset();  // collective: the ranks meet before freeing what the others map
    staged_.reset();
  }

  bool usesMemOps() const { return staged_->release().usesMemOps(); }
  bool usesIpc() const { return ipc_ != nullptr; }

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
    StreamRelease& release = staged_->release();
    ipc_ = IpcPeers::open(*host_, device_, slot,
                          IpcPeers::MemOps{release.waitValueFn(), release.writeValueFn()},
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

  // ---- The collectives: checks, then one rank's copy, the device path or the staged one ----

  void allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                 cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    checkAllReduceArgs(sendbuf, recvbuf, count, dtype, op, seq, rank_);
    const std::string what = allReduceText(count, dtype, op, seq);
    throwIfFailed(what);
    if (count == 0) return;
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      // As the host's single-rank path: avg scales by 1/1 (which quiets NaN), else a copy.
      deviceScaleCopy(recvbuf, nullptr, sendbuf, count, dtype, op == ReduceOp::kAvg ? 1 : 0,
                      stream);
      return;
    }
    if (ipc_) {
      enqueueIpc(what, seq, [&] {
        ipcAllReduce(*ipc_, sendbuf, recvbuf, count, dtype, op, stream, what);
      });
      return;
    }
    staged_->allReduce(sendbuf, recvbuf, count, dtype, op, seq, what, stream);
    enqueued_ = seq;
  }

  void allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                 cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device allgather #{} ({}, count {})", seq,
                                         dtypeName(dtype), count);
    checkArgs(what, dtype, count, size_, {sendbuf, recvbuf});
    if (count == 0) return;
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      if (sendbuf != recvbuf) copyOnStream(recvbuf, sendbuf, count * dtypeSize(dtype), stream, what);
      return;
    }
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcAllGather(*ipc_, sendbuf, recvbuf, count, dtype, stream, what); });
      return;
    }
    staged_->allGather(sendbuf, recvbuf, count, dtype, seq, what, stream);
    enqueued_ = seq;
  }

  void reduceScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                     ReduceOp op, cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device reducescatter #{} ({} {}, count {})", seq,
                                         dtypeName(dtype), isValid(op) ? opName(op) : "?", count);
    if (!isValid(op)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: invalid op {}", rank_, what, static_cast<int>(op));
    }
    checkArgs(what, dtype, count, size_, {sendbuf, recvbuf});
    if (count == 0) return;
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      deviceScaleCopy(recvbuf, nullptr, sendbuf, count, dtype, op == ReduceOp::kAvg ? 1 : 0, stream);
      return;
    }
    if (ipc_) {
      enqueueIpc(what, seq, [&] {
        ipcReduceScatter(*ipc_, sendbuf, recvbuf, count, dtype, op, stream, what);
      });
      return;
    }
    staged_->reduceScatter(sendbuf, recvbuf, count, dtype, op, seq, what, stream);
    enqueued_ = seq;
  }

  void broadcast(void* buffer, size_t count, DataType dtype, int root, cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device broadcast #{} ({}, count {}, root {})", seq,
                                         dtypeName(dtype), count, root);
    if (root < 0 || root >= size_) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: root {} is not a rank of {}", rank_, what,
           root, size_);
    }
    checkArgs(what, dtype, count, 1, {buffer});
    if (count == 0 || size_ == 1) return;
    checkPointer(buffer, "buffer", what);
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcBroadcast(*ipc_, buffer, count, dtype, root, stream, what); });
      return;
    }
    staged_->broadcast(buffer, count, dtype, root, seq, what, stream);
    enqueued_ = seq;
  }

  void allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device alltoall #{} ({}, count {})", seq,
                                         dtypeName(dtype), count);
    checkArgs(what, dtype, count, size_, {sendbuf, recvbuf});
    if (count == 0) return;
    const size_t bytes = count * dtypeSize(dtype) * static_cast<size_t>(size_);
    if (overlap(sendbuf, bytes, recvbuf, bytes)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: sendbuf and recvbuf overlap", rank_, what);
    }
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      copyOnStream(recvbuf, sendbuf, bytes, stream, what);
      return;
    }
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcAllToAll(*ipc_, sendbuf, recvbuf, count, dtype, stream, what); });
      return;
    }
    staged_->allToAll(sendbuf, recvbuf, count, dtype, seq, what, stream);
    enqueued_ = seq;
  }

  void allToAllv(const void* sendbuf, const size_t* sendCounts, const size_t* sendDispls,
                 void* recvbuf, const size_t* recvCounts, const size_t* recvDispls,
                 DataType dtype, cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device alltoallv #{} ({})", seq,
                                         isValid(dtype) ? dtypeName(dtype) : "?");
    checkArgs(what, dtype, 0, 1, {});
    AllToAllvArgs a = checkAllToAllvArgs(sendbuf, sendCounts, sendDispls, recvbuf, recvCounts,
                                         recvDispls, dtype, what, rank_, size_, device_);
    const size_t esize = dtypeSize(dtype);
    if (size_ == 1) {
      if (a.sendCounts[0] > 0) {
        copyOnStream(static_cast<char*>(recvbuf) + a.recvDispls[0] * esize,
                     static_cast<const char*>(sendbuf) + a.sendDispls[0] * esize,
                     a.sendCounts[0] * esize, stream, what);
      }
      return;
    }
    if (ipc_) {
      const size_t rounds = ipcAllToAllvRounds(a, dtype, what);
      if (rounds == 0) return;
      enqueueIpc(what, seq, [&] {
        ipcAllToAllv(*ipc_, sendbuf, a.sendCounts.data(), a.sendDispls.data(), recvbuf,
                     a.recvCounts.data(), a.recvDispls.data(), dtype, rounds, stream, what);
      });
      return;
    }
    staged_->allToAllv(sendbuf, std::move(a.sendCounts), std::move(a.sendDispls), recvbuf,
                       std::move(a.recvCounts), std::move(a.recvDispls), a.local, dtype, seq,
                       what, stream);
    enqueued_ = seq;
  }

  // Every rank's counts, so that every rank finds the same mismatch and the same number of
  // rounds (the largest block of any rank).
  size_t ipcAllToAllvRounds(const AllToAllvArgs& a, DataType dtype, const std::string& what) {
    const size_t n = static_cast<size_t>(size_);
    std::vector<uint64_t> mine(2 * n), all(2 * n * n);
    for (size_t p = 0; p < n; ++p) mine[p] = a.sendCounts[p], mine[n + p] = a.recvCounts[p];
    try {
      host_->allGather(mine.data(), all.data(), 2 * n, DataType::kUint64);
    } catch (const Error& e) {
      recordFailure(e.code(), fmt::format("rank {}: {}: sharing the counts failed: {}", rank_, what, e.what()));
      abort();
      throw;
    }
    const uint64_t largest = checkSharedCounts(all, n, what, rank_);
    const size_t per = ipcAllToAllvPerRound(*ipc_, dtype);
    return (largest + per - 1) / per;
  }

  // send (recvPeer -1), recv (sendPeer -1) and sendRecv.
  void sendRecv(const char* name, const void* sendbuf, size_t sendCount, int sendPeer,
                void* recvbuf, size_t recvCount, int recvPeer, DataType dtype,
                cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const char* type = isValid(dtype) ? dtypeName(dtype) : "?";
    std::string what;
    if (recvPeer < 0) {
      what = fmt::format("device send #{} ({}, count {}, to rank {})", seq, type, sendCount, sendPeer);
    } else if (sendPeer < 0) {
      what = fmt::format("device recv #{} ({}, count {}, from rank {})", seq, type, recvCount, recvPeer);
    } else {
      what = fmt::format("device sendrecv #{} ({}, send {} to rank {}, receive {} from rank {})",
                         seq, type, sendCount, sendPeer, recvCount, recvPeer);
    }
    if (std::string(name) != "recv") checkPeer(sendPeer, what, rank_, size_);
    if (std::string(name) != "send") checkPeer(recvPeer, what, rank_, size_);
    checkArgs(what, dtype, sendCount, 1, {sendbuf});
    checkArgs(what, dtype, recvCount, 1, {recvbuf});
    const size_t esize = dtypeSize(dtype);
    if (sendCount > 0 && recvCount > 0 && sendbuf != recvbuf &&
        overlap(sendbuf, sendCount * esize, recvbuf, recvCount * esize)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: sendbuf and recvbuf overlap (in place, "
           "sendbuf == recvbuf, is allowed)", rank_, what);
    }
    if (sendCount == 0) sendPeer = -1;
    if (recvCount == 0) recvPeer = -1;
    if (sendPeer < 0 && recvPeer < 0) return;
    if (sendPeer >= 0) checkPointer(sendbuf, "sendbuf", what);
    if (recvPeer >= 0) checkPointer(recvbuf, "recvbuf", what);
    if (ipc_) {
      enqueueIpc(what, seq, [&] {
        ipcSendRecv(*ipc_, sendbuf, sendCount, sendPeer, recvbuf, recvCount, recvPeer, dtype,
                    stream, what);
      });
      return;
    }
    staged_->sendRecv(sendbuf, sendCount, sendPeer, recvbuf, recvCount, recvPeer, dtype, seq, what,
                      stream);
    enqueued_ = seq;
  }

  void barrier(cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device barrier #{}", seq);
    throwIfFailed(what);
    if (size_ == 1) return;
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcBarrier(*ipc_, stream, what); });
      return;
    }
    staged_->barrier(seq, what, stream);
    enqueued_ = seq;
  }

  void synchronize() {
    if (ipc_) {
      const char* call = "";
      const int err = ipc_->synchronize(&call);
      if (err != 0) checkCall(err, call, "synchronize");
      throwIfFailed("synchronize");
      return;
    }
    staged_->synchronize(enqueued_);
    throwIfFailed("synchronize");
  }

  void abort() {
    failed_.store(true);
    if (ipc_) ipc_->abort();
    host_->abort();
  }

 private:
  // Enqueues one device collective through CUDA IPC; a failure half-way fails the
  // communicator (the peers' streams would wait for the rest).
  template <typename Run>
  void enqueueIpc(const std::string& what, uint32_t seq, Run run) {
    enqueued_ = seq;  // numbers the calls only: the worker never sees them
    {
      std::lock_guard<std::mutex> lock(mu_);
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

  // The checks every collective makes, then a failure recorded earlier.
  void checkArgs(const std::string& what, DataType dtype, size_t count, int blocks,
                 std::initializer_list<const void*> buffers) {
    checkBuffers(what, dtype, count, static_cast<size_t>(blocks), buffers, rank_);
    throwIfFailed(what);
  }
  void checkPointer(const void* p, const char* name, const std::string& what) const {
    checkDevicePointer(p, name, what, rank_, device_);
  }
  void checkCall(int err, const char* call, const std::string& what) const {
    checkCudaCall(err, call, what, rank_);
  }
  void copyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream,
                    const std::string& what) {
    checkCall(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync", what);
  }

  // ---- Failures ---------------------------------------------------------------------------

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

  // StagedFailures, for the worker.
  bool failed() const override { return failed_.load(); }
  std::string firstError() override {
    std::lock_guard<std::mutex> lock(mu_);
    return firstError_;
  }
  void record(ErrorCode code, const std::string& message) override { recordFailure(code, message); }

  void throwIfFailed(const std::string& what) {
    if (!failed_.load()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (firstError_.empty()) {
      fail(ErrorCode::kAborted, "rank {}: {}: the communicator was aborted", rank_, what);
    }
    fail(firstCode_, "rank {}: {}: the communicator failed earlier: {}", rank_, what, firstError_);
  }

 public:
  const std::unique_ptr<Communicator> host_;  // the worker's alone after construction
  const CudaOptions options_;
  const int rank_;
  const int size_;
  int device_ = -1;

 private:
  std::unique_ptr<StagedPath> staged_;  // also when ipc_ is set: its release serves both
  std::unique_ptr<IpcPeers> ipc_;       // null: the collectives staged through the host
  uint32_t enqueued_ = 0;               // the last call's number (the caller's thread)
  std::atomic<bool> failed_{false};
  std::mutex mu_;  // guards what follows
  std::string firstError_;
  ErrorCode firstCode_ = ErrorCode::kInternal;
  std::string lastIpcCall_;  // what the IPC path enqueued last, for its failures
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
void CudaCommunicator::allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                                CUstream_st* stream) {
  impl_->allToAll(sendbuf, recvbuf, count, dtype, stream);
}
void CudaCommunicator::allToAllv(const void* sendbuf, const size_t* sendCounts,
                                 const size_t* sendDispls, void* recvbuf, const size_t* recvCounts,
                                 const size_t* recvDispls, DataType dtype, CUstream_st* stream) {
  impl_->allToAllv(sendbuf, sendCounts, sendDispls, recvbuf, recvCounts, recvDispls, dtype, stream);
}
void CudaCommunicator::send(const void* buf, size_t count, DataType dtype, int peer,
                            CUstream_st* stream) {
  impl_->sendRecv("send", buf, count, peer, nullptr, 0, -1, dtype, stream);
}
void CudaCommunicator::recv(void* buf, size_t count, DataType dtype, int peer, CUstream_st* stream) {
  impl_->sendRecv("recv", nullptr, 0, -1, buf, count, peer, dtype, stream);
}
void CudaCommunicator::sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                                size_t recvCount, int recvPeer, DataType dtype,
                                CUstream_st* stream) {
  impl_->sendRecv("sendrecv", sendbuf, sendCount, sendPeer, recvbuf, recvCount, recvPeer, dtype,
                 stream);
}
void CudaCommunicator::barrier(CUstream_st* stream) { impl_->barrier(stream); }
void CudaCommunicator::synchronize() { impl_->synchronize(); }
void CudaCommunicator::abort() { impl_->abort(); }

}  // namespace gyre
