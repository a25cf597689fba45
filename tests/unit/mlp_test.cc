// The trainer's MLP: backward against central finite differences on a tiny net, block
// order and block-wise gradients, and one (two) SGD momentum steps against a hand
// computation in double precision.
#include "tools/train/mlp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "tools/train/sgd.h"

namespace gyre::train {
namespace {

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> y;
};

Batch randomBatch(size_t batch, size_t inputs, size_t classes, uint64_t seed) {
  std::mt19937_64 engine(seed);
  Batch b;
  for (size_t i = 0; i < batch * inputs; ++i) {
    b.x.push_back(static_cast<float>(engine() % 1000) / 1000.0f);
  }
  for (size_t i = 0; i < batch; ++i) b.y.push_back(static_cast<uint8_t>(engine() % classes));
  return b;
}

double lossOf(Mlp& net, const Batch& b) {
  const size_t n = b.y.size();
  return softmaxCrossEntropy(net.forward(b.x.data(), n), b.y.data(), n, net.classes(), nullptr)
      .loss;
}

TEST(MlpTest, InitialisationIsBoundedAndSeeded) {
  Mlp a({784, 512, 256, 10}, 0), b({784, 512, 256, 10}, 0), c({784, 512, 256, 10}, 1);
  for (size_t i = 0; i < a.numParams(); ++i) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(a.widths()[i / 2]));
    double sumSq = 0;
    for (float v : a.param(i)) {
      ASSERT_LE(std::fabs(v), bound);
      sumSq += double{v} * v;
    }
    // Uniform(-k, k) has variance k^2 / 3.
    const double var = sumSq / a.param(i).size();
    EXPECT_NEAR(var, bound * bound / 3.0, bound * bound / 3.0 * (i % 2 ? 0.5 : 0.05));
    EXPECT_TRUE(std::equal(a.param(i).begin(), a.param(i).end(), b.param(i).begin()));
  }
  EXPECT_FALSE(std::equal(a.param(0).begin(), a.param(0).end(), c.param(0).begin()));
}

TEST(MlpTest, BackwardMatchesFiniteDifferences) {
  Mlp net({6, 5, 4, 3}, 3);
  const Batch b = randomBatch(4, 6, 3, 11);
  const size_t n = b.y.size();
  std::vector<float> dlogits(n * 3);
  softmaxCrossEntropy(net.forward(b.x.data(), n), b.y.data(), n, 3, dlogits.data());
  net.backward(b.x.data(), n, dlogits.data(), false, nullptr);

  const float eps = 1e-2f;
  size_t checked = 0;
  for (size_t p = 0; p < net.numParams(); ++p) {
    const std::vector<float> analytic(net.grad(p).begin(), net.grad(p).end());
    for (size_t k = 0; k < net.param(p).size(); ++k) {
      float& w = net.param(p)[k];
      const float saved = w;
      w = saved + eps;
      const double up = lossOf(net, b);
      w = saved - eps;
      const double down = lossOf(net, b);
      w = saved;
      const double numeric = (up - down) / (2.0 * eps);
      EXPECT_NEAR(analytic[k], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << "parameter " << p << " element " << k;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6u * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
}

TEST(MlpTest, BlocksArriveInReverseParameterOrderAndMatchWholeGradients) {
  Mlp whole({7, 6, 5, 3}, 9), blocked({7, 6, 5, 3}, 9, /*blockRows=*/2);
  // 6 rows -> 3 blocks, 5 rows -> 3 blocks (2, 2, 1), 3 rows -> 2 blocks; plus 3 biases.
  ASSERT_EQ(blocked.gradBlocks().size(), 3u + 1 + 3 + 1 + 2 + 1);
  ASSERT_EQ(whole.gradBlocks().size(), 6u);
  const Batch b = randomBatch(5, 7, 3, 2);
  std::vector<float> dlogits(5 * 3);
  softmaxCrossEntropy(whole.forward(b.x.data(), 5), b.y.data(), 5, 3, dlogits.data());
  whole.backward(b.x.data(), 5, dlogits.data(), false, nullptr);
  blocked.forward(b.x.data(), 5);
  std::vector<size_t> order;
  blocked.backward(b.x.data(), 5, dlogits.data(), false, [&](size_t k) { order.push_back(k); });

  // Reverse parameter order: blocks sorted by (param, begin) descending.
  std::vector<size_t> expected(blocked.gradBlocks().size());
  for (size_t k = 0; k < expected.size(); ++k) expected[k] = expected.size() - 1 - k;
  EXPECT_EQ(order, expected);
  for (size_t p = 0; p < whole.numParams(); ++p) {
    for (size_t k = 0; k < whole.grad(p).size(); ++k) {
      EXPECT_FLOAT_EQ(blocked.grad(p)[k], whole.grad(p)[k]) << p << " " << k;
    }
  }
}

TEST(MlpTest, AccumulateAddsAndBoundStorageIsUsed) {
  Mlp net({4, 3, 2}, 5);
  const Batch b = randomBatch(3, 4, 2, 8);
  std::vector<float> dlogits(3 * 2);
  softmaxCrossEntropy(net.forward(b.x.data(), 3), b.y.data(), 3, 2, dlogits.data());
  net.backward(b.x.data(), 3, dlogits.data(), false, nullptr);
  const std::vector<float> once(net.grad(0).begin(), net.grad(0).end());

  std::vector<float> storage(net.param(0).size(), -1.0f);
  net.bindGradient(0, storage);
  EXPECT_EQ(storage, once);  // the current gradient moves with the binding
  net.backward(b.x.data(), 3, dlogits.data(), true, nullptr);
  for (size_t k = 0; k < once.size(); ++k) EXPECT_FLOAT_EQ(storage[k], 2 * once[k]);
  EXPECT_EQ(net.grad(0).data(), storage.data());

  // Unbound, the gradient moves back into the Mlp, so the storage may go (gyre-train
  // frees its GradSync when the world changes); a later binding copies it on.
  const std::vector<float> twice = storage;
  net.unbindGradients();
  EXPECT_NE(net.grad(0).data(), storage.data());
  std::fill(storage.begin(), storage.end(), -7.0f);
  storage.clear();
  storage.shrink_to_fit();
  EXPECT_TRUE(std::equal(twice.begin(), twice.end(), net.grad(0).begin()));
  std::vector<float> again(twice.size(), -1.0f);
  net.bindGradient(0, again);
  EXPECT_EQ(again, twice);
}

TEST(MlpTest, LossAndAccuracyOnKnownLogits) {
  const float logits[] = {0, 0, 0, /**/ 2, 1, 0};
  const uint8_t labels[] = {1, 0};
  float d[6];
  const LossResult r = softmaxCrossEntropy(logits, labels, 2, 3, d);
  const double row2 = std::log(std::exp(2.0) + std::exp(1.0) + 1.0) - 2.0;
  EXPECT_NEAR(r.loss, (std::log(3.0) + row2) / 2, 1e-12);
  EXPECT_EQ(r.correct, 1u);  // row 1 ties: the first maximum (class 0) is not label 1
  EXPECT_NEAR(d[1], (1.0 / 3 - 1) / 2, 1e-7);
  EXPECT_NEAR(d[0], (1.0 / 3) / 2, 1e-7);
}

// One linear layer 2 -> 2 (no ReLU), one sample, two steps of SGD with momentum 0.9,
// every number worked out in double here.
TEST(MlpTest, SgdStepsMatchAHandComputation) {
  Mlp net({2, 2}, 0);
  const double w0[2][2] = {{0.1, -0.2}, {0.3, 0.4}};
  const double b0[2] = {0.05, -0.05};
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) net.param(0)[r * 2 + c] = static_cast<float>(w0[r][c]);
    net.param(1)[r] = static_cast<float>(b0[r]);
  }
  const float x[2] = {1.0f, 2.0f};
  const uint8_t y[1] = {1};
  const double lr = 0.05, m = 0.9;
  SgdMomentum sgd({4, 2}, static_cast<float>(lr), static_cast<float>(m));

  double w[2][2] = {{w0[0][0], w0[0][1]}, {w0[1][0], w0[1][1]}}, b[2] = {b0[0], b0[1]};
  double bufW[2][2] = {}, bufB[2] = {};
  for (int step = 0; step < 2; ++step) {
    // By hand: z = W x + b, p = softmax(z), dz = p - onehot, dW = dz x^T, db = dz.
    double z[2], p[2];
    for (int r = 0; r < 2; ++r) z[r] = w[r][0] * x[0] + w[r][1] * x[1] + b[r];
    const double s = std::exp(z[0]) + std::exp(z[1]);
    for (int r = 0; r < 2; ++r) p[r] = std::exp(z[r]) / s;
    for (int r = 0; r < 2; ++r) {
      const double dz = p[r] - (r == y[0] ? 1.0 : 0.0);
      for (int c = 0; c < 2; ++c) {
        bufW[r][c] = m * bufW[r][c] + dz * x[c];
        w[r][c] -= lr * bufW[r][c];
      }
      bufB[r] = m * bufB[r] + dz;
      b[r] -= lr * bufB[r];
    }
    // The same with the Mlp and SgdMomentum.
    float dlogits[2];
    softmaxCrossEntropy(net.forward(x, 1), y, 1, 2, dlogits);
    net.backward(x, 1, dlogits, false, nullptr);
    for (size_t i = 0; i < 2; ++i) sgd.step(i, net.param(i), net.grad(i));
  }
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) EXPECT_NEAR(net.param(0)[r * 2 + c], w[r][c], 1e-6);
    EXPECT_NEAR(net.param(1)[r], b[r], 1e-6);
    EXPECT_NEAR(sgd.buffer(1)[r], bufB[r], 1e-6);
  }
}

}  // namespace
}  // namespace gyre::train
