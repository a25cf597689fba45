// CudaCommunicator: the enqueue path (caller's thread) and the staging worker.
//
// Per all-reduce, on the worker's copy stream (one stream: the copies are never the
// bottleneck, the host ring is, and one stream orders slot reuse for free):
//   wait(ready event) D2H(0) .. D2H(S-1) | H2D(0) D2H(S) | H2D(1) D2H(S+1) | ... | write flag
// where S = stagingSlots and each "|" is the worker having reduced the next slice on
// the host (after waiting for its D2H event). Slice k uses slot k % S; D2H(k+S) comes
// after H2D(k) on the stream, so a slot is refilled only after its result left it.
// The other collectives run in rounds the same way (stagedRounds).
#include "cuda/cuda_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <initializer_list>
#include <cstdlib>
#include <functional>
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
  std::string what;            // names the call in errors
  std::function<void()> run;   // the collectives but all-reduce: what the worker runs
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
        device_, ipc_ ? "collectives on the device through CUDA IPC" : "collectives staged through the host",
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
    enqueueStaged(DeviceCall{static_cast<const char*>(sendbuf), static_cast<char*>(recvbuf), count,
                             dtype, op, seq, 0, callText(count, dtype, op, seq), nullptr},
                  stream);
  }

  // Hands one call to the worker: `stream` waits for its release; the worker starts once
  // `stream` reached the call (the ready event).
  void enqueueStaged(DeviceCall call, cudaStream_t stream) {
    size_t index;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Rare: more than maxPending collectives ahead of the worker.
      spaceCv_.wait(lock, [&] { return tail_ - head_ < ring_.size(); });
      index = tail_ % ring_.size();
    }
    const std::string& what = call.what;
    checkCall(cudaEventRecord(ready_[index], stream), "cudaEventRecord", what);
    const char* failed = "";
    if (const int err = release_->holdUntil(stream, call.seq, &failed); err != 0) {
      fail(ErrorCode::kSystemError, "rank {}: {}: {} failed with error {}", rank_, what, failed,
           err);
    }
    call.ring = index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      enqueued_ = call.seq;
      ring_[index] = std::move(call);
      ++tail_;
    }
    workCv_.notify_one();
  }

  // A staged collective other than all-reduce: `run` executes on the worker.
  void enqueueStagedRun(const std::string& what, uint32_t seq, cudaStream_t stream,
                        std::function<void()> run) {
    DeviceCall call;
    call.seq = seq;
    call.what = what;
    call.run = std::move(run);
    enqueueStaged(std::move(call), stream);
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
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcAllGather(*ipc_, sendbuf, recvbuf, count, dtype, stream, what); });
      return;
    }
    // Each round: a chunk of every block, all in one pinned slot.
    const size_t esize = dtypeSize(dtype), n = static_cast<size_t>(size_);
    const size_t c = stagedPerRound(what, n * esize);
    const auto* send = static_cast<const char*>(sendbuf);
    auto* recv = static_cast<char*>(recvbuf);
    enqueueStagedRun(what, seq, stream, [=, this] {
      stagedRounds(count, c, what,
          [&](size_t first, size_t m, char* buf) {
            d2h(buf + rank_ * m * esize, send + first * esize, m * esize, what);
          },
          [&](size_t, size_t m, char* buf) { host_->allGather(buf + rank_ * m * esize, buf, m, dtype); },
          [&](size_t first, size_t m, char* buf) {
            for (size_t r = 0; r < n; ++r) h2d(recv + (r * count + first) * esize, buf + r * m * esize, m * esize, what);
          });
    });
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
    if (ipc_) {
      enqueueIpc(what, seq, [&] {
        ipcReduceScatter(*ipc_, sendbuf, recvbuf, count, dtype, op, stream, what);
      });
      return;
    }
    const size_t esize = dtypeSize(dtype), n = static_cast<size_t>(size_);
    const size_t c = stagedPerRound(what, n * esize);
    const auto* send = static_cast<const char*>(sendbuf);
    auto* recv = static_cast<char*>(recvbuf);
    enqueueStagedRun(what, seq, stream, [=, this] {
      stagedRounds(count, c, what,
          [&](size_t first, size_t m, char* buf) {
            for (size_t b = 0; b < n; ++b) d2h(buf + b * m * esize, send + (b * count + first) * esize, m * esize, what);
          },
          [&](size_t, size_t m, char* buf) {
            host_->reduceScatter(buf, buf + rank_ * m * esize, m, dtype, op);
          },
          [&](size_t first, size_t m, char* buf) {
            h2d(recv + first * esize, buf + rank_ * m * esize, m * esize, what);
          });
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
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcBroadcast(*ipc_, buffer, count, dtype, root, stream, what); });
      return;
    }
    const size_t esize = dtypeSize(dtype);
    const size_t c = stagedPerRound(what, esize);
    auto* buf0 = static_cast<char*>(buffer);
    enqueueStagedRun(what, seq, stream, [=, this] {
      stagedRounds(count, c, what,
          [&](size_t first, size_t m, char* buf) {
            if (rank_ == root) d2h(buf, buf0 + first * esize, m * esize, what);
          },
          [&](size_t, size_t m, char* buf) { host_->broadcast(buf, m, dtype, root); },
          [&](size_t first, size_t m, char* buf) {
            if (rank_ != root) h2d(buf0 + first * esize, buf, m * esize, what);
          });
    });
  }

  // ---- All-to-all, point to point, barrier ------------------------------------------------

  void allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device alltoall #{} ({}, count {})", seq,
                                         dtypeName(dtype), count);
    validateOther(what, dtype, count, size_, {sendbuf, recvbuf});
    if (count == 0) return;
    const size_t esize = dtypeSize(dtype), n = static_cast<size_t>(size_);
    const size_t bytes = count * esize * n;
    if (overlap(sendbuf, bytes, recvbuf, bytes)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: sendbuf and recvbuf overlap", rank_, what);
    }
    checkPointer(sendbuf, "sendbuf", what);
    checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      checkCall(cudaMemcpyAsync(recvbuf, sendbuf, bytes, cudaMemcpyDefault, stream),
                "cudaMemcpyAsync", what);
      return;
    }
    if (ipc_) {
      enqueueIpc(what, seq, [&] { ipcAllToAll(*ipc_, sendbuf, recvbuf, count, dtype, stream, what); });
      return;
    }
    // Each round: a chunk of every block out, the same of every block in, in one slot.
    const size_t c = stagedPerRound(what, 2 * n * esize);
    const auto* send = static_cast<const char*>(sendbuf);
    auto* recv = static_cast<char*>(recvbuf);
    enqueueStagedRun(what, seq, stream, [=, this] {
      stagedRounds(count, c, what,
          [&](size_t first, size_t m, char* buf) {
            for (size_t b = 0; b < n; ++b) d2h(buf + b * m * esize, send + (b * count + first) * esize, m * esize, what);
          },
          [&](size_t, size_t m, char* buf) { host_->allToAll(buf, buf + n * m * esize, m, dtype); },
          [&](size_t first, size_t m, char* buf) {
            for (size_t r = 0; r < n; ++r) h2d(recv + (r * count + first) * esize, buf + (n + r) * m * esize, m * esize, what);
          });
    });
  }

  void allToAllv(const void* sendbuf, const size_t* sendCounts, const size_t* sendDispls,
                 void* recvbuf, const size_t* recvCounts, const size_t* recvDispls,
                 DataType dtype, cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    const std::string what = fmt::format("device alltoallv #{} ({})", seq,
                                         isValid(dtype) ? dtypeName(dtype) : "?");
    validateOther(what, dtype, 0, 1, {});
    if (sendCounts == nullptr || recvCounts == nullptr) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null {}", rank_, what,
           sendCounts == nullptr ? "sendCounts" : "recvCounts");
    }
    const size_t n = static_cast<size_t>(size_), esize = dtypeSize(dtype);
    std::vector<size_t> sc(sendCounts, sendCounts + n), rc(recvCounts, recvCounts + n);
    auto displs = [&](const size_t* given, const std::vector<size_t>& counts) {
      std::vector<size_t> d(n);
      size_t run = 0;
      for (size_t p = 0; p < n; ++p) {
        d[p] = given != nullptr ? given[p] : run;
        run += counts[p];
      }
      return d;
    };
    const std::vector<size_t> sd = displs(sendDispls, sc), rd = displs(recvDispls, rc);
    const size_t limit = (std::numeric_limits<size_t>::max() / 4) / esize;
    size_t sendLo = SIZE_MAX, sendHi = 0, recvLo = SIZE_MAX, recvHi = 0, local = 0;
    std::vector<std::pair<size_t, size_t>> blocks;
    for (size_t p = 0; p < n; ++p) {
      if (sc[p] > limit || rc[p] > limit || sd[p] > limit || rd[p] > limit) {
        fail(ErrorCode::kInvalidArgument, "rank {}: {}: a count or displacement is too large", rank_, what);
      }
      if (sc[p] > 0) sendLo = std::min(sendLo, sd[p]), sendHi = std::max(sendHi, sd[p] + sc[p]);
      if (rc[p] > 0) {
        recvLo = std::min(recvLo, rd[p]), recvHi = std::max(recvHi, rd[p] + rc[p]);
        blocks.emplace_back(rd[p], rd[p] + rc[p]);
      }
      local = std::max({local, sc[p], rc[p]});
    }
    if (sc[rank_] != rc[rank_]) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: sendCounts[{}] = {} but recvCounts[{}] = {}: "
           "what a rank sends itself it receives", rank_, what, rank_, sc[rank_], rank_, rc[rank_]);
    }
    std::sort(blocks.begin(), blocks.end());
    for (size_t i = 1; i < blocks.size(); ++i) {
      if (blocks[i].first < blocks[i - 1].second) {
        fail(ErrorCode::kInvalidArgument, "rank {}: {}: receive blocks overlap", rank_, what);
      }
    }
    if (sendHi > 0 && recvHi > 0 && sendLo < sendHi && recvLo < recvHi &&
        overlap(static_cast<const char*>(sendbuf) + sendLo * esize, (sendHi - sendLo) * esize,
                static_cast<const char*>(recvbuf) + recvLo * esize, (recvHi - recvLo) * esize)) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: the send blocks overlap the receive blocks",
           rank_, what);
    }
    if (sendHi > 0 && sendbuf == nullptr) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null sendbuf", rank_, what);
    }
    if (recvHi > 0 && recvbuf == nullptr) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: null recvbuf", rank_, what);
    }
    if (sendHi > 0) checkPointer(sendbuf, "sendbuf", what);
    if (recvHi > 0) checkPointer(recvbuf, "recvbuf", what);
    if (size_ == 1) {
      if (sc[0] > 0) {
        checkCall(cudaMemcpyAsync(static_cast<char*>(recvbuf) + rd[0] * esize,
                                  static_cast<const char*>(sendbuf) + sd[0] * esize, sc[0] * esize,
                                  cudaMemcpyDefault, stream),
                  "cudaMemcpyAsync", what);
      }
      return;
    }
    if (ipc_) {
      // Every rank's counts, so that every rank finds the same mismatch and the same
      // number of rounds (the largest block of any rank).
      std::vector<uint64_t> mine(2 * n), all(2 * n * n);
      for (size_t p = 0; p < n; ++p) mine[p] = sc[p], mine[n + p] = rc[p];
      try {
        host_->allGather(mine.data(), all.data(), 2 * n, DataType::kUint64);
      } catch (const Error& e) {
        recordFailure(e.code(), fmt::format("rank {}: {}: sharing the counts failed: {}", rank_, what, e.what()));
        abort();
        throw;
      }
      uint64_t largest = 0;
      for (size_t a = 0; a < n; ++a) {
        for (size_t b = 0; b < n; ++b) {
          const uint64_t sends = all[a * 2 * n + b], expects = all[b * 2 * n + n + a];
          if (sends != expects) {
            fail(ErrorCode::kMismatch, "rank {}: {}: rank {} sends {} elements to rank {}, which "
                 "expects {} (recvCounts[{}])", rank_, what, a, sends, b, expects, a);
          }
          largest = std::max(largest, sends);
        }
      }
      const size_t per = ipcAllToAllvPerRound(*ipc_, dtype);
      const size_t rounds = (largest + per - 1) / per;
      if (rounds == 0) return;
      enqueueIpc(what, seq, [&] {
        ipcAllToAllv(*ipc_, sendbuf, sc.data(), sd.data(), recvbuf, rc.data(), rd.data(), dtype,
                     rounds, stream, what);
      });
      return;
    }
    // Staged: each pair moves up to c elements a round, through one slot (out, then in).
    const size_t c = stagedPerRound(what, 2 * n * esize);
    const auto* send = static_cast<const char*>(sendbuf);
    auto* recv = static_cast<char*>(recvbuf);
    enqueueStagedRun(what, seq, stream, [=, this] {
      uint64_t largest = local;  // every rank's rounds: its largest block, the largest anywhere
      host_->allReduce(&largest, &largest, 1, DataType::kUint64, ReduceOp::kMax);
      auto part = [&](size_t total, size_t first) {
        return first >= total ? size_t{0} : std::min(c, total - first);
      };
      std::vector<size_t> sk(n), rk(n), sdk(n), rdk(n);
      for (size_t p = 0; p < n; ++p) sdk[p] = p * c, rdk[p] = p * c;
      stagedRounds(largest, c, what,
          [&](size_t first, size_t, char* buf) {
            for (size_t b = 0; b < n; ++b) d2h(buf + b * c * esize, send + (sd[b] + first) * esize, part(sc[b], first) * esize, what);
          },
          [&](size_t first, size_t, char* buf) {
            for (size_t p = 0; p < n; ++p) sk[p] = part(sc[p], first), rk[p] = part(rc[p], first);
            host_->allToAllv(buf, sk.data(), sdk.data(), buf + n * c * esize, rk.data(), rdk.data(), dtype);
          },
          [&](size_t first, size_t, char* buf) {
            for (size_t r = 0; r < n; ++r) h2d(recv + (rd[r] + first) * esize, buf + (n + r) * c * esize, part(rc[r], first) * esize, what);
          });
    });
  }

  void send(const void* buf, size_t count, DataType dtype, int peer, cudaStream_t stream) {
    sendRecvCall("send", buf, count, peer, nullptr, 0, -1, dtype, stream);
  }
  void recv(void* buf, size_t count, DataType dtype, int peer, cudaStream_t stream) {
    sendRecvCall("recv", nullptr, 0, -1, buf, count, peer, dtype, stream);
  }
  void sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                size_t recvCount, int recvPeer, DataType dtype, cudaStream_t stream) {
    sendRecvCall("sendrecv", sendbuf, sendCount, sendPeer, recvbuf, recvCount, recvPeer, dtype, stream);
  }

  // send (recvPeer -1), recv (sendPeer -1) and sendRecv.
  void sendRecvCall(const char* name, const void* sendbuf, size_t sendCount, int sendPeer,
                    void* recvbuf, size_t recvCount, int recvPeer, DataType dtype,
                    cudaStream_t stream) {
    const uint32_t seq = enqueued_ + 1;
    std::string what;
    if (recvPeer < 0) {
      what = fmt::format("device send #{} ({}, count {}, to rank {})", seq,
                         isValid(dtype) ? dtypeName(dtype) : "?", sendCount, sendPeer);
    } else if (sendPeer < 0) {
      what = fmt::format("device recv #{} ({}, count {}, from rank {})", seq,
                         isValid(dtype) ? dtypeName(dtype) : "?", recvCount, recvPeer);
    } else {
      what = fmt::format("device sendrecv #{} ({}, send {} to rank {}, receive {} from rank {})",
                         seq, isValid(dtype) ? dtypeName(dtype) : "?", sendCount, sendPeer,
                         recvCount, recvPeer);
    }
    auto checkPeer = [&](int peer) {
      if (peer == rank_ || peer >= size_ || peer < 0) {
        fail(ErrorCode::kInvalidArgument, "rank {}: {}: peer {} is not another rank of {}", rank_,
             what, peer, size_);
      }
    };
    if (std::string(name) != "recv") checkPeer(sendPeer);
    if (std::string(name) != "send") checkPeer(recvPeer);
    validateOther(what, dtype, sendCount, 1, {sendbuf});
    validateOther(what, dtype, recvCount, 1, {recvbuf});
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
    const auto* send = static_cast<const char*>(sendbuf);
    auto* recv = static_cast<char*>(recvbuf);
    if (recvPeer < 0 || sendPeer < 0) {
      // One direction, Communicator's send or recv, in rounds of half a slot as sendRecv's:
      // a send and the peer's sendRecv cut the message alike.
      const bool sending = recvPeer < 0;
      const size_t count = sending ? sendCount : recvCount;
      const int peer = sending ? sendPeer : recvPeer;
      const size_t c = stagedPerRound(what, 2 * esize);
      enqueueStagedRun(what, seq, stream, [=, this] {
        stagedRounds(count, c, what,
            [&](size_t first, size_t m, char* buf) {
              if (sending) d2h(buf, send + first * esize, m * esize, what);
            },
            [&](size_t, size_t m, char* buf) {
              if (sending) {
                host_->send(buf, m, dtype, peer);
              } else {
                host_->recv(buf, m, dtype, peer);
              }
            },
            [&](size_t first, size_t m, char* buf) {
              if (!sending) h2d(recv + first * esize, buf, m * esize, what);
            });
      });
      return;
    }
    // Both: half a slot out, half in, Communicator's sendRecv a round.
    const size_t c = stagedPerRound(what, 2 * esize);
    enqueueStagedRun(what, seq, stream, [=, this] {
      auto part = [&](size_t total, size_t first) {
        return first >= total ? size_t{0} : std::min(c, total - first);
      };
      stagedRounds(std::max(sendCount, recvCount), c, what,
          [&](size_t first, size_t, char* buf) {
            d2h(buf, send + first * esize, part(sendCount, first) * esize, what);
          },
          [&](size_t first, size_t, char* buf) {
            // A half with nothing left this round stays out of it: the peer's rounds
            // may have ended (its count needs fewer).
            const size_t out = part(sendCount, first), in = part(recvCount, first);
            if (out > 0 && in > 0) {
              host_->sendRecv(buf, out, sendPeer, buf + c * esize, in, recvPeer, dtype);
            } else if (out > 0) {
              host_->send(buf, out, dtype, sendPeer);
            } else {
              host_->recv(buf + c * esize, in, dtype, recvPeer);
            }
          },
          [&](size_t first, size_t, char* buf) {
            h2d(recv + first * esize, buf + c * esize, part(recvCount, first) * esize, what);
          });
    });
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
    enqueueStagedRun(what, seq, stream, [this] { host_->barrier(); });
  }

  // ---- The staged collectives' machinery (the worker's thread) -----------------------------

  // Elements per round when each element takes `unit` bytes of a slot (all blocks'
  // chunks, in and out); a slot too small for one element of each is the caller's error.
  size_t stagedPerRound(const std::string& what, size_t unit) const {
    const size_t c = options_.sliceBytes / unit;
    if (c == 0) {
      fail(ErrorCode::kInvalidArgument, "rank {}: {}: CudaOptions::sliceBytes ({}) is below the "
           "{} bytes one staged round of it needs with {} ranks", rank_, what,
           options_.sliceBytes, unit, size_);
    }
    return c;
  }

  // `total` elements in rounds of at most `per`, pipelined through the pinned slots as
  // all-reduce's slices are: in(first, m, slot) enqueues a round's device-to-host copies
  // on the copy stream, host(...) runs the host collective once they have landed,
  // out(...) enqueues the copies back; a slot is refilled only after its copies back.
  template <typename In, typename Host, typename Out>
  void stagedRounds(size_t total, size_t per, const std::string& what, In in, Host host, Out out) {
    const size_t rounds = (total + per - 1) / per;
    const size_t nslots = slots_.size();
    auto range = [&](size_t k) { return std::pair<size_t, size_t>(k * per, std::min(per, total - k * per)); };
    auto copyIn = [&](size_t k) {
      const auto [first, m] = range(k);
      Slot& slot = slots_[k % nslots];
      in(first, m, static_cast<char*>(slot.host));
      checkCall(cudaEventRecord(slot.landed, copyStream_), "cudaEventRecord", what);
    };
    for (size_t k = 0; k < std::min(rounds, nslots); ++k) copyIn(k);
    for (size_t k = 0; k < rounds; ++k) {
      const auto [first, m] = range(k);
      Slot& slot = slots_[k % nslots];
      cudaError_t err = cudaEventQuery(slot.landed);
      if (err == cudaErrorNotReady) err = cudaEventSynchronize(slot.landed);
      checkCall(err, "cudaEventSynchronize (round landed)", what);
      host(first, m, static_cast<char*>(slot.host));
      out(first, m, static_cast<char*>(slot.host));
      if (k + nslots < rounds) copyIn(k + nslots);
    }
  }

  void d2h(void* dst, const void* src, size_t bytes, const std::string& what) {
    if (bytes == 0) return;
    checkCall(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copyStream_),
              "cudaMemcpyAsync (device to host)", what);
  }
  void h2d(void* dst, const void* src, size_t bytes, const std::string& what) {
    if (bytes == 0) return;
    checkCall(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copyStream_),
              "cudaMemcpyAsync (host to device)", what);
  }

  static bool overlap(const void* a, size_t an, const void* b, size_t bn) {
    const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return an > 0 && bn > 0 && x < y + bn && y < x + an;
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
        work = std::move(ring_[head_ % ring_.size()]);
      }
      bool freed = false;
      try {
        if (err != cudaSuccess) checkCall(err, "cudaSetDevice", "the worker thread");
        if (failed_.load()) {
          fail(ErrorCode::kAborted, "the communicator was aborted{}",
               firstErrorText().empty() ? "" : " after: " + firstErrorText());
        }
        checkCall(cudaStreamWaitEvent(copyStream_, ready_[work.ring], 0), "cudaStreamWaitEvent",
                  work.what);
        freeRingEntry();  // the event is captured: its entry may be recorded again
        freed = true;
        if (work.run) {
          work.run();
        } else {
          runSlices(work);
        }
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
                  fmt::format("rank {}: {} failed: {}", rank_, w.what, inner));
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
  impl_->send(buf, count, dtype, peer, stream);
}

void CudaCommunicator::recv(void* buf, size_t count, DataType dtype, int peer, CUstream_st* stream) {
  impl_->recv(buf, count, dtype, peer, stream);
}

void CudaCommunicator::sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                                size_t recvCount, int recvPeer, DataType dtype,
                                CUstream_st* stream) {
  impl_->sendRecv(sendbuf, sendCount, sendPeer, recvbuf, recvCount, recvPeer, dtype, stream);
}

void CudaCommunicator::barrier(CUstream_st* stream) { impl_->barrier(stream); }

void CudaCommunicator::synchronize() { impl_->synchronize(); }
void CudaCommunicator::abort() { impl_->abort(); }

}  // namespace gyre
