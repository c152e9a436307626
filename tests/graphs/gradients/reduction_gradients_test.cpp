// Gradient rules of the reductions, Softmax/LogSoftmax, LayerNormalization and the losses
// (graphs/src/gradients/reduction_gradients.cpp) against finite differences in float64 (tight) and float32, and the
// float32 paths of their gradient kernels (core/backend/cpu/grad_reduction_ops.cpp) against float64.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/dtype.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "support/tensor_values.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;
using testing::expectFloat32MatchesFloat64;
using testing::expectGradientsMatchFiniteDifferences;
using testing::GradientCheckOptions;
using testing::randomTensor;

Tensor random64(const Shape& shape, unsigned seed, double low = -1.0, double high = 1.0) {
  return randomTensor(DType::Float64, shape, seed, low, high);
}

Tensor random32(const Shape& shape, unsigned seed, double low = -1.0, double high = 1.0) {
  return randomTensor(DType::Float32, shape, seed, low, high);
}

Tensor int64s(const Ints& values) {
  return makeTensor<std::int64_t>({static_cast<std::int64_t>(values.size())}, values);
}

Attributes attrs(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values) {
    a.set(name, value);
  }
  return a;
}

GradientCheckOptions outputs(std::size_t count) {
  GradientCheckOptions options;
  options.outputCount = count;
  return options;
}

// ---- Reduce* ----

// float32 values on a shuffled grid over [low, high): at least (high - low) / n apart and off the grid's centre,
// so float32 finite differences (step 1e-2) neither straddle a max tie nor |x| at 0.
Tensor spread32(const Shape& shape, double low, double high) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<double>((i * 7) % n);
    t.data<float>()[i] = static_cast<float>(low + (high - low) * (k + 0.25) / static_cast<double>(n));
  }
  return t;
}

struct ReduceCase {
  Ints axes;  // empty: the default (all axes)
  std::int64_t keepdims;
};

std::vector<ReduceCase> reduceCases() {
  return {{{1}, 1}, {{1}, 0}, {{0, 2}, 1}, {{-1, 0}, 0}, {{}, 1}, {{}, 0}, {{0, 1, 2}, 0}};
}

// The reductions taking axes as an input (ReduceSum from opset 13, all of them from 18) and as an attribute
// (opset 13-17 for all but ReduceSum); the CPU kernels accept both.
void checkReduce(const std::string& op, double low, double high, unsigned seed) {
  for (const ReduceCase& c : reduceCases()) {
    SCOPED_TRACE(op + " axes " + std::to_string(c.axes.size()) + " keepdims " + std::to_string(c.keepdims));
    const Tensor x = random64({2, 3, 4}, seed++, low, high);
    const Attributes keep = attrs({{"keepdims", c.keepdims}});
    if (c.axes.empty()) {
      expectGradientsMatchFiniteDifferences(op, {x}, keep);
      continue;
    }
    expectGradientsMatchFiniteDifferences(op, {x, int64s(c.axes)}, keep);
    expectGradientsMatchFiniteDifferences(op, {x}, attrs({{"keepdims", c.keepdims}, {"axes", c.axes}}));
  }
  SCOPED_TRACE(op + " float32");
  expectGradientsMatchFiniteDifferences(op, {spread32({3, 5}, low, high), int64s({1})},
                                        attrs({{"keepdims", std::int64_t{0}}}));
}

TEST(ReductionGradientsTest, ReduceSum) {
  checkReduce("ReduceSum", -1, 1, 1);
}
TEST(ReductionGradientsTest, ReduceMean) {
  checkReduce("ReduceMean", -1, 1, 20);
}
TEST(ReductionGradientsTest, ReduceSumSquare) {
  checkReduce("ReduceSumSquare", -1, 1, 40);
}
TEST(ReductionGradientsTest, ReduceL2) {
  checkReduce("ReduceL2", -1, 1, 60);
}
TEST(ReductionGradientsTest, ReduceL1) {
  checkReduce("ReduceL1", -1, 1, 80);
}
TEST(ReductionGradientsTest, ReduceLogSum) {
  checkReduce("ReduceLogSum", 0.5, 2, 100);
}
TEST(ReductionGradientsTest, ReduceLogSumExp) {
  checkReduce("ReduceLogSumExp", -3, 3, 120);
}
// Random inputs have no ties (probability zero), so the split-ties rule is the arg-max gradient.
TEST(ReductionGradientsTest, ReduceMax) {
  checkReduce("ReduceMax", -1, 1, 140);
}
TEST(ReductionGradientsTest, ReduceMin) {
  checkReduce("ReduceMin", -1, 1, 160);
}

TEST(ReductionGradientsTest, ReduceMaxTwoWayTiesMatchCentralDifferences) {
  // Ties share the gradient equally; for a pair of ties that is exactly the central difference.
  const Tensor x = makeTensor<double>({2, 3}, {0.5, 0.5, -0.2, 0.1, 0.3, 0.3});
  const Attributes keep = attrs({{"keepdims", std::int64_t{0}}});
  expectGradientsMatchFiniteDifferences("ReduceMax", {x, int64s({1})}, keep);
  const Tensor y = makeTensor<double>({2, 3}, {-0.5, -0.5, 0.2, 0.1, -0.3, -0.3});
  expectGradientsMatchFiniteDifferences("ReduceMin", {y, int64s({1})}, keep);
}

TEST(ReductionGradientsTest, ReduceNoopWithEmptyAxes) {
  const Attributes noop = attrs({{"noop_with_empty_axes", std::int64_t{1}}});
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceSumSquare", "ReduceL2"}) {
    SCOPED_TRACE(op);
    expectGradientsMatchFiniteDifferences(op, {random64({2, 3}, 180), int64s({})}, noop);
  }
}

// ---- Softmax / LogSoftmax ----

TEST(ReductionGradientsTest, SoftmaxAndLogSoftmax) {
  unsigned seed = 200;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (std::int64_t axis : {-1, 1, 0}) {
      SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis));
      expectGradientsMatchFiniteDifferences(op, {random64({2, 3, 4}, seed++, -2, 2)}, attrs({{"axis", axis}}));
    }
    SCOPED_TRACE(std::string(op) + " float32");
    expectGradientsMatchFiniteDifferences(op, {random32({3, 5}, seed++, -2, 2)});
    expectGradientsMatchFiniteDifferences(op, {random32({2, 4, 3}, seed++, -2, 2)}, attrs({{"axis", std::int64_t{1}}}));
  }
}

TEST(ReductionGradientsTest, SoftmaxGradKernelsFloat32MatchFloat64) {
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
    const bool log = std::string(op) == "LogSoftmaxGrad";
    for (std::int64_t axis : {-1, 1}) {
      const Tensor x = random64({64, 37, 29}, 210, -3, 3);
      const Tensor y = runOpEagerly(log ? "LogSoftmax" : "Softmax", {&x}, attrs({{"axis", axis}})).at(0);
      expectFloat32MatchesFloat64(op, {random64({64, 37, 29}, 211), y}, attrs({{"axis", axis}}));
    }
  }
}

// ---- LayerNormalization ----

TEST(ReductionGradientsTest, LayerNormalizationLastAxis) {
  const Tensor x = random64({3, 5}, 300, -2, 2);
  expectGradientsMatchFiniteDifferences("LayerNormalization", {x, random64({5}, 301, 0.5, 1.5), random64({5}, 302)});
  // Without B.
  expectGradientsMatchFiniteDifferences("LayerNormalization", {x, random64({5}, 303, 0.5, 1.5)});
}

TEST(ReductionGradientsTest, LayerNormalizationInnerAxisAndBroadcastScale) {
  // axis 1 of [2, 3, 4]: normalised shape [3, 4]; Scale [4] and B [1, 4] broadcast to it.
  const Tensor x = random64({2, 3, 4}, 310, -2, 2);
  const Attributes a = attrs({{"axis", std::int64_t{1}}, {"epsilon", 1e-3f}});
  expectGradientsMatchFiniteDifferences("LayerNormalization", {x, random64({3, 4}, 311), random64({3, 4}, 312)}, a);
  expectGradientsMatchFiniteDifferences("LayerNormalization", {x, random64({4}, 313), random64({1, 4}, 314)}, a);
}

TEST(ReductionGradientsTest, LayerNormalizationStatisticOutputs) {
  // Mean and InvStdDev exposed and projected by the loss too (double statistics for a tight check). float
  // statistics of a float64 X cannot be checked here: the harness adds the projected outputs' losses, which must
  // share a dtype.
  const Tensor x = random64({4, 6}, 320, -2, 2);
  const std::vector<Tensor> inputs{x, random64({6}, 321, 0.5, 1.5), random64({6}, 322)};
  expectGradientsMatchFiniteDifferences("LayerNormalization", inputs,
                                        attrs({{"stash_type", std::int64_t{dtypeToOnnx(DType::Float64)}}}), outputs(3));
  // Only Y (the statistics are not exposed, so the kernel recomputes them).
  expectGradientsMatchFiniteDifferences("LayerNormalization", inputs,
                                        attrs({{"stash_type", std::int64_t{dtypeToOnnx(DType::Float64)}}}));
}

TEST(ReductionGradientsTest, LayerNormalizationFloat32) {
  expectGradientsMatchFiniteDifferences(
      "LayerNormalization", {random32({3, 8}, 330, -2, 2), random32({8}, 331, 0.5, 1.5), random32({8}, 332)});
  expectGradientsMatchFiniteDifferences(
      "LayerNormalization", {random32({3, 8}, 333, -2, 2), random32({8}, 334, 0.5, 1.5), random32({8}, 335)}, {},
      outputs(3));
}

TEST(ReductionGradientsTest, LayerNormalizationGradKernelFloat32MatchesFloat64) {
  const Tensor x = random64({300, 96}, 340, -2, 2);
  const Tensor dy = random64({300, 96}, 341);
  const Tensor scale = random64({96}, 342, 0.5, 1.5);
  const Attributes a = attrs({{"axis", std::int64_t{-1}}, {"epsilon", 1e-5f}});
  // Recomputed statistics, all three outputs.
  expectFloat32MatchesFloat64("LayerNormalizationGrad", {dy, x, scale}, a, 3, 1e-4);
  // Saved statistics (from the forward, in the stash dtype float32) plus statistic gradients.
  const Tensor b = random64({96}, 343);
  const std::vector<Tensor> forward = runOpEagerly("LayerNormalization", {&x, &scale, &b}, a, 3);
  const Tensor mean32 = forward[1];
  const Tensor invStd32 = forward[2];
  const Tensor dMean = random32({300, 1}, 344);
  const Tensor dInvStd = random32({300, 1}, 345);
  expectFloat32MatchesFloat64("LayerNormalizationGrad", {dy, x, scale, mean32, invStd32, dMean, dInvStd}, a, 3, 1e-4);
}

// ---- Losses ----

struct LossCase {
  Shape scores;  // [N, C] or [N, C, D]
  std::vector<std::int64_t> labels;
  const char* reduction;
  bool weights;
  bool ignore;  // ignore_index = 1 (some labels are 1)
};

std::vector<LossCase> lossCases() {
  std::vector<LossCase> cases;
  for (const char* reduction : {"none", "sum", "mean"}) {
    for (const bool weights : {false, true}) {
      for (const bool ignore : {false, true}) {
        cases.push_back({{4, 3}, {0, 1, 2, 1}, reduction, weights, ignore});
        cases.push_back({{2, 3, 2}, {2, 1, 0, 2}, reduction, weights, ignore});
      }
    }
  }
  return cases;
}

Attributes lossAttrs(const LossCase& c) {
  Attributes a;
  a.set("reduction", std::string(c.reduction));
  if (c.ignore) {
    a.set("ignore_index", std::int64_t{1});
  }
  return a;
}

std::vector<Tensor> lossInputs(const LossCase& c, Tensor scores) {
  Shape labelShape{c.scores[0]};
  labelShape.insert(labelShape.end(), c.scores.begin() + 2, c.scores.end());
  std::vector<Tensor> inputs{std::move(scores), makeTensor<std::int64_t>(labelShape, c.labels)};
  if (c.weights) {
    inputs.push_back(inputs[0].dtype() == DType::Float32 ? random32({c.scores[1]}, 401, 0.5, 2)
                                                         : random64({c.scores[1]}, 401, 0.5, 2));
  }
  return inputs;
}

TEST(ReductionGradientsTest, SoftmaxCrossEntropyLoss) {
  unsigned seed = 410;
  for (const LossCase& c : lossCases()) {
    SCOPED_TRACE(std::string(c.reduction) + " rank " + std::to_string(c.scores.size()) + (c.weights ? " weights" : "") +
                 (c.ignore ? " ignore" : ""));
    const std::vector<Tensor> inputs = lossInputs(c, random64(c.scores, seed++, -2, 2));
    // Only the loss (the kernel recomputes the log-probabilities), and loss plus log_prob (both gradients flow).
    expectGradientsMatchFiniteDifferences("SoftmaxCrossEntropyLoss", inputs, lossAttrs(c), outputs(1));
    expectGradientsMatchFiniteDifferences("SoftmaxCrossEntropyLoss", inputs, lossAttrs(c), outputs(2));
  }
}

TEST(ReductionGradientsTest, NegativeLogLikelihoodLoss) {
  unsigned seed = 450;
  for (const LossCase& c : lossCases()) {
    SCOPED_TRACE(std::string(c.reduction) + " rank " + std::to_string(c.scores.size()) + (c.weights ? " weights" : "") +
                 (c.ignore ? " ignore" : ""));
    expectGradientsMatchFiniteDifferences("NegativeLogLikelihoodLoss", lossInputs(c, random64(c.scores, seed++, -2, 0)),
                                          lossAttrs(c));
  }
}

TEST(ReductionGradientsTest, LossesFloat32AndInt32Labels) {
  const LossCase c{{4, 3}, {0, 1, 2, 1}, "mean", true, true};
  std::vector<Tensor> inputs = lossInputs(c, random32({4, 3}, 480, -2, 2));
  inputs[1] = makeTensor<std::int32_t>({4}, {0, 1, 2, 1});
  expectGradientsMatchFiniteDifferences("SoftmaxCrossEntropyLoss", inputs, lossAttrs(c), outputs(2));
  expectGradientsMatchFiniteDifferences("NegativeLogLikelihoodLoss", inputs, lossAttrs(c));
  const LossCase none{{2, 3, 2}, {2, 1, 0, 2}, "none", false, false};
  expectGradientsMatchFiniteDifferences("SoftmaxCrossEntropyLoss", lossInputs(none, random32({2, 3, 2}, 481, -2, 2)),
                                        lossAttrs(none));
}

TEST(ReductionGradientsTest, LossGradKernelsFloat32MatchFloat64) {
  // [N, C, D] with every reduction, weights and an ignored class.
  const Shape shape{16, 10, 33};
  std::vector<std::int64_t> labels(16 * 33);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<std::int64_t>((i * 7) % 10);
  }
  const Tensor labelTensor = makeTensor<std::int64_t>({16, 33}, labels);
  const Tensor weights = random64({10}, 490, 0.5, 2);
  const Tensor scores = random64(shape, 491, -3, 3);
  const Tensor logProb = runOpEagerly("LogSoftmax", {&scores}, attrs({{"axis", std::int64_t{1}}})).at(0);
  for (const char* reduction : {"none", "sum", "mean"}) {
    const Tensor dLoss = std::string(reduction) == "none" ? random64({16, 33}, 492) : Tensor::scalar(0.75);
    const Attributes a = attrs({{"reduction", std::string(reduction)}, {"ignore_index", std::int64_t{3}}});
    expectFloat32MatchesFloat64("SoftmaxCrossEntropyLossGrad", {dLoss, logProb, labelTensor, weights}, a);
    Attributes fromScores = a;
    fromScores.set("from_scores", std::int64_t{1});
    expectFloat32MatchesFloat64("SoftmaxCrossEntropyLossGrad", {dLoss, scores, labelTensor, weights}, fromScores);
    Attributes nll = a;
    nll.set("classes", std::int64_t{10});
    expectFloat32MatchesFloat64("NegativeLogLikelihoodLossGrad", {dLoss, labelTensor, weights}, nll);
  }
}

TEST(ReductionGradientsTest, LossGradRejectsOutOfRangeLabels) {
  const Tensor dLoss = Tensor::scalar(1.0f);
  const Tensor labels = makeTensor<std::int64_t>({2}, {0, 5});
  EXPECT_THROW(runOpEagerly("NegativeLogLikelihoodLossGrad", {&dLoss, &labels}, attrs({{"classes", std::int64_t{3}}})),
               Error);
}

}  // namespace
}  // namespace strata
