#include "tools/train/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"

namespace gyre::train {
namespace {

// U[0, 1) from the top 24 bits: exactly representable in float, so the value does not
// depend on the compiler's rounding of a wider intermediate.
float unitUniform(std::mt19937_64& engine) {
  return static_cast<float>(engine() >> 40) * (1.0f / 16777216.0f);
}

int asInt(size_t v) { return static_cast<int>(v); }

}  // namespace

Mlp::Mlp(std::vector<size_t> widths, uint64_t seed, size_t blockRows)
    : widths_(std::move(widths)), blockRows_(blockRows) {
  if (widths_.size() < 2) {
    fail(ErrorCode::kInvalidArgument, "Mlp: need at least an input and an output width");
  }
  for (size_t w : widths_) {
    if (w == 0) fail(ErrorCode::kInvalidArgument, "Mlp: widths must be positive");
  }
  std::mt19937_64 engine(seed);
  for (size_t l = 0; l < numLayers(); ++l) {
    const size_t in = widths_[l], out = widths_[l + 1];
    // kaiming_uniform_(a=sqrt(5)): gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / in), which
    // is 1 / sqrt(in); the bias bound is 1 / sqrt(in) too.
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(in)));
    std::vector<float> w(in * out), b(out);
    for (float& v : w) v = bound * (2.0f * unitUniform(engine) - 1.0f);
    for (float& v : b) v = bound * (2.0f * unitUniform(engine) - 1.0f);
    params_.push_back(std::move(w));
    params_.push_back(std::move(b));
  }
  for (const auto& p : params_) ownedGrads_.emplace_back(p.size(), 0.0f);
  for (auto& g : ownedGrads_) grads_.push_back(g.data());

  for (size_t l = 0; l < numLayers(); ++l) {
    const size_t in = widths_[l], out = widths_[l + 1];
    const size_t rows = blockRows_ == 0 ? out : std::min(blockRows_, out);
    firstWeightBlock_.push_back(blocks_.size());
    for (size_t r = 0; r < out; r += rows) {
      blocks_.push_back({weightIndex(l), r * in, std::min(r + rows, out) * in});
    }
    biasBlock_.push_back(blocks_.size());
    blocks_.push_back({biasIndex(l), 0, out});
  }
  acts_.resize(numLayers());
}

void Mlp::bindGradient(size_t i, std::span<float> storage) {
  if (i >= params_.size() || storage.size() != params_[i].size()) {
    fail(ErrorCode::kInvalidArgument, "Mlp::bindGradient: parameter {} needs {} floats, got {}", i,
         i < params_.size() ? params_[i].size() : 0, storage.size());
  }
  if (storage.data() != grads_[i]) {
    std::memcpy(storage.data(), grads_[i], storage.size() * sizeof(float));
  }
  grads_[i] = storage.data();
  ownedGrads_[i].clear();
  ownedGrads_[i].shrink_to_fit();
}

void Mlp::unbindGradients() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ownedGrads_[i].empty()) continue;  // never bound
    ownedGrads_[i].assign(grads_[i], grads_[i] + params_[i].size());
    grads_[i] = ownedGrads_[i].data();
  }
}

const float* Mlp::forward(const float* x, size_t batch) {
  batch_ = batch;
  const float* input = x;
  for (size_t l = 0; l < numLayers(); ++l) {
    const size_t in = widths_[l], out = widths_[l + 1];
    std::vector<float>& z = acts_[l];
    z.resize(batch * out);
    if (batch == 0) continue;
    const float* b = params_[biasIndex(l)].data();
    for (size_t i = 0; i < batch; ++i) std::memcpy(&z[i * out], b, out * sizeof(float));
    // Z = H W^T + Z (Z holds the bias rows).
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, asInt(batch), asInt(out), asInt(in), 1.0f,
                input, asInt(in), params_[weightIndex(l)].data(), asInt(in), 1.0f, z.data(),
                asInt(out));
    if (l + 1 < numLayers()) {
      for (float& v : z) v = v > 0.0f ? v : 0.0f;
    }
    input = z.data();
  }
  return acts_.back().data();
}

void Mlp::backward(const float* x, size_t batch, const float* dlogits, bool accumulate,
                   const std::function<void(size_t block)>& ready) {
  if (batch != batch_) {
    fail(ErrorCode::kInvalidArgument, "Mlp::backward: batch {} but the last forward had {}", batch,
         batch_);
  }
  const float beta = accumulate ? 1.0f : 0.0f;
  const float* dz = dlogits;  // d loss / d Z of layer l, [batch, out]
  for (size_t l = numLayers(); l-- > 0;) {
    const size_t in = widths_[l], out = widths_[l + 1];
    const float* h = l == 0 ? x : acts_[l - 1].data();

    // Bias first: it is cheap and comes first in reverse parameter order.
    float* db = grads_[biasIndex(l)];
    if (!accumulate) std::fill(db, db + out, 0.0f);
    for (size_t i = 0; i < batch; ++i) {
      const float* row = dz + i * out;
      for (size_t j = 0; j < out; ++j) db[j] += row[j];
    }
    if (ready) ready(biasBlock_[l]);

    // dW = dZ^T H, one row block at a time, last rows first.
    float* dw = grads_[weightIndex(l)];
    for (size_t k = biasBlock_[l]; k-- > firstWeightBlock_[l];) {
      const size_t r0 = blocks_[k].begin / in, r1 = blocks_[k].end / in;
      if (batch == 0) {
        if (!accumulate) std::fill(dw + r0 * in, dw + r1 * in, 0.0f);
      } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, asInt(r1 - r0), asInt(in),
                    asInt(batch), 1.0f, dz + r0, asInt(out), h, asInt(in), beta, dw + r0 * in,
                    asInt(in));
      }
      if (ready) ready(k);
    }

    if (l == 0) break;
    // dH = dZ W, then through the ReLU: its derivative is 1 where the output was positive.
    std::vector<float>& below = (dz == delta_.data()) ? deltaBelow_ : delta_;
    below.resize(batch * in);
    if (batch > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, asInt(batch), asInt(in), asInt(out),
                  1.0f, dz, asInt(out), params_[weightIndex(l)].data(), asInt(in), 0.0f,
                  below.data(), asInt(in));
    }
    for (size_t i = 0; i < below.size(); ++i) {
      if (!(h[i] > 0.0f)) below[i] = 0.0f;
    }
    dz = below.data();
  }
}

LossResult softmaxCrossEntropy(const float* logits, const uint8_t* labels, size_t batch,
                               size_t classes, float* dlogits) {
  LossResult result;
  if (batch == 0) return result;
  double lossSum = 0;
  const double invBatch = 1.0 / static_cast<double>(batch);
  for (size_t i = 0; i < batch; ++i) {
    const float* z = logits + i * classes;
    size_t argmax = 0;
    for (size_t j = 1; j < classes; ++j) {
      if (z[j] > z[argmax]) argmax = j;
    }
    if (argmax == labels[i]) ++result.correct;
    // log-sum-exp shifted by the maximum, so exp never overflows.
    const double zmax = z[argmax];
    double sum = 0;
    for (size_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(z[j]) - zmax);
    const double logSum = std::log(sum) + zmax;
    lossSum += logSum - z[labels[i]];
    if (dlogits != nullptr) {
      float* d = dlogits + i * classes;
      for (size_t j = 0; j < classes; ++j) {
        const double p = std::exp(static_cast<double>(z[j]) - logSum);
        d[j] = static_cast<float>((p - (j == labels[i] ? 1.0 : 0.0)) * invBatch);
      }
    }
  }
  result.loss = lossSum * invBatch;
  return result;
}

size_t countCorrect(const float* logits, const uint8_t* labels, size_t batch, size_t classes) {
  size_t correct = 0;
  for (size_t i = 0; i < batch; ++i) {
    const float* z = logits + i * classes;
    size_t argmax = 0;
    for (size_t j = 1; j < classes; ++j) {
      if (z[j] > z[argmax]) argmax = j;
    }
    if (argmax == labels[i]) ++correct;
  }
  return correct;
}

}  // namespace gyre::train
