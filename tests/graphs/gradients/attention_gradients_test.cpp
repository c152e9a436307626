// Fused attention (Note [Fused attention]): ScaledDotProductAttention against attention written out in float64, its
// gradient rule against finite differences, and its float32 kernels (oneDNN's sgemm) against the float64 ones.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata {
// A named namespace: the unity build compiles test files together, and their helpers must not meet.
namespace attention_gradients_test {

using testing::expectGradientsMatchFiniteDifferences;
using testing::GradientCheckOptions;
using testing::randomTensor;

Tensor scalar64(double value) {
  Tensor t = Tensor::empty(DType::Float64, {});
  *t.data<double>() = value;
  return t;
}

Attributes causal(bool on) {
  Attributes a;
  a.set("causal", std::int64_t{on ? 1 : 0});
  return a;
}

// softmax(scale Q K^T, masked) V and each row's log-sum-exp, written out, for [S, T, D] slices.
std::pair<std::vector<double>, std::vector<double>> writtenOut(const Tensor& q, const Tensor& k, const Tensor& v,
                                                               double scale, bool isCausal) {
  const Shape& qs = q.shape();
  const std::int64_t t = qs[qs.size() - 2], d = qs.back(), s = k.shape()[k.shape().size() - 2];
  const std::int64_t dv = v.shape().back(), slices = q.numel() / (t * d);
  std::vector<double> y(static_cast<std::size_t>(slices * t * dv)), lse(static_cast<std::size_t>(slices * t));
  for (std::int64_t b = 0; b < slices; ++b) {
    for (std::int64_t i = 0; i < t; ++i) {
      std::vector<double> scores(static_cast<std::size_t>(s), -INFINITY);
      double top = -INFINITY;
      for (std::int64_t j = 0; j < (isCausal ? i + 1 : s); ++j) {
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c)
          dot += q.data<double>()[(b * t + i) * d + c] * k.data<double>()[(b * s + j) * d + c];
        scores[static_cast<std::size_t>(j)] = scale * dot;
        top = std::max(top, scale * dot);
      }
      double sum = 0;
      for (double& e : scores) {
        e = std::exp(e - top);
        sum += e;
      }
      lse[static_cast<std::size_t>(b * t + i)] = top + std::log(sum);
      for (std::int64_t c = 0; c < dv; ++c) {
        double acc = 0;
        for (std::int64_t j = 0; j < s; ++j)
          acc += scores[static_cast<std::size_t>(j)] / sum * v.data<double>()[(b * s + j) * dv + c];
        y[static_cast<std::size_t>((b * t + i) * dv + c)] = acc;
      }
    }
  }
  return {y, lse};
}

struct Case {
  Shape q, k, v;
  bool isCausal;
};

// T = 5 fits one block of rows; T = 70 spans two (kRows = 64); the non-causal case has more keys than queries and a
// value width unlike the key width.
const Case kCases[] = {
    {{2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}, true},
    {{1, 2, 70, 8}, {1, 2, 70, 8}, {1, 2, 70, 8}, true},
    {{2, 5, 3}, {2, 7, 3}, {2, 7, 6}, false},
    {{1, 1, 70, 4}, {1, 1, 75, 4}, {1, 1, 75, 2}, false},
};

TEST(AttentionGradientsTest, ForwardEqualsAttentionWrittenOut) {
  unsigned seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(shapeToString(c.q));
    const Tensor q = randomTensor(DType::Float64, c.q, seed++, -2, 2);
    const Tensor k = randomTensor(DType::Float64, c.k, seed++, -2, 2);
    const Tensor v = randomTensor(DType::Float64, c.v, seed++);
    const Tensor scale = scalar64(0.7);
    const std::vector<Tensor> out =
        runOpEagerly("ScaledDotProductAttention", {&q, &k, &v, &scale}, causal(c.isCausal), 2);
    const auto [y, lse] = writtenOut(q, k, v, 0.7, c.isCausal);
    ASSERT_EQ(out[0].numel(), static_cast<std::int64_t>(y.size()));
    for (std::size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(out[0].data<double>()[i], y[i], 1e-12) << "Y at " << i;
    for (std::size_t i = 0; i < lse.size(); ++i)
      ASSERT_NEAR(out[1].data<double>()[i], lse[i], 1e-12) << "LSE at " << i;
  }
}

TEST(AttentionGradientsTest, EveryOperandMatchesFiniteDifferences) {
  unsigned seed = 20;
  for (const Case& c : kCases) {
    SCOPED_TRACE(shapeToString(c.q));
    const std::vector<Tensor> inputs{randomTensor(DType::Float64, c.q, seed++),
                                     randomTensor(DType::Float64, c.k, seed++),
                                     randomTensor(DType::Float64, c.v, seed++), scalar64(0.5)};
    GradientCheckOptions options;
    options.wrt = {0, 1, 2};
    expectGradientsMatchFiniteDifferences("ScaledDotProductAttention", inputs, causal(c.isCausal), options);
    // The log-sum-exp read downstream too (its gradient joins the rows' term).
    options.outputCount = 2;
    expectGradientsMatchFiniteDifferences("ScaledDotProductAttention", inputs, causal(c.isCausal), options);
  }
}

TEST(AttentionGradientsTest, Float32KernelsMatchFloat64) {
  unsigned seed = 40;
  for (const Case& c : kCases) {
    SCOPED_TRACE(shapeToString(c.q));
    const Tensor q = randomTensor(DType::Float64, c.q, seed++, -2, 2);
    const Tensor k = randomTensor(DType::Float64, c.k, seed++, -2, 2);
    const Tensor v = randomTensor(DType::Float64, c.v, seed++);
    const Tensor scale = scalar64(0.35);
    testing::expectFloat32MatchesFloat64("ScaledDotProductAttention", {q, k, v, scale}, causal(c.isCausal), 2, 1e-5);
    const std::vector<Tensor> forward =
        runOpEagerly("ScaledDotProductAttention", {&q, &k, &v, &scale}, causal(c.isCausal), 2);
    Shape yShape = c.q;
    yShape.back() = c.v.back();
    const Tensor dy = randomTensor(DType::Float64, yShape, seed++);
    testing::expectFloat32MatchesFloat64("ScaledDotProductAttentionGrad", {dy, q, k, v, forward[0], forward[1], scale},
                                         causal(c.isCausal), 3, 1e-5);
  }
}

TEST(AttentionGradientsTest, BadOperandsAreNamed) {
  const Tensor q = randomTensor(DType::Float64, {1, 4, 3}, 1);
  const Tensor k = randomTensor(DType::Float64, {1, 5, 3}, 2);
  const Tensor v = randomTensor(DType::Float64, {1, 5, 2}, 3);
  const Tensor scale = scalar64(1.0);
  EXPECT_THROW(runOpEagerly("ScaledDotProductAttention", {&q, &k, &v, &scale}, causal(true), 1), Error)
      << "causal attention is square";
  const Tensor wrongWidth = randomTensor(DType::Float64, {1, 5, 4}, 4);
  EXPECT_THROW(runOpEagerly("ScaledDotProductAttention", {&q, &wrongWidth, &v, &scale}, causal(false), 1), Error);
  const Tensor floatScale = Tensor::zeros(DType::Float32, {});
  EXPECT_THROW(runOpEagerly("ScaledDotProductAttention", {&q, &k, &v, &floatScale}, causal(false), 1), Error);
}

}  // namespace attention_gradients_test
}  // namespace strata
