#include "staging.h"

#include <sstream>
#include <stdexcept>

namespace gyre_torch {

using Op = c10d::ReduceOp;

const char* opName(Op::RedOpType op) {
  switch (op) {
    case Op::SUM: return "SUM";
    case Op::AVG: return "AVG";
    case Op::PRODUCT: return "PRODUCT";
    case Op::MIN: return "MIN";
    case Op::MAX: return "MAX";
    case Op::BAND: return "BAND";
    case Op::BOR: return "BOR";
    case Op::BXOR: return "BXOR";
    case Op::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

std::string describe(const char* call, const at::Tensor& t) {
  return std::string(call) + " of " + std::to_string(t.numel()) + " " +
         std::string(c10::toString(t.scalar_type()));
}

static std::optional<gyreRedOp_t> numericOp(Op::RedOpType op) {
  switch (op) {
    case Op::SUM: case Op::PREMUL_SUM: return gyreSum;  // PREMUL_SUM: input pre-scaled
    case Op::AVG: return gyreAvg;
    case Op::PRODUCT: return gyreProd;
    case Op::MIN: return gyreMin;
    case Op::MAX: return gyreMax;
    default: return std::nullopt;  // bitwise ops: not in gyre
  }
}

std::optional<NativeReduction> nativeReduction(at::ScalarType type, Op::RedOpType op) {
  if (type == at::kBool) {
    // Logical forms: any / all. bool's storage is one byte holding 0 or 1.
    switch (op) {
      case Op::SUM: case Op::BOR: case Op::MAX: return NativeReduction{gyreUint8, gyreMax};
      case Op::PRODUCT: case Op::BAND: case Op::MIN: return NativeReduction{gyreUint8, gyreMin};
      case Op::BXOR: return std::nullopt;
      default:
        throw std::invalid_argument(std::string("gyre: ") + opName(op) +
                                    " is not defined for bool tensors");
    }
  }
  if (type == at::kComplexFloat || type == at::kComplexDouble) {
    if (op != Op::SUM && op != Op::AVG && op != Op::PREMUL_SUM) {
      throw std::invalid_argument(std::string("gyre: ") + opName(op) +
                                  " is not defined for complex tensors");
    }
    return NativeReduction{type == at::kComplexFloat ? gyreFloat32 : gyreFloat64,
                           *numericOp(op), 2};
  }
  std::optional<gyreRedOp_t> gop = numericOp(op);
  if (!gop) return std::nullopt;
  switch (type) {
    case at::kFloat: return NativeReduction{gyreFloat32, *gop};
    case at::kDouble: return NativeReduction{gyreFloat64, *gop};
    case at::kHalf: return NativeReduction{gyreFloat16, *gop};
    case at::kBFloat16: return NativeReduction{gyreBfloat16, *gop};
    case at::kChar: return NativeReduction{gyreInt8, *gop};
    case at::kByte: return NativeReduction{gyreUint8, *gop};
    case at::kInt: return NativeReduction{gyreInt32, *gop};
    case at::kLong: return NativeReduction{gyreInt64, *gop};
    default: return std::nullopt;  // int16 and the rest: reduced locally after a gather
  }
}

at::Tensor reduceLocally(const at::Tensor& stacked, Op::RedOpType op, int world) {
  const at::ScalarType type = stacked.scalar_type();
  at::Tensor acc = stacked.select(0, 0).clone();
  for (int r = 1; r < world; ++r) {
    at::Tensor next = stacked.select(0, r);
    switch (op) {
      case Op::SUM: case Op::AVG: case Op::PREMUL_SUM: acc.add_(next); break;
      case Op::PRODUCT: acc.mul_(next); break;
      case Op::MIN: acc = at::minimum(acc, next); break;
      case Op::MAX: acc = at::maximum(acc, next); break;
      case Op::BAND: acc.bitwise_and_(next); break;
      case Op::BOR: acc.bitwise_or_(next); break;
      case Op::BXOR: acc.bitwise_xor_(next); break;
      default: throw std::invalid_argument("gyre: unknown reduce op");
    }
  }
  if (op == Op::AVG) {
    if (at::isFloatingType(type) || at::isComplexType(type)) {
      acc.div_(world);
    } else {
      acc = at::div(acc, world, "trunc").to(type);  // as gyre's integer AVG
    }
  }
  if (op == Op::BAND || op == Op::BOR || op == Op::BXOR) {
    if (at::isFloatingType(type) || at::isComplexType(type)) {
      throw std::invalid_argument(std::string("gyre: ") + opName(op) +
                                  " needs an integer or bool tensor");
    }
  }
  return acc;
}

at::Tensor preMultiplied(const at::Tensor& input, const c10d::ReduceOp& op) {
  PreMulFactor factor = preMulFactor(op);
  at::Tensor host = input.to(at::kCPU);
  at::Tensor scaled = factor.tensor.defined() ? at::mul(host, factor.tensor.to(at::kCPU))
                                              : at::mul(host, factor.scalar);
  return scaled.to(input.scalar_type()).contiguous();  // integer inputs stay integers
}

void throwNotDense(const at::Tensor& t) {
  std::ostringstream layout;
  layout << t.layout();
  throw std::invalid_argument("gyre: a tensor of layout " + layout.str() +
                              " is not supported: gyre's collectives take dense (strided) "
                              "tensors; pass tensor.to_dense() (sparse all_reduce: use gloo)");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* call) {
  if (tensors.size() != 1) {
    throw std::invalid_argument(std::string("gyre: ") + call + " takes exactly one tensor per "
                                "rank, got " + std::to_string(tensors.size()));
  }
  return tensors.front();
}

}  // namespace gyre_torch
