// gyre::train::SgdMomentum: torch.optim.SGD with momentum, no dampening, no Nesterov,
// no weight decay, i.e. for each parameter p with gradient g:
//   buf = momentum * buf + g   (torch starts buf as a copy of g: the same as buf = 0 here)
//   p   = p - lr * buf
// Owns one momentum buffer per parameter (checkpointed with the weights). Not
// thread-safe; one per rank.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gyre::train {

class SgdMomentum {
 public:
  SgdMomentum(const std::vector<size_t>& paramCounts, float lr, float momentum);

  // Updates parameter i in place from its (averaged) gradient.
  void step(size_t i, std::span<float> param, std::span<const float> grad);

  size_t numParams() const { return buffers_.size(); }
  std::span<float> buffer(size_t i) { return buffers_[i]; }
  std::span<const float> buffer(size_t i) const { return buffers_[i]; }
  float lr() const { return lr_; }
  float momentum() const { return momentum_; }

 private:
  float lr_, momentum_;
  std::vector<std::vector<float>> buffers_;
};

}  // namespace gyre::train
