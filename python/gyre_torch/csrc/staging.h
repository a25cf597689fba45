// How torch tensors and reduce ops map onto gyre's buffers, dtypes and ops: the staging
// rules of GyreBackend (gyre_backend.h), shared by its collectives. Stateless helpers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "capi/gyre.h"
#include "torch_compat.h"

namespace gyre_torch {

// Throws std::invalid_argument naming t's layout: gyre moves dense (strided) buffers only.
[[noreturn]] void throwNotDense(const at::Tensor& t);

// `t` itself when gyre can use it in place (a contiguous CPU tensor), else a contiguous
// host copy (the caller copies results back). Every tensor a collective hands gyre comes
// through here, so a sparse (or other non-strided) tensor fails here with a clear error
// instead of deep in torch's copy.
inline at::Tensor hostContiguous(const at::Tensor& t) {
  if (t.layout() != at::kStrided) throwNotDense(t);
  if (t.is_cpu() && t.is_contiguous()) return t;
  return t.to(at::kCPU).contiguous();
}
inline bool sameStorage(const at::Tensor& a, const at::Tensor& b) {
  return a.data_ptr() == b.data_ptr();
}
inline size_t bytesOf(const at::Tensor& t) { return t.numel() * t.element_size(); }

// A reduction gyre runs natively: the buffer's gyre dtype and op, and the element count
// factor (complex numbers reduce as pairs of reals).
struct NativeReduction {
  gyreDataType_t dtype;
  gyreRedOp_t op;
  size_t countFactor = 1;
};

// nullopt: no native gyre form (the all-gather path then reduces locally). Throws for
// combinations that have no meaning (AVG of bool, MAX of complex).
std::optional<NativeReduction> nativeReduction(at::ScalarType type, c10d::ReduceOp::RedOpType op);

// "all_reduce of 1024 float32 (SUM)" and friends, for Work and error messages.
std::string describe(const char* call, const at::Tensor& t);
const char* opName(c10d::ReduceOp::RedOpType op);

// Reduces `stacked` (world x shape) over dim 0 as op does, in rank order, into dtype.
at::Tensor reduceLocally(const at::Tensor& stacked, c10d::ReduceOp::RedOpType op, int world);

// For PREMUL_SUM: input * factor as a new host tensor (its dtype unchanged).
at::Tensor preMultiplied(const at::Tensor& input, const c10d::ReduceOp& op);

// The host buffer a reduction of `t` runs on: PREMUL_SUM's scaled copy, else
// hostContiguous(t).
inline at::Tensor reductionBuffer(const at::Tensor& t, const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::PREMUL_SUM ? preMultiplied(t, op) : hostContiguous(t);
}

// The single tensor of a call that takes a list (torch 1.13's multi-device form).
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* call);

}  // namespace gyre_torch
