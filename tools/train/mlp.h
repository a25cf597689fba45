// gyre::train::Mlp: a multilayer perceptron (Linear, ReLU, ..., Linear) for the trainer,
// with torch.nn.Linear's layout and default initialisation, every matrix product a
// cblas_sgemm.
//
// Parameters follow torch's `model.parameters()` order: W0, b0, W1, b1, ...; W_l is
// [out, in] row-major, so layer l computes Z = H W_l^T + b_l. Initialisation is
// nn.Linear's default, kaiming_uniform_(a = sqrt(5)) for W and U(-1/sqrt(in), 1/sqrt(in))
// for b, which both come to U(-1/sqrt(in), 1/sqrt(in)); the draws come from a
// std::mt19937_64 seeded with `seed` (torch's generator cannot be reproduced bit for bit),
// 24 bits per float, layers in order, W before b.
//
// Gradients: each parameter has a gradient buffer, owned by the Mlp until bindGradient()
// points it at the caller's storage (GradSync's bucket view, so the all-reduce reads the
// gradient where backward wrote it). backward() walks the layers from the top and calls
// `ready(block)` as each gradient block is final, so its all-reduce can start while the
// layers below are still being differentiated. Blocks (gradBlocks()) are the biases and
// row ranges of at most `blockRows` rows of each weight (0: whole weights); finer blocks
// let a large bottom weight be sent in pieces. Within a layer the order is bias first,
// then weight blocks from the last rows to the first: reverse parameter order, the order
// in which gradient buckets are formed.
//
// Threads: not thread-safe; one Mlp per rank, used by one thread. Gradient storage bound
// with bindGradient() must outlive the Mlp's use of it: call unbindGradients() before
// freeing it (a GradSync replaced when the world changes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace gyre::train {

// One piece of one parameter's gradient: elements [begin, end) of parameter `param`.
struct GradBlock {
  size_t param = 0;
  size_t begin = 0;
  size_t end = 0;
};

class Mlp {
 public:
  // widths = {inputs, hidden..., classes}, at least two entries, all positive.
  Mlp(std::vector<size_t> widths, uint64_t seed, size_t blockRows = 0);

  const std::vector<size_t>& widths() const { return widths_; }
  size_t numLayers() const { return widths_.size() - 1; }
  size_t numParams() const { return 2 * numLayers(); }
  size_t inputs() const { return widths_.front(); }
  size_t classes() const { return widths_.back(); }

  std::span<float> param(size_t i) { return params_[i]; }
  std::span<const float> param(size_t i) const { return params_[i]; }
  std::span<float> grad(size_t i) { return {grads_[i], params_[i].size()}; }
  std::span<const float> grad(size_t i) const { return {grads_[i], params_[i].size()}; }

  // Backward writes parameter i's gradient into `storage` from now on; the current
  // gradient is copied there first. storage.size() must equal param(i).size().
  void bindGradient(size_t i, std::span<float> storage);
  // Every bound gradient goes back to storage the Mlp owns, its current values copied:
  // the storage bindGradient() was given may be freed afterwards.
  void unbindGradients();

  // Gradient blocks in parameter order; `ready` receives indices into this list.
  const std::vector<GradBlock>& gradBlocks() const { return blocks_; }

  // x: [batch, inputs()] row-major. Returns the logits [batch, classes()], valid until the
  // next forward(). Keeps the activations that backward() needs.
  const float* forward(const float* x, size_t batch);

  // Backpropagates dlogits (d loss / d logits, [batch, classes()]) through the last
  // forward(x, batch), writing (accumulate = false) or adding to (accumulate = true) every
  // gradient, and calling ready(block) once per block as soon as that block is final.
  void backward(const float* x, size_t batch, const float* dlogits, bool accumulate,
                const std::function<void(size_t block)>& ready);

 private:
  size_t weightIndex(size_t layer) const { return 2 * layer; }
  size_t biasIndex(size_t layer) const { return 2 * layer + 1; }

  std::vector<size_t> widths_;
  std::vector<std::vector<float>> params_;
  std::vector<std::vector<float>> ownedGrads_;
  std::vector<float*> grads_;
  std::vector<GradBlock> blocks_;
  // Per layer: the first block index of its weight and its bias block index.
  std::vector<size_t> firstWeightBlock_, biasBlock_;
  size_t blockRows_;
  // Activations of the last forward: acts_[l] is layer l's output ([batch, widths_[l+1]]),
  // after ReLU for hidden layers; the logits for the last.
  std::vector<std::vector<float>> acts_;
  std::vector<float> delta_, deltaBelow_;  // d loss / d Z of the current and next layer
  size_t batch_ = 0;
};

// Softmax cross-entropy, mean over the batch (torch's nn.CrossEntropyLoss default).
struct LossResult {
  double loss = 0;     // mean over the batch
  size_t correct = 0;  // argmax(logits) == label (first maximum wins, as torch.argmax)
};
// Writes d(mean loss)/d logits to dlogits (may be null to skip the gradient).
LossResult softmaxCrossEntropy(const float* logits, const uint8_t* labels, size_t batch,
                               size_t classes, float* dlogits);

// Number of rows whose argmax equals the label.
size_t countCorrect(const float* logits, const uint8_t* labels, size_t batch, size_t classes);

}  // namespace gyre::train
