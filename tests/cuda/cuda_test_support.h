// Shared by the CUDA tests: whether a GPU is there (and why not), device buffers, and
// checked CUDA calls.
//
// cudaUnavailableReason() asks in a forked child, so that the test process itself never
// initialises CUDA: tests that fork ranks (gyre::spawn) need a parent without a CUDA
// context, since a context does not survive fork. The answer is cached per process.
// Built only with GYRE_HAVE_CUDA; without the toolkit the CUDA tests compile to one
// skipped test each.
#pragma once

#if GYRE_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fork_ranks.h"

namespace gyre::testing {

// "" when a CUDA device can be used, else why not ("no CUDA device: ..." follows it in
// the skip message).
inline std::string cudaUnavailableReason() {
  static const std::string reason = [] {
    ForkedRanks probe(1, std::chrono::seconds(60));
    probe.start([&](int) {
      int n = 0;
      const cudaError_t err = cudaGetDeviceCount(&n);
      std::string answer;
      if (err != cudaSuccess) {
        answer = fmt::format("cudaGetDeviceCount: {} ({}){}", cudaGetErrorString(err),
                             cudaGetErrorName(err),
                             err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
                                 ? ": no NVIDIA driver or GPU on this machine"
                                 : "");
      } else if (n == 0) {
        answer = "cudaGetDeviceCount found 0 devices";
      }
      probe.note("answer", answer);
    });
    const RankResult ended = probe.join(probe.started() + std::chrono::seconds(60))[0];
    if (!ended.ok) return fmt::format("the probe process failed: {}", ended.describe());
    return ended.note("answer");
  }();
  return reason;
}

inline void cudaCheck(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(fmt::format("{}: {} ({})", what, cudaGetErrorString(err),
                                         cudaGetErrorName(err)));
  }
}

// A device allocation of `bytes`, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    cudaCheck(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  char* get() const { return static_cast<char*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void upload(const void* src, size_t n, size_t offset = 0) {
    cudaCheck(cudaMemcpy(get() + offset, src, n, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<std::byte> download() const {
    std::vector<std::byte> out(bytes_);
    cudaCheck(cudaMemcpy(out.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

}  // namespace gyre::testing

#define GYRE_SKIP_WITHOUT_GPU()                                          \
  do {                                                                   \
    const std::string reason_ = ::gyre::testing::cudaUnavailableReason(); \
    if (!reason_.empty()) GTEST_SKIP() << "no CUDA device: " << reason_;  \
  } while (0)

#endif  // GYRE_HAVE_CUDA
