#include "cuda/stream_release.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "base/error.h"
#include "base/log.h"

namespace gyre {
namespace {

// The driver's signature; CUresult is an int-sized enum, CUdeviceptr 64 bits.
using DriverMemOpFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

void* driverEntryPoint(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  // 12000: the _v2 entry points (cuStreamWaitValue32_v2), there since CUDA 11.7.
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return fn;
}

}  // namespace

StreamRelease::StreamRelease(CUstream_st* copyStream, bool preferMemOps, int rank)
    : copyStream_(copyStream), rank_(rank) {
  cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&flag_), sizeof(uint32_t));
  if (err == cudaSuccess) err = cudaMemsetAsync(flag_, 0, sizeof(uint32_t), copyStream_);
  if (err == cudaSuccess) {
    err = cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming | cudaEventBlockingSync);
  }
  if (err == cudaSuccess) {
    if (preferMemOps) findMemOps();
    err = cudaStreamSynchronize(copyStream_);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (copied_ != nullptr) cudaEventDestroy(copied_);
    if (flag_ != nullptr) cudaFree(flag_);
    fail(ErrorCode::kSystemError, "rank {}: setting up the stream release flag: {} ({})", rank_,
         cudaGetErrorString(err), cudaGetErrorName(err));
  }
}

StreamRelease::~StreamRelease() {
  cudaEventDestroy(copied_);
  cudaFree(flag_);
}

unsigned long long StreamRelease::flagAddress() const {
  return reinterpret_cast<unsigned long long>(flag_);
}

void StreamRelease::findMemOps() {
  auto wait = reinterpret_cast<DriverMemOpFn>(driverEntryPoint("cuStreamWaitValue32"));
  auto write = reinterpret_cast<DriverMemOpFn>(driverEntryPoint("cuStreamWriteValue32"));
  std::string why = "the driver exports no cuStreamWaitValue32/cuStreamWriteValue32";
  if (wait != nullptr && write != nullptr) {
    // The definitive test: both operations on our own stream (synchronised by the caller).
    CUresult r = write(copyStream_, flagAddress(), 0, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r == CUDA_SUCCESS) r = wait(copyStream_, flagAddress(), 0, CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) {
      waitValue_ = reinterpret_cast<void*>(wait);
      writeValue_ = reinterpret_cast<void*>(write);
      return;
    }
    why = fmt::format("stream memory operations fail (CUresult {})", static_cast<int>(r));
  }
  log(LogLevel::kInfo, rank_, "{}: streams wait through host functions instead", why);
}

int StreamRelease::holdUntil(CUstream_st* stream, uint32_t seq, const char** call) {
  if (waitValue_ != nullptr) {
    *call = "cuStreamWaitValue32";
    const CUresult r = reinterpret_cast<DriverMemOpFn>(waitValue_)(stream, flagAddress(), seq,
                                                                   CU_STREAM_WAIT_VALUE_GEQ);
    return static_cast<int>(r);
  }
  *call = "cudaLaunchHostFunc";
  auto waiter = std::make_unique<Waiter>(Waiter{this, seq});
  const cudaError_t err = cudaLaunchHostFunc(stream, &StreamRelease::hostWait, waiter.get());
  if (err == cudaSuccess) waiter.release();  // hostWait deletes it
  return err;
}

// Runs on CUDA's callback thread; may block it (the fallback's known cost), never calls
// CUDA, and returns once the worker released `seq`.
void StreamRelease::hostWait(void* arg) {
  std::unique_ptr<Waiter> w(static_cast<Waiter*>(arg));
  w->self->waitReleased(w->seq);
}

void StreamRelease::release(uint32_t seq) {
  if (writeValue_ != nullptr) {
    const CUresult r = reinterpret_cast<DriverMemOpFn>(writeValue_)(
        copyStream_, flagAddress(), seq, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) {
      log(LogLevel::kError, rank_, "cuStreamWriteValue32 failed (CUresult {}): streams waiting "
          "for device collective #{} may hang", static_cast<int>(r), seq);
    }
  } else {
    // The result is in place once the copy stream has passed this point.
    cudaError_t err = cudaEventRecord(copied_, copyStream_);
    if (err == cudaSuccess) err = cudaEventSynchronize(copied_);
    if (err != cudaSuccess) {
      log(LogLevel::kError, rank_, "releasing device collective #{}: {}", seq,
          cudaGetErrorString(err));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = seq;
  }
  cv_.notify_all();
}

void StreamRelease::waitReleased(uint32_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return seqReached(released_, seq); });
}

}  // namespace gyre
