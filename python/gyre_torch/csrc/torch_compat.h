// The differences between the two torch lines gyre_torch builds against, in one place:
// Debian 12's torch 1.13 (a backend is a c10d::ProcessGroup) and PyPI's torch 2.x (a
// backend is a c10d::Backend that torch wraps in a ProcessGroup). Everything else in
// csrc/ is written once against the names defined here.
#pragma once

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <exception>
#include <string_view>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

// torch.distributed.shrink_group (c10d::Backend::shrink / supportsShrinking): on the
// PyPI line from 2.15 (the first gyre builds against that has it).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15)
#define GYRE_TORCH_HAS_SHRINK 1
#else
#define GYRE_TORCH_HAS_SHRINK 0
#endif

// gyre's device path for CUDA tensors (capi/gyre_cuda.h, gyre_backend_device.cpp): torch 2.x
// only, and only where setup.py built gyre's C API with CUDA (it then defines
// GYRE_TORCH_WITH_CUDA=1; GYRE_TORCH_CUDA=0 or no toolkit leaves it out). Without it, CUDA
// tensors are staged through host memory.
#if TORCH_VERSION_MAJOR >= 2 && defined(GYRE_TORCH_WITH_CUDA) && GYRE_TORCH_WITH_CUDA
#define GYRE_TORCH_DEVICE_PATH 1
#else
#define GYRE_TORCH_DEVICE_PATH 0
#endif

namespace gyre_torch {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// PREMUL_SUM's factor: a scalar, or a one-element tensor (defined() tells which).
struct PreMulFactor {
  double scalar = 1.0;
  at::Tensor tensor;
};

inline PreMulFactor preMulFactor(const c10d::ReduceOp& op) {
  PreMulFactor out;
  auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "gyre: PREMUL_SUM without its factor");
#if TORCH_VERSION_MAJOR >= 2
  if (supplement->tensor_factor.defined()) {
    out.tensor = supplement->tensor_factor;
    return out;
  }
#else
  if (!supplement->tensor_factors.empty()) {
    out.tensor = supplement->tensor_factors.front();
    return out;
  }
#endif
  out.scalar = supplement->double_factor;
  return out;
}

// Whether an exception from a c10d::Store call means that a wait expired (gyre's
// gyreTimeout) rather than that the store failed or could not be reached (gyreRemoteError).
inline bool storeWaitExpired(const std::exception& e) {
#if TORCH_VERSION_MAJOR >= 2
  // TCPStore and HashStore (and a PrefixStore over them) throw DistStoreError when a wait
  // expires, DistNetworkError when the connection fails.
  if (dynamic_cast<const c10::DistNetworkError*>(&e) != nullptr) return false;
  if (dynamic_cast<const c10::DistStoreError*>(&e) != nullptr) return true;
  // Neither: FileStore's expired waits are still a plain c10::Error; only the text tells.
#endif
  // torch 1.13 has no distributed exception types: every store error is a c10::Error whose
  // text is the only sign ("Socket Timeout", "Wait timeout", "Timeout waiting for key").
  const std::string_view what = e.what();
  return what.find("imeout") != std::string_view::npos ||
         what.find("timed out") != std::string_view::npos;
}

}  // namespace gyre_torch
