#include "tools/train/sgd.h"

#include "base/error.h"

namespace gyre::train {

SgdMomentum::SgdMomentum(const std::vector<size_t>& paramCounts, float lr, float momentum)
    : lr_(lr), momentum_(momentum) {
  for (size_t n : paramCounts) buffers_.emplace_back(n, 0.0f);
}

void SgdMomentum::step(size_t i, std::span<float> param, std::span<const float> grad) {
  std::vector<float>& buf = buffers_.at(i);
  if (param.size() != buf.size() || grad.size() != buf.size()) {
    fail(ErrorCode::kInvalidArgument,
         "SgdMomentum: parameter {} has {} values, {} gradients, {} expected", i, param.size(),
         grad.size(), buf.size());
  }
  const float m = momentum_, lr = lr_;
  for (size_t k = 0; k < buf.size(); ++k) {
    // Two roundings as torch's buf.mul_(m).add_(g), not one fused multiply-add, so the
    // result does not depend on whether the compiler contracts the expression.
    const float decayed = m * buf[k];
    buf[k] = decayed + grad[k];
    param[k] -= lr * buf[k];
  }
}

}  // namespace gyre::train
