// StagedPath (cuda/staged_path.h): the worker, the pinned slots, and each collective as
// rounds through them.
//
// Every collective runs in stagedRounds, on the worker's copy stream (one stream: the
// copies are never the bottleneck, the host collective is, and one stream orders slot
// reuse for free):
//   wait(ready event) in(0) .. in(S-1) | out(0) in(S) | out(1) in(S+1) | ... | release
// where S = stagingSlots and each "|" is the worker having run the host collective on the
// next round (after waiting for its copies in). Round k uses slot k % S; in(k+S) comes
// after out(k) on the stream, so a slot is refilled only after its result left it.
// All-reduce's rounds are its slices: as large as spreads the message over the slots,
// within [minSliceBytes, sliceBytes].
#include "cuda/staged_path.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "cuda/device_call_checks.h"
#include "cuda/stream_release.h"
#include "ring/communicator.h"

namespace gyre {
namespace {

// Elements of a block of `total` in the round starting at `first`, of at most `per`.
size_t roundPart(size_t total, size_t first, size_t per) {
  return first >= total ? size_t{0} : std::min(per, total - first);
}

}  // namespace

StagedPath::StagedPath(Communicator& host, const CudaOptions& options, int device,
                       StagedFailures& failures)
    : host_(host), options_(options), rank_(host.rank()), size_(static_cast<size_t>(host.size())),
      device_(device), failures_(failures) {
  auto check = [&](cudaError_t err, const char* call) { checkCudaCall(err, call, "setup", rank_); };
  try {
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
  } catch (...) {
    destroyResources();
    throw;
  }
}

StagedPath::~StagedPath() {
  stop();
  destroyResources();
}

void StagedPath::start() {
  worker_ = std::thread([this] { workerMain(); });
}

void StagedPath::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  workCv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

// Errors are ignored here: nothing can be done about them while tearing down.
void StagedPath::destroyResources() noexcept {
  // A stream may still be about to evaluate its wait on the release flag: let the device
  // drain before the flag goes.
  if (copyStream_ != nullptr) cudaStreamSynchronize(copyStream_);
  cudaDeviceSynchronize();
  release_.reset();
  for (Slot& slot : slots_) {
    if (slot.host != nullptr) cudaFreeHost(slot.host);
    if (slot.landed != nullptr) cudaEventDestroy(slot.landed);
  }
  slots_.clear();
  for (cudaEvent_t e : ready_) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  ready_.clear();
  if (copyStream_ != nullptr) cudaStreamDestroy(copyStream_);
  copyStream_ = nullptr;
  cudaGetLastError();
}

// ---- The collectives: each a loop of rounds ----------------------------------------------

void StagedPath::allReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                           ReduceOp op, uint32_t seq, const std::string& what,
                           cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype), nslots = slots_.size();
  size_t slice = std::max(options_.minSliceBytes, (count * esize + nslots - 1) / nslots);
  slice = std::max<size_t>(1, std::min(slice, options_.sliceBytes) / esize);  // elements
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  enqueue(seq, what, stream, [=, this] {
    stagedRounds(count, slice, "cudaEventSynchronize (slice landed)", what,
        [&](size_t first, size_t m, char* buf) {
          copy(buf, send + first * esize, m * esize, cudaMemcpyDeviceToHost,
               "cudaMemcpyAsync (device to host)", what);
        },
        [&](size_t, size_t m, char* buf) { host_.allReduce(buf, buf, m, dtype, op); },
        [&](size_t first, size_t m, char* buf) {
          copy(recv + first * esize, buf, m * esize, cudaMemcpyHostToDevice,
               "cudaMemcpyAsync (host to device)", what);
        });
  });
}

// Each round: a chunk of every block, all in one pinned slot.
void StagedPath::allGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                           uint32_t seq, const std::string& what, cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype), n = size_, me = static_cast<size_t>(rank_);
  const size_t c = perRound(what, n * esize);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  enqueue(seq, what, stream, [=, this] {
    stagedRounds(count, c, "cudaEventSynchronize (round landed)", what,
        [&](size_t first, size_t m, char* buf) {
          d2h(buf + me * m * esize, send + first * esize, m * esize, what);
        },
        [&](size_t, size_t m, char* buf) { host_.allGather(buf + me * m * esize, buf, m, dtype); },
        [&](size_t first, size_t m, char* buf) {
          h2dBlocks(recv + first * esize, count * esize, buf, m * esize, m * esize, what);
        });
  });
}

// Each round: a chunk of every block in one slot; this rank's chunk comes back.
void StagedPath::reduceScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                               ReduceOp op, uint32_t seq, const std::string& what,
                               cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype), n = size_, me = static_cast<size_t>(rank_);
  const size_t c = perRound(what, n * esize);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  enqueue(seq, what, stream, [=, this] {
    stagedRounds(count, c, "cudaEventSynchronize (round landed)", what,
        [&](size_t first, size_t m, char* buf) {
          d2hBlocks(buf, m * esize, send + first * esize, count * esize, m * esize, what);
        },
        [&](size_t, size_t m, char* buf) {
          host_.reduceScatter(buf, buf + me * m * esize, m, dtype, op);
        },
        [&](size_t first, size_t m, char* buf) {
          h2d(recv + first * esize, buf + me * m * esize, m * esize, what);
        });
  });
}

void StagedPath::broadcast(void* buffer, size_t count, DataType dtype, int root, uint32_t seq,
                           const std::string& what, cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype);
  const size_t c = perRound(what, esize);
  auto* data = static_cast<char*>(buffer);
  enqueue(seq, what, stream, [=, this] {
    stagedRounds(count, c, "cudaEventSynchronize (round landed)", what,
        [&](size_t first, size_t m, char* buf) {
          if (rank_ == root) d2h(buf, data + first * esize, m * esize, what);
        },
        [&](size_t, size_t m, char* buf) { host_.broadcast(buf, m, dtype, root); },
        [&](size_t first, size_t m, char* buf) {
          if (rank_ != root) h2d(data + first * esize, buf, m * esize, what);
        });
  });
}

// Each round: a chunk of every block out, the same of every block in, in one slot.
void StagedPath::allToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                          uint32_t seq, const std::string& what, cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype), n = size_;
  const size_t c = perRound(what, 2 * n * esize);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  enqueue(seq, what, stream, [=, this] {
    stagedRounds(count, c, "cudaEventSynchronize (round landed)", what,
        [&](size_t first, size_t m, char* buf) {
          d2hBlocks(buf, m * esize, send + first * esize, count * esize, m * esize, what);
        },
        [&](size_t, size_t m, char* buf) { host_.allToAll(buf, buf + n * m * esize, m, dtype); },
        [&](size_t first, size_t m, char* buf) {
          h2dBlocks(recv + first * esize, count * esize, buf + n * m * esize, m * esize,
                    m * esize, what);
        });
  });
}

// Each pair moves up to c elements a round, through one slot (out, then in); the rounds
// are as many as the largest block of any rank needs.
void StagedPath::allToAllv(const void* sendbuf, std::vector<size_t> sc, std::vector<size_t> sd,
                           void* recvbuf, std::vector<size_t> rc, std::vector<size_t> rd,
                           size_t local, DataType dtype, uint32_t seq, const std::string& what,
                           cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype), n = size_;
  const size_t c = perRound(what, 2 * n * esize);
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  enqueue(seq, what, stream, [=, this] {
    uint64_t largest = local;
    host_.allReduce(&largest, &largest, 1, DataType::kUint64, ReduceOp::kMax);
    std::vector<size_t> sk(n), rk(n), sdk(n), rdk(n);
    for (size_t p = 0; p < n; ++p) sdk[p] = p * c, rdk[p] = p * c;
    stagedRounds(largest, c, "cudaEventSynchronize (round landed)", what,
        [&](size_t first, size_t, char* buf) {
          for (size_t b = 0; b < n; ++b) {
            d2h(buf + b * c * esize, send + (sd[b] + first) * esize,
                roundPart(sc[b], first, c) * esize, what);
          }
        },
        [&](size_t first, size_t, char* buf) {
          for (size_t p = 0; p < n; ++p) sk[p] = roundPart(sc[p], first, c), rk[p] = roundPart(rc[p], first, c);
          host_.allToAllv(buf, sk.data(), sdk.data(), buf + n * c * esize, rk.data(), rdk.data(), dtype);
        },
        [&](size_t first, size_t, char* buf) {
          for (size_t r = 0; r < n; ++r) {
            h2d(recv + (rd[r] + first) * esize, buf + (n + r) * c * esize,
                roundPart(rc[r], first, c) * esize, what);
          }
        });
  });
}

// Half a slot out, half in, a round: Communicator's sendRecv, or its send or recv where
// one direction has nothing left (or none at all), so that a send and the peer's sendRecv
// cut the message alike.
void StagedPath::sendRecv(const void* sendbuf, size_t sendCount, int sendPeer, void* recvbuf,
                          size_t recvCount, int recvPeer, DataType dtype, uint32_t seq,
                          const std::string& what, cudaStream_t stream) {
  const size_t esize = dtypeSize(dtype);
  const size_t c = perRound(what, 2 * esize);
  if (sendPeer < 0) sendCount = 0;
  if (recvPeer < 0) recvCount = 0;
  const auto* send = static_cast<const char*>(sendbuf);
  auto* recv = static_cast<char*>(recvbuf);
  enqueue(seq, what, stream, [=, this] {
    stagedRounds(std::max(sendCount, recvCount), c, "cudaEventSynchronize (round landed)", what,
        [&](size_t first, size_t, char* buf) {
          if (first < sendCount) d2h(buf, send + first * esize, roundPart(sendCount, first, c) * esize, what);
        },
        [&](size_t first, size_t, char* buf) {
          // A half with nothing left this round stays out of it: the peer's rounds may
          // have ended (its count needs fewer).
          const size_t out = roundPart(sendCount, first, c), in = roundPart(recvCount, first, c);
          if (out > 0 && in > 0) {
            host_.sendRecv(buf, out, sendPeer, buf + c * esize, in, recvPeer, dtype);
          } else if (out > 0) {
            host_.send(buf, out, dtype, sendPeer);
          } else {
            host_.recv(buf + c * esize, in, dtype, recvPeer);
          }
        },
        [&](size_t first, size_t, char* buf) {
          if (first < recvCount) h2d(recv + first * esize, buf + c * esize, roundPart(recvCount, first, c) * esize, what);
        });
  });
}

void StagedPath::barrier(uint32_t seq, const std::string& what, cudaStream_t stream) {
  enqueue(seq, what, stream, [this] { host_.barrier(); });
}

void StagedPath::synchronize(uint32_t seq) {
  release_->waitReleased(seq);
  checkCudaCall(cudaStreamSynchronize(copyStream_), "cudaStreamSynchronize", "setup", rank_);
}

// ---- The rounds ---------------------------------------------------------------------------

// Elements per round when each element takes `unit` bytes of a slot (all blocks' chunks,
// in and out); a slot too small for one element of each is the caller's error.
size_t StagedPath::perRound(const std::string& what, size_t unit) const {
  const size_t c = options_.sliceBytes / unit;
  if (c == 0) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: CudaOptions::sliceBytes ({}) is below the "
         "{} bytes one staged round of it needs with {} ranks", rank_, what,
         options_.sliceBytes, unit, size_);
  }
  return c;
}

// `total` elements in rounds of at most `per`, pipelined through the pinned slots:
// in(first, m, slot) enqueues a round's device-to-host copies on the copy stream,
// host(...) runs the host collective once they have landed, out(...) enqueues the copies
// back; a slot is refilled only after its copies back.
template <typename In, typename Host, typename Out>
void StagedPath::stagedRounds(size_t total, size_t per, const char* landed,
                              const std::string& what, In in, Host host, Out out) {
  const size_t rounds = (total + per - 1) / per;
  const size_t nslots = slots_.size();
  auto range = [&](size_t k) { return std::pair<size_t, size_t>(k * per, std::min(per, total - k * per)); };
  auto copyIn = [&](size_t k) {
    const auto [first, m] = range(k);
    Slot& slot = slots_[k % nslots];
    in(first, m, static_cast<char*>(slot.host));
    checkCudaCall(cudaEventRecord(slot.landed, copyStream_), "cudaEventRecord", what, rank_);
  };
  for (size_t k = 0; k < std::min(rounds, nslots); ++k) copyIn(k);
  for (size_t k = 0; k < rounds; ++k) {
    const auto [first, m] = range(k);
    Slot& slot = slots_[k % nslots];
    cudaError_t err = cudaEventQuery(slot.landed);
    if (err == cudaErrorNotReady) err = cudaEventSynchronize(slot.landed);
    checkCudaCall(err, landed, what, rank_);
    host(first, m, static_cast<char*>(slot.host));
    out(first, m, static_cast<char*>(slot.host));
    if (k + nslots < rounds) copyIn(k + nslots);
  }
}

void StagedPath::copy(void* dst, const void* src, size_t bytes, int kind, const char* call,
                      const std::string& what) {
  if (bytes == 0) return;
  checkCudaCall(cudaMemcpyAsync(dst, src, bytes, static_cast<cudaMemcpyKind>(kind), copyStream_),
                call, what, rank_);
}
void StagedPath::d2h(void* dst, const void* src, size_t bytes, const std::string& what) {
  copy(dst, src, bytes, cudaMemcpyDefault, "cudaMemcpyAsync (device to host)", what);
}
void StagedPath::h2d(void* dst, const void* src, size_t bytes, const std::string& what) {
  copy(dst, src, bytes, cudaMemcpyDefault, "cudaMemcpyAsync (host to device)", what);
}

// One chunk of `bytes` from each of the ranks' blocks (`srcStride` apart on the device)
// into consecutive places `slotStride` apart in the slot; h2dBlocks the other way.
void StagedPath::d2hBlocks(char* slot, size_t slotStride, const char* src, size_t srcStride,
                           size_t bytes, const std::string& what) {
  for (size_t b = 0; b < size_; ++b) d2h(slot + b * slotStride, src + b * srcStride, bytes, what);
}
void StagedPath::h2dBlocks(char* dst, size_t dstStride, const char* slot, size_t slotStride,
                           size_t bytes, const std::string& what) {
  for (size_t b = 0; b < size_; ++b) h2d(dst + b * dstStride, slot + b * slotStride, bytes, what);
}

// ---- The worker ---------------------------------------------------------------------------

// Hands one call to the worker: `stream` waits for its release; the worker starts once
// `stream` reached the call (the ready event).
void StagedPath::enqueue(uint32_t seq, const std::string& what, cudaStream_t stream,
                         std::function<void()> run) {
  size_t index;
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Rare: more than maxPending collectives ahead of the worker.
    spaceCv_.wait(lock, [&] { return tail_ - head_ < ring_.size(); });
    index = tail_ % ring_.size();
  }
  checkCudaCall(cudaEventRecord(ready_[index], stream), "cudaEventRecord", what, rank_);
  const char* failed = "";
  if (const int err = release_->holdUntil(stream, seq, &failed); err != 0) {
    fail(ErrorCode::kSystemError, "rank {}: {}: {} failed with error {}", rank_, what, failed, err);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ring_[index] = Call{seq, index, what, std::move(run)};
    ++tail_;
  }
  workCv_.notify_one();
}

void StagedPath::workerMain() {
  const cudaError_t err = cudaSetDevice(device_);
  for (;;) {
    Call work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      workCv_.wait(lock, [&] { return head_ != tail_ || stop_; });
      if (head_ == tail_) return;  // stopped, and nothing left
      work = std::move(ring_[head_ % ring_.size()]);
    }
    bool freed = false;
    try {
      checkCudaCall(err, "cudaSetDevice", "the worker thread", rank_);
      if (failures_.failed()) {
        const std::string first = failures_.firstError();
        fail(ErrorCode::kAborted, "the communicator was aborted{}",
             first.empty() ? "" : " after: " + first);
      }
      checkCudaCall(cudaStreamWaitEvent(copyStream_, ready_[work.ring], 0), "cudaStreamWaitEvent",
                    work.what, rank_);
      freeRingEntry();  // the event is captured: its entry may be recorded again
      freed = true;
      work.run();
    } catch (const std::exception& e) {
      // Name the device collective; the host error below it names the round's host call.
      const auto* error = dynamic_cast<const Error*>(&e);
      std::string inner = e.what();
      const std::string self = fmt::format("rank {}: ", rank_);
      if (inner.rfind(self, 0) == 0) inner.erase(0, self.size());
      failures_.record(error != nullptr ? error->code() : ErrorCode::kInternal,
                       fmt::format("rank {}: {} failed: {}", rank_, work.what, inner));
    }
    if (!freed) freeRingEntry();
    release_->release(work.seq);
  }
}

void StagedPath::freeRingEntry() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++head_;
  }
  spaceCv_.notify_one();
}

}  // namespace gyre
