// Gradient rules of the elementwise ops (graphs/src/gradients/elementwise_gradients.cpp) against finite
// differences, in float64 (tight) and float32, and the float32 paths of their gradient kernels
// (core/backend/cpu/grad_elementwise_ops.cpp) against float64.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/dtype.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "support/tensor_values.h"
#include "support/test_device.h"

namespace strata {
namespace {

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

Attributes attrs(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values) {
    a.set(name, value);
  }
  return a;
}

// Moves values within `margin` of any of `points` to that distance, so finite differences do not straddle a kink.
Tensor awayFrom(Tensor t, const std::vector<double>& points, double margin = 0.05) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double v = t.dtype() == DType::Float32 ? t.data<float>()[i] : t.data<double>()[i];
    for (const double p : points) {
      if (std::fabs(v - p) < margin) {
        v = v < p ? p - margin : p + margin;
      }
    }
    if (t.dtype() == DType::Float32) {
      t.data<float>()[i] = static_cast<float>(v);
    } else {
      t.data<double>()[i] = v;
    }
  }
  return t;
}

// ---- Unary activations ----

struct UnaryCase {
  const char* op;
  const char* gradOp;  // the fused gradient kernel, or nullptr when the rule composes forward ops
  Attributes attrs;
  double low;
  double high;
  std::vector<double> kinks = {};  // where the derivative jumps; inputs are kept away from them
};

// Inputs are moved away from the kinks (float32 checks step by 1e-2); Sqrt, Log and Reciprocal stay away from 0.
std::vector<UnaryCase> unaryCases() {
  return {
      {"Relu", "ReluGrad", {}, -2, 2, {0}},
      {"LeakyRelu", "LeakyReluGrad", attrs({{"alpha", 0.1f}}), -2, 2, {0}},
      {"ThresholdedRelu", "ThresholdedReluGrad", attrs({{"alpha", 0.5f}}), -2, 2, {0.5}},
      {"Sigmoid", "SigmoidGrad", {}, -4, 4},
      {"Tanh", "TanhGrad", {}, -3, 3},
      {"HardSigmoid", "HardSigmoidGrad", attrs({{"alpha", 0.3f}, {"beta", 0.4f}}), -4, 4, {-4.0 / 3.0, 2.0}},
      {"HardSwish", "HardSwishGrad", {}, -5, 5, {-3, 3}},
      {"Erf", "ErfGrad", {}, -2, 2},
      {"Gelu", "GeluGrad", {}, -3, 3},
      {"Gelu", "GeluGrad", attrs({{"approximate", std::string("tanh")}}), -3, 3},
      {"Silu", "SiluGrad", {}, -4, 4},
      {"Sqrt", "SqrtGrad", {}, 0.5, 3},
      {"Reciprocal", "ReciprocalGrad", {}, 0.5, 2},
      {"Neg", nullptr, {}, -2, 2},
      {"Exp", nullptr, {}, -2, 2},
      {"Log", nullptr, {}, 0.5, 3},
      {"Abs", "AbsGrad", {}, -2, 2, {0}},
      {"Identity", nullptr, {}, -2, 2},
      {"Softplus", "SoftplusGrad", {}, -4, 4},
      {"Softsign", "SoftsignGrad", {}, -3, 3},
      {"Elu", "EluGrad", attrs({{"alpha", 0.7f}}), -2, 2, {0}},
      {"Celu", "CeluGrad", attrs({{"alpha", 1.5f}}), -2, 2, {0}},
      {"Selu", "SeluGrad", {}, -2, 2, {0}},
      {"Mish", "MishGrad", {}, -4, 4},
  };
}

TEST(ElementwiseGradientsTest, UnaryActivationsFloat64) {
  unsigned seed = 1;
  for (const UnaryCase& c : unaryCases()) {
    SCOPED_TRACE(std::string(c.op) + " " + std::to_string(seed));
    expectGradientsMatchFiniteDifferences(c.op, {awayFrom(random64({3, 5}, seed++, c.low, c.high), c.kinks)}, c.attrs);
  }
}

TEST(ElementwiseGradientsTest, UnaryActivationsFloat32) {
  unsigned seed = 100;
  for (const UnaryCase& c : unaryCases()) {
    SCOPED_TRACE(std::string(c.op) + " " + std::to_string(seed));
    expectGradientsMatchFiniteDifferences(c.op, {awayFrom(random32({4, 6}, seed++, c.low, c.high), c.kinks)}, c.attrs);
  }
}

// The fused gradient kernels' float32 path against float64, on a large tensor (parallel chunks).
TEST(ElementwiseGradientsTest, UnaryGradKernelsFloat32MatchFloat64) {
  unsigned seed = 200;
  for (const UnaryCase& c : unaryCases()) {
    if (c.gradOp == nullptr) {
      continue;
    }
    const Tensor dy = random64({257, 129}, seed++);
    const Tensor z = random64({257, 129}, seed++, c.low, c.high);
    expectFloat32MatchesFloat64(c.gradOp, {dy, z}, c.attrs);
  }
}

TEST(ElementwiseGradientsTest, ZeroGradientOps) {
  // Values away from the discontinuities (integers for Ceil/Floor, halves for Round, 0 for Sign).
  const Tensor x = makeTensor<double>({2, 3}, {-1.7, -0.3, 0.2, 0.8, 1.3, 2.6});
  for (const char* op : {"Sign", "Ceil", "Floor", "Round"}) {
    SCOPED_TRACE(op);
    expectGradientsMatchFiniteDifferences(op, {x});
  }
}

// ---- Clip ----

TEST(ElementwiseGradientsTest, ClipBoundsAsInputs) {
  const Tensor x = awayFrom(random64({4, 5}, 11, -2, 2), {-0.5, 0.7, 0.3, -0.2});
  expectGradientsMatchFiniteDifferences("Clip", {x, Tensor::scalar(-0.5), Tensor::scalar(0.7)});
  // Only a max (min absent).
  expectGradientsMatchFiniteDifferences("Clip", {x, Tensor(), Tensor::scalar(0.3)});
  // Only a min.
  expectGradientsMatchFiniteDifferences("Clip", {x, Tensor::scalar(-0.2)});
  expectGradientsMatchFiniteDifferences(
      "Clip", {awayFrom(random32({4, 5}, 12, -2, 2), {-0.5, 0.7}), Tensor::scalar(-0.5f), Tensor::scalar(0.7f)});
}

TEST(ElementwiseGradientsTest, ClipBoundsAsAttributes) {
  expectGradientsMatchFiniteDifferences("Clip", {awayFrom(random64({3, 4}, 13, -2, 2), {-0.4, 0.9})},
                                        attrs({{"min", -0.4f}, {"max", 0.9f}}));
}

TEST(ElementwiseGradientsTest, ClipGradKernelFloat32MatchesFloat64) {
  expectFloat32MatchesFloat64(
      "ClipGrad", {random64({300, 70}, 14), random64({300, 70}, 15, -2, 2), Tensor::scalar(-0.5), Tensor::scalar(0.7)});
}

// ---- Dropout ----

TEST(ElementwiseGradientsTest, DropoutTraining) {
  // The mask is a function of (seed, step), so repeated forward runs of the check see the same mask.
  const Tensor x = random64({8, 16}, 21);
  GradientCheckOptions options;
  options.outputCount = 1;
  expectGradientsMatchFiniteDifferences("Dropout", {x, Tensor::scalar(0.3), makeTensor<bool>({}, {true})},
                                        attrs({{"seed", std::int64_t{7}}}), options);
  // ratio from the default (0.5), training from the executor.
  expectGradientsMatchFiniteDifferences("Dropout", {x}, attrs({{"seed", std::int64_t{3}}}), options);
  // The mask output is also projected by the loss (it is bool, so it carries no gradient).
  options.outputCount = 2;
  expectGradientsMatchFiniteDifferences("Dropout", {x, Tensor::scalar(0.6)}, attrs({{"seed", std::int64_t{5}}}),
                                        options);
}

TEST(ElementwiseGradientsTest, DropoutIdentityCases) {
  const Tensor x = random64({4, 8}, 22);
  // training_mode false, or ratio 0: an identity.
  expectGradientsMatchFiniteDifferences("Dropout", {x, Tensor::scalar(0.5), makeTensor<bool>({}, {false})});
  expectGradientsMatchFiniteDifferences("Dropout", {x, Tensor::scalar(0.0)});
}

TEST(ElementwiseGradientsTest, DropoutGradKernel) {
  const Tensor dy = makeTensor<float>({4}, {1.0f, 2.0f, 3.0f, 4.0f});
  const Tensor mask = makeTensor<bool>({4}, {true, false, true, false});
  const Tensor ratio = Tensor::scalar(0.75f);
  const Tensor out = runOpEagerly("DropoutGrad", {&dy, &mask, &ratio}, {}, 1, true).at(0);
  EXPECT_FLOAT_EQ(out.data<float>()[0], 4.0f);
  EXPECT_FLOAT_EQ(out.data<float>()[1], 0.0f);
  EXPECT_FLOAT_EQ(out.data<float>()[2], 12.0f);
  EXPECT_FLOAT_EQ(out.data<float>()[3], 0.0f);
  const Tensor notTraining = makeTensor<bool>({}, {false});
  const Tensor same = runOpEagerly("DropoutGrad", {&dy, &mask, &ratio, &notTraining}, {}, 1, true).at(0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(same.data<float>()[i], dy.data<float>()[i]);
  }
}

// ---- Cast ----

TEST(ElementwiseGradientsTest, Cast) {
  // float32 -> float64: the gradient is cast back to float32.
  expectGradientsMatchFiniteDifferences("Cast", {random32({3, 4}, 31)},
                                        attrs({{"to", std::int64_t{dtypeToOnnx(DType::Float64)}}}));
  // float64 -> float64 (an identity).
  expectGradientsMatchFiniteDifferences("Cast", {random64({3, 4}, 32)},
                                        attrs({{"to", std::int64_t{dtypeToOnnx(DType::Float64)}}}));
  // float64 -> float32: the loss is float32, so only float32-level accuracy is possible.
  GradientCheckOptions loose;
  loose.eps = 1e-2;
  loose.rtol = 1e-3;
  loose.atol = 1e-4;
  expectGradientsMatchFiniteDifferences("Cast", {random64({3, 4}, 33)},
                                        attrs({{"to", std::int64_t{dtypeToOnnx(DType::Float32)}}}), loose);
}

// CastLike: the first input's gradient as Cast's; the second only lends its dtype (non-differentiable).
TEST(ElementwiseGradientsTest, CastLike) {
  expectGradientsMatchFiniteDifferences("CastLike", {random32({3, 4}, 34), random64({2}, 35)});
  expectGradientsMatchFiniteDifferences("CastLike", {random64({3, 4}, 36), random64({1}, 37)});
}

// ---- Broadcasting binary arithmetic ----

struct ShapePair {
  Shape a;
  Shape b;
};

// Same shapes, rank differences, size-1 dims on either side, both sides broadcast, and scalars.
std::vector<ShapePair> broadcastCases() {
  return {
      {{2, 3}, {2, 3}},       {{2, 3, 4}, {4}}, {{4}, {2, 3, 4}}, {{2, 1, 4}, {3, 1}},
      {{1, 3, 1}, {2, 1, 4}}, {{2, 3}, {}},     {{}, {2, 3}},     {{2, 3, 4}, {2, 1, 1}},
  };
}

TEST(ElementwiseGradientsTest, BinaryArithmeticBroadcastingFloat64) {
  unsigned seed = 40;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const ShapePair& shapes : broadcastCases()) {
      SCOPED_TRACE(std::string(op) + " " + shapeToString(shapes.a) + " " + shapeToString(shapes.b));
      const Tensor a = random64(shapes.a, seed++);
      // Divisors away from 0.
      const Tensor b = std::string(op) == "Div" ? random64(shapes.b, seed++, 0.5, 2.0) : random64(shapes.b, seed++);
      expectGradientsMatchFiniteDifferences(op, {a, b});
    }
  }
}

// Note [Fused ReLU] (graphs/relu_fusion.h): an Add with fused_relu is Relu(Add); its rule runs ReluGrad first.
TEST(ElementwiseGradientsTest, AddWithFusedReluBroadcasting) {
  if (testing::testDevice().device.type != DeviceType::CPU) {
    GTEST_SKIP() << "fused_relu is a CPU plan's attribute: CUDA plans keep the Relu node";
  }
  unsigned seed = 50;
  const Attributes fused = attrs({{"fused_relu", std::int64_t{1}}});
  for (const ShapePair& shapes : broadcastCases()) {
    SCOPED_TRACE(shapeToString(shapes.a) + " " + shapeToString(shapes.b));
    expectGradientsMatchFiniteDifferences("Add", {random64(shapes.a, seed++), random64(shapes.b, seed++)}, fused);
  }
}

TEST(ElementwiseGradientsTest, BinaryArithmeticFloat32) {
  unsigned seed = 60;
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    expectGradientsMatchFiniteDifferences(op, {random32({2, 3, 4}, seed++), random32({3, 1}, seed++, 0.5, 2.0)});
  }
}

TEST(ElementwiseGradientsTest, DivNegativeDivisor) {
  expectGradientsMatchFiniteDifferences("Div", {random64({3, 4}, 70), random64({4}, 71, -2.0, -0.5)});
}

TEST(ElementwiseGradientsTest, OnlyOneSideDifferentiated) {
  GradientCheckOptions options;
  options.wrt = {1};
  expectGradientsMatchFiniteDifferences("Mul", {random64({2, 3}, 72), random64({3}, 73)}, {}, options);
  options.wrt = {0};
  expectGradientsMatchFiniteDifferences("Div", {random64({2, 3}, 74), random64({1, 3}, 75, 0.5, 2)}, {}, options);
}

TEST(ElementwiseGradientsTest, PowBothInputs) {
  unsigned seed = 80;
  for (const ShapePair& shapes : broadcastCases()) {
    SCOPED_TRACE(shapeToString(shapes.a) + " " + shapeToString(shapes.b));
    // Positive bases, so log(A) is defined.
    expectGradientsMatchFiniteDifferences(
        "Pow", {random64(shapes.a, seed, 0.5, 2.0), random64(shapes.b, seed + 1, -1.5, 2.5)});
    seed += 2;
  }
  expectGradientsMatchFiniteDifferences("Pow", {random32({3, 4}, 90, 0.5, 2.0), random32({4}, 91, -1.5, 2.5)});
}

TEST(ElementwiseGradientsTest, PowConstantExponents) {
  GradientCheckOptions options;
  options.wrt = {0};
  // x ** 2 (the fast path), a negative base with an integer-valued float exponent, and an int64 exponent.
  expectGradientsMatchFiniteDifferences("Pow", {random64({3, 4}, 92), Tensor::scalar(2.0)}, {}, options);
  expectGradientsMatchFiniteDifferences("Pow", {random64({3, 4}, 93, -2, 2), Tensor::scalar(3.0)}, {}, options);
  expectGradientsMatchFiniteDifferences(
      "Pow", {random64({3, 4}, 94, -2, 2), makeTensor<std::int64_t>({4}, {1, 2, 3, 0})}, {}, options);
}

TEST(ElementwiseGradientsTest, BroadcastGradKernelsFloat32MatchFloat64) {
  const Tensor dy = random64({64, 33, 17}, 95);
  expectFloat32MatchesFloat64("DivGradDivisor", {dy, random64({64, 33, 17}, 96), random64({33, 1}, 97, 0.5, 2)});
  expectFloat32MatchesFloat64("PowGradBase", {dy, random64({64, 33, 17}, 98, 0.5, 2), random64({17}, 99, -1, 2)});
  expectFloat32MatchesFloat64("PowGradBase", {dy, random64({64, 33, 17}, 100, -2, 2), Tensor::scalar(2.0)});
  expectFloat32MatchesFloat64("PowGradExponent",
                              {dy, random64({1, 33, 1}, 101, 0.5, 2), random64({64, 33, 17}, 102, 0.5, 2)});
}

// ---- Where ----

TEST(ElementwiseGradientsTest, WhereBroadcasting) {
  const Tensor cond = makeTensor<bool>({2, 1, 4}, {true, false, false, true, false, true, true, false});
  expectGradientsMatchFiniteDifferences("Where", {cond, random64({3, 1}, 110), random64({2, 3, 4}, 111)});
  expectGradientsMatchFiniteDifferences("Where", {cond, random64({2, 3, 4}, 112), random64({}, 113)});
  const Tensor full = makeTensor<bool>({2, 3}, {true, false, true, true, false, false});
  expectGradientsMatchFiniteDifferences("Where", {full, random32({2, 3}, 114), random32({3}, 115)});
}

// ---- Variadic Min / Max / Sum / Mean ----

TEST(ElementwiseGradientsTest, VariadicBroadcasting) {
  unsigned seed = 120;
  for (const char* op : {"Min", "Max", "Sum", "Mean"}) {
    SCOPED_TRACE(op);
    // Random inputs: ties have probability zero.
    expectGradientsMatchFiniteDifferences(op, {random64({2, 3, 4}, seed), random64({3, 1}, seed + 1)});
    expectGradientsMatchFiniteDifferences(
        op, {random64({1, 3, 1}, seed + 2), random64({2, 1, 4}, seed + 3), random64({4}, seed + 4)});
    expectGradientsMatchFiniteDifferences(op, {random64({2, 3}, seed + 5)});
    // float32 steps by 1e-2: inputs at least 0.1 apart.
    expectGradientsMatchFiniteDifferences(op, {makeTensor<float>({2, 3}, {0.5f, -0.3f, 0.9f, -0.8f, 0.2f, 0.0f}),
                                               makeTensor<float>({3}, {0.1f, 0.4f, -0.5f})});
    seed += 8;
  }
}

TEST(ElementwiseGradientsTest, MinMaxGradTiesShareTheGradient) {
  const Tensor dy = makeTensor<float>({3}, {1.0f, 2.0f, 3.0f});
  const Tensor a = makeTensor<float>({3}, {5.0f, 1.0f, 7.0f});
  const Tensor b = makeTensor<float>({3}, {5.0f, 4.0f, 7.0f});
  const Tensor c = makeTensor<float>({3}, {0.0f, 0.0f, 7.0f});
  const Tensor y = makeTensor<float>({3}, {5.0f, 4.0f, 7.0f});  // Max(a, b, c)
  const std::vector<std::vector<float>> expected{{0.5f, 0.0f, 1.0f}, {0.5f, 2.0f, 1.0f}, {0.0f, 0.0f, 1.0f}};
  for (std::int64_t index : {0, 1, 2}) {
    const Tensor grad = runOpEagerly("MinMaxGrad", {&dy, &y, &a, &b, &c}, attrs({{"index", index}})).at(0);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_FLOAT_EQ(grad.data<float>()[i], expected[static_cast<std::size_t>(index)][i])
          << "input " << index << " element " << i;
    }
  }
}

TEST(ElementwiseGradientsTest, MinMaxTwoWayTiesMatchCentralDifferences) {
  // With two tied inputs, the central difference is half the gradient to each: the split-ties rule.
  const Tensor a = makeTensor<double>({4}, {0.5, -0.2, 0.3, 0.9});
  const Tensor b = makeTensor<double>({4}, {0.5, 0.4, 0.3, -0.9});
  expectGradientsMatchFiniteDifferences("Max", {a, b});
  expectGradientsMatchFiniteDifferences("Min", {a, b});
}

TEST(ElementwiseGradientsTest, MinMaxGradKernelFloat32MatchesFloat64) {
  const Tensor x0 = random64({40, 1, 33}, 130);
  const Tensor x1 = random64({70, 1}, 131);
  Tensor y = Tensor::empty(DType::Float64, {40, 70, 33});
  // y = max(x0, x1) broadcast.
  for (std::int64_t i = 0; i < 40; ++i) {
    for (std::int64_t j = 0; j < 70; ++j) {
      for (std::int64_t k = 0; k < 33; ++k) {
        y.data<double>()[(i * 70 + j) * 33 + k] = std::max(x0.data<double>()[i * 33 + k], x1.data<double>()[j]);
      }
    }
  }
  // Rounding to float32 keeps max(x0, x1) == y exactly, so the masks agree.
  const Tensor dy = random64({40, 70, 33}, 132);
  expectFloat32MatchesFloat64("MinMaxGrad", {dy, y, x0, x1}, attrs({{"index", std::int64_t{0}}}));
  expectFloat32MatchesFloat64("MinMaxGrad", {dy, y, x0, x1}, attrs({{"index", std::int64_t{1}}}));
}

}  // namespace
}  // namespace strata
