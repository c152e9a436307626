// Gradient rules of Conv, ConvTranspose, pooling, BatchNormalization, InstanceNormalization, Gemm and MatMul
// (graphs/src/gradients/nn_gradients.cpp) against finite differences in float64, and their float32 gradient kernels
// (core/backend/cpu/grad_nn_*.cpp, oneDNN for Conv) against the float64 ones.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "support/test_device.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;
using testing::expectGradientsMatchFiniteDifferences;
using testing::GradientCheckOptions;
using testing::randomTensor;

Tensor random64(const Shape& shape, unsigned seed, double low = -1.0, double high = 1.0) {
  return randomTensor(DType::Float64, shape, seed, low, high);
}

Attributes attrs(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values)
    a.set(name, value);
  return a;
}

GradientCheckOptions wrt(std::vector<std::size_t> inputs) {
  GradientCheckOptions options;
  options.wrt = std::move(inputs);
  return options;
}

// oneDNN's float32 paths accumulate in another order than the float64 loops: 1e-4 of each output's scale.
void expectFloat32MatchesFloat64(const std::string& op, const std::vector<Tensor>& inputs64, const Attributes& a,
                                 std::size_t outputCount, double rtol = 1e-4) {
  testing::expectFloat32MatchesFloat64(op, inputs64, a, outputCount, rtol);
}

// ---- Conv: finite differences ----

TEST(NnGradientsTest, ConvWithBiasPadsStrides) {
  expectGradientsMatchFiniteDifferences("Conv",
                                        {random64({2, 3, 7, 6}, 1), random64({4, 3, 3, 3}, 2), random64({4}, 3)},
                                        attrs({{"pads", Ints{1, 0, 1, 2}}, {"strides", Ints{2, 1}}}));
}

TEST(NnGradientsTest, ConvGroupsDilations) {
  expectGradientsMatchFiniteDifferences(
      "Conv", {random64({2, 4, 8, 7}, 4), random64({6, 2, 2, 3}, 5), random64({6}, 6)},
      attrs({{"group", std::int64_t{2}}, {"dilations", Ints{2, 1}}, {"pads", Ints{1, 1, 0, 2}}}));
}

TEST(NnGradientsTest, ConvDepthwiseStrided) {
  expectGradientsMatchFiniteDifferences(
      "Conv", {random64({2, 3, 7, 7}, 7), random64({3, 1, 3, 3}, 8)},
      attrs({{"group", std::int64_t{3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
}

TEST(NnGradientsTest, ConvPointwiseAndAutoPad) {
  expectGradientsMatchFiniteDifferences("Conv", {random64({2, 5, 4, 3}, 9), random64({3, 5, 1, 1}, 10)});
  expectGradientsMatchFiniteDifferences("Conv", {random64({1, 2, 5, 6}, 11), random64({3, 2, 3, 2}, 12)},
                                        attrs({{"auto_pad", std::string("SAME_UPPER")}, {"strides", Ints{2, 2}}}));
}

TEST(NnGradientsTest, Conv1dAnd3d) {
  expectGradientsMatchFiniteDifferences("Conv", {random64({2, 3, 9}, 13), random64({2, 3, 3}, 14), random64({2}, 15)},
                                        attrs({{"pads", Ints{2, 1}}, {"strides", Ints{2}}, {"dilations", Ints{2}}}));
  expectGradientsMatchFiniteDifferences(
      "Conv", {random64({1, 2, 4, 5, 4}, 16), random64({3, 2, 2, 3, 2}, 17), random64({3}, 18)},
      attrs({{"pads", Ints{1, 0, 1, 0, 1, 0}}, {"strides", Ints{1, 2, 1}}}));
}

// Subsets of the inputs take the ConvGradInput, ConvGradWeight and ReduceSum paths instead of the fused ConvGrad.
TEST(NnGradientsTest, ConvPartialGradients) {
  const std::vector<Tensor> inputs{random64({2, 4, 6, 5}, 19), random64({4, 2, 3, 3}, 20), random64({4}, 21)};
  const Attributes a = attrs({{"group", std::int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{1, 2}}});
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({0}));
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({1}));
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({2}));
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({1, 2}));
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({0, 2}));
}

// ConvTranspose runs float32 only: the loose float32 tolerances of the harness.
TEST(NnGradientsTest, ConvTransposeFloat32) {
  expectGradientsMatchFiniteDifferences(
      "ConvTranspose",
      {randomTensor(DType::Float32, {1, 4, 3, 4}, 22), randomTensor(DType::Float32, {4, 1, 3, 3}, 23),
       randomTensor(DType::Float32, {2}, 24)},
      attrs({{"group", std::int64_t{2}},
             {"strides", Ints{2, 1}},
             {"pads", Ints{1, 0, 0, 1}},
             {"output_padding", Ints{1, 0}}}));
}

// ---- Pooling: finite differences (random inputs have no ties) ----

TEST(NnGradientsTest, MaxPoolPadsStridesCeil) {
  expectGradientsMatchFiniteDifferences(
      "MaxPool", {random64({2, 3, 7, 6}, 30)},
      attrs({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 1}}}));
  expectGradientsMatchFiniteDifferences(
      "MaxPool", {random64({1, 2, 6, 7}, 31)},
      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"ceil_mode", std::int64_t{1}}}));
  expectGradientsMatchFiniteDifferences(
      "MaxPool", {random64({1, 2, 8, 7}, 32)},
      attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}));
}

TEST(NnGradientsTest, MaxPool1dAnd3dAndGlobal) {
  expectGradientsMatchFiniteDifferences("MaxPool", {random64({2, 2, 9}, 33)},
                                        attrs({{"kernel_shape", Ints{3}}, {"strides", Ints{2}}, {"pads", Ints{1, 1}}}));
  expectGradientsMatchFiniteDifferences("MaxPool", {random64({1, 2, 4, 5, 4}, 34)},
                                        attrs({{"kernel_shape", Ints{2, 3, 2}}, {"strides", Ints{2, 1, 2}}}));
  expectGradientsMatchFiniteDifferences("GlobalMaxPool", {random64({2, 3, 4, 5}, 35)});
}

TEST(NnGradientsTest, AveragePoolPadsAndCeilMode) {
  for (std::int64_t includePad : {0, 1}) {
    for (std::int64_t ceil : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "count_include_pad " << includePad << " ceil_mode " << ceil);
      expectGradientsMatchFiniteDifferences("AveragePool", {random64({2, 2, 7, 6}, 40)},
                                            attrs({{"kernel_shape", Ints{3, 3}},
                                                   {"strides", Ints{2, 2}},
                                                   {"pads", Ints{1, 0, 1, 1}},
                                                   {"count_include_pad", includePad},
                                                   {"ceil_mode", ceil}}));
    }
  }
}

TEST(NnGradientsTest, AveragePool1dAnd3dAndGlobal) {
  expectGradientsMatchFiniteDifferences("AveragePool", {random64({2, 2, 9}, 41)},
                                        attrs({{"kernel_shape", Ints{2}}, {"strides", Ints{2}}}));
  expectGradientsMatchFiniteDifferences(
      "AveragePool", {random64({1, 2, 4, 5, 4}, 42)},
      attrs(
          {{"kernel_shape", Ints{2, 2, 2}}, {"pads", Ints{0, 1, 0, 1, 0, 1}}, {"count_include_pad", std::int64_t{1}}}));
  expectGradientsMatchFiniteDifferences("GlobalAveragePool", {random64({2, 3, 4, 5}, 43)});
  // One pixel per plane (ResNet's last pool at small inputs) and a window that is the whole map: the gradient
  // kernels' whole-map path.
  expectGradientsMatchFiniteDifferences("GlobalAveragePool", {random64({3, 4, 1, 1}, 44)});
  expectGradientsMatchFiniteDifferences("AveragePool", {random64({2, 3, 3, 4}, 45)},
                                        attrs({{"kernel_shape", Ints{3, 4}}}));
}

// ---- Batch / instance normalisation ----

TEST(NnGradientsTest, BatchNormTraining) {
  const Attributes a = attrs({{"training_mode", std::int64_t{1}}, {"epsilon", 1e-3f}});
  // Running statistics are inputs 3 and 4: non-differentiable; only Y is projected into the loss.
  expectGradientsMatchFiniteDifferences("BatchNormalization",
                                        {random64({3, 4, 3, 2}, 50), random64({4}, 51), random64({4}, 52),
                                         random64({4}, 53), random64({4}, 54, 0.5, 1.5)},
                                        a);
  expectGradientsMatchFiniteDifferences("BatchNormalization",
                                        {random64({5, 3}, 55, 2.0, 4.0), random64({3}, 56), random64({3}, 57),
                                         random64({3}, 58), random64({3}, 59, 0.5, 1.5)},
                                        a);
}

// Note [Fused ReLU]: the fused node's rule (BatchNormalizationGrad gated by the node's output), both modes.
TEST(NnGradientsTest, BatchNormWithFusedRelu) {
  if (testing::testDevice().device.type != DeviceType::CPU) {
    GTEST_SKIP() << "fused_relu is a CPU plan's attribute: CUDA plans keep the Relu node";
  }
  for (const std::int64_t training : {1, 0}) {
    SCOPED_TRACE(::testing::Message() << "training_mode " << training);
    expectGradientsMatchFiniteDifferences(
        "BatchNormalization",
        {random64({3, 4, 3, 2}, 65), random64({4}, 66), random64({4}, 67), random64({4}, 68),
         random64({4}, 69, 0.5, 1.5)},
        attrs({{"training_mode", training}, {"epsilon", 1e-3f}, {"fused_relu", std::int64_t{1}}}));
  }
}

// Note [Fused ReLU]: a Conv with fused_relu is Relu(Conv); its rule runs ReluGrad on its own output first.
TEST(NnGradientsTest, ConvWithFusedRelu) {
  if (testing::testDevice().device.type != DeviceType::CPU) {
    GTEST_SKIP() << "fused_relu is a CPU plan's attribute: CUDA plans keep the Relu node";
  }
  expectGradientsMatchFiniteDifferences("Conv",
                                        {random64({2, 3, 5, 4}, 90), random64({4, 3, 3, 3}, 91), random64({4}, 92)},
                                        attrs({{"pads", Ints{1, 1, 1, 1}}, {"fused_relu", std::int64_t{1}}}));
  expectGradientsMatchFiniteDifferences("Conv", {random64({2, 3, 5, 4}, 93), random64({4, 3, 1, 1}, 94)},
                                        attrs({{"strides", Ints{2, 2}}, {"fused_relu", std::int64_t{1}}}));
}

TEST(NnGradientsTest, BatchNormInference) {
  expectGradientsMatchFiniteDifferences("BatchNormalization",
                                        {random64({2, 3, 4, 3}, 60), random64({3}, 61), random64({3}, 62),
                                         random64({3}, 63), random64({3}, 64, 0.5, 1.5)},
                                        attrs({{"epsilon", 1e-3f}}));
}

// InstanceNormalization runs float32 only: the loose float32 tolerances of the harness.
TEST(NnGradientsTest, InstanceNormFloat32) {
  expectGradientsMatchFiniteDifferences("InstanceNormalization",
                                        {randomTensor(DType::Float32, {2, 3, 4, 5}, 65),
                                         randomTensor(DType::Float32, {3}, 66), randomTensor(DType::Float32, {3}, 67)},
                                        attrs({{"epsilon", 1e-3f}}));
}

// ---- Gemm and MatMul ----

TEST(NnGradientsTest, GemmTransposesAlphaBetaBroadcastC) {
  const std::int64_t m = 3, k = 4, n = 5;
  const std::vector<Shape> cShapes{{m, n}, {n}, {1, n}, {m, 1}, {}};
  unsigned seed = 70;
  for (std::int64_t ta : {0, 1}) {
    for (std::int64_t tb : {0, 1}) {
      for (std::size_t ci = 0; ci < cShapes.size(); ++ci) {
        SCOPED_TRACE(::testing::Message()
                     << "transA " << ta << " transB " << tb << " C " << shapeToString(cShapes[ci]));
        const Shape aShape = ta != 0 ? Shape{k, m} : Shape{m, k};
        const Shape bShape = tb != 0 ? Shape{n, k} : Shape{k, n};
        const bool unitScales = ci % 2 == 0;
        expectGradientsMatchFiniteDifferences(
            "Gemm", {random64(aShape, seed++), random64(bShape, seed++), random64(cShapes[ci], seed++)},
            attrs({{"transA", ta},
                   {"transB", tb},
                   {"alpha", unitScales ? 1.0f : 0.75f},
                   {"beta", unitScales ? 1.0f : -1.5f}}));
      }
      expectGradientsMatchFiniteDifferences("Gemm",
                                            {random64(ta != 0 ? Shape{k, m} : Shape{m, k}, seed++),
                                             random64(tb != 0 ? Shape{n, k} : Shape{k, n}, seed++)},
                                            attrs({{"transA", ta}, {"transB", tb}, {"alpha", 2.0f}}));
    }
  }
}

TEST(NnGradientsTest, MatMulShapes) {
  const std::vector<std::pair<Shape, Shape>> cases{
      {{4}, {4}},                 // dot product
      {{4}, {4, 3}},              // vector x matrix
      {{3, 4}, {4}},              // matrix x vector
      {{4}, {2, 4, 3}},           // vector x batch
      {{2, 3, 4}, {4}},           // batch x vector
      {{3, 4}, {4, 5}},           // plain
      {{2, 3, 4}, {4, 5}},        // batch x shared matrix (the Gemm path)
      {{3, 4}, {2, 4, 5}},        // shared matrix x batch (dA summed over the batch)
      {{2, 1, 3, 4}, {3, 4, 2}},  // broadcast batch dims on both sides
      {{2, 3, 3, 4}, {2, 3, 4, 2}},
  };
  unsigned seed = 100;
  for (const auto& [a, b] : cases) {
    SCOPED_TRACE(::testing::Message() << "A " << shapeToString(a) << " B " << shapeToString(b));
    expectGradientsMatchFiniteDifferences("MatMul", {random64(a, seed), random64(b, seed + 1)});
    seed += 2;
  }
}

// ---- float32 gradient kernels against float64 ----

struct ConvCase {
  Shape x, w;
  Attributes attrs;
};

std::vector<ConvCase> convCases() {
  return {
      {{2, 16, 6, 5}, {8, 16, 1, 1}, {}},                                                                // plain layout
      {{2, 8, 9, 8}, {16, 8, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},                                // blocked
      {{2, 8, 9, 9}, {16, 8, 3, 3}, attrs({{"pads", Ints{1, 0, 1, 2}}, {"strides", Ints{2, 2}}})},       // strided
      {{1, 6, 8, 7}, {9, 2, 3, 2}, attrs({{"group", std::int64_t{3}}, {"dilations", Ints{2, 1}}})},      // grouped
      {{2, 16, 7, 7}, {16, 1, 3, 3}, attrs({{"group", std::int64_t{16}}, {"pads", Ints{1, 1, 1, 1}}})},  // depthwise
      {{2, 8, 8, 8}, {4, 8, 1, 1}, attrs({{"strides", Ints{2, 2}}})},                                    // strided 1x1
      {{2, 3, 11, 10}, {8, 3, 7, 7}, attrs({{"pads", Ints{3, 3, 3, 3}}, {"strides", Ints{2, 2}}})},      // stem-like
      {{2, 4, 12}, {6, 4, 3}, attrs({{"pads", Ints{1, 1}}})},                                            // 1-D
      {{1, 4, 4, 5, 4}, {4, 4, 3, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1, 1, 1}}})},                     // 3-D
      // ResNet's last stages at 32x32, where oneDNN on AVX2 picks im2col + GEMM for the weight gradient and the
      // kernel runs it batched (Note [Batched weight gradient]; avx2.* runs these with ONEDNN_MAX_CPU_ISA=AVX2).
      {{4, 32, 2, 2}, {32, 32, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},
      {{4, 32, 2, 2}, {48, 32, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}})},
      {{3, 24, 1, 1}, {24, 24, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1}}})},
  };
}

TEST(NnGradientsTest, ConvGradKernelsFloat32MatchFloat64) {
  unsigned seed = 200;
  for (const ConvCase& c : convCases()) {
    SCOPED_TRACE(::testing::Message() << "X " << shapeToString(c.x) << " W " << shapeToString(c.w));
    const Tensor x = random64(c.x, seed++);
    const Tensor w = random64(c.w, seed++);
    const Tensor y = runOpEagerly("Conv", {&x, &w}, c.attrs).at(0);
    const Tensor dy = random64(y.shape(), seed++);
    expectFloat32MatchesFloat64("ConvGrad", {dy, x, w}, c.attrs, 3);
    expectFloat32MatchesFloat64("ConvGrad", {dy, x, w}, c.attrs, 2);
    Attributes inputAttrs = c.attrs;
    inputAttrs.set("input_shape", c.x);
    expectFloat32MatchesFloat64("ConvGradInput", {dy, w}, inputAttrs, 1);
    Attributes weightAttrs = c.attrs;
    weightAttrs.set("weight_shape", c.w);
    expectFloat32MatchesFloat64("ConvGradWeight", {dy, x}, weightAttrs, 2);
    expectFloat32MatchesFloat64("ConvGradWeight", {dy, x}, weightAttrs, 1);
  }
}

TEST(NnGradientsTest, PoolGradKernelsFloat32MatchFloat64) {
  const std::vector<Attributes> cases{
      attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}),
      attrs({{"kernel_shape", Ints{3, 2}},
             {"strides", Ints{2, 2}},
             {"ceil_mode", std::int64_t{1}},
             {"pads", Ints{0, 1, 1, 0}},
             {"count_include_pad", std::int64_t{1}}}),
      attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}}),
      attrs({{"kernel_shape", Ints{9, 8}}}),  // the whole map
  };
  unsigned seed = 300;
  for (const Attributes& a : cases) {
    const Tensor x = random64({2, 3, 9, 8}, seed++);
    for (const char* op : {"MaxPool", "AveragePool"}) {
      const Tensor y = runOpEagerly(op, {&x}, a).at(0);
      const Tensor dy = random64(y.shape(), seed++);
      if (std::string(op) == "MaxPool") {
        expectFloat32MatchesFloat64("MaxPoolGrad", {dy, x}, a, 1);
      } else {
        Attributes withShape = a;
        withShape.set("input_shape", x.shape());
        expectFloat32MatchesFloat64("AveragePoolGrad", {dy}, withShape, 1);
      }
    }
  }
}

// The pooling gradient kernels in float64 against central differences of the forward op, run eagerly (independent
// of the autodiff engine): sum(dY * Pool(X)) differentiated element by element.
TEST(NnGradientsTest, PoolGradKernelsMatchEagerFiniteDifferences) {
  const std::vector<Attributes> cases{
      attrs({{"kernel_shape", Ints{3, 2}}, {"strides", Ints{2, 2}}, {"pads", Ints{1, 0, 1, 1}}}),
      attrs({{"kernel_shape", Ints{3, 3}},
             {"strides", Ints{2, 2}},
             {"ceil_mode", std::int64_t{1}},
             {"pads", Ints{1, 0, 0, 1}},
             {"count_include_pad", std::int64_t{1}}}),
      attrs({{"kernel_shape", Ints{3, 3}},
             {"strides", Ints{2, 2}},
             {"ceil_mode", std::int64_t{1}},
             {"pads", Ints{1, 0, 0, 1}}}),
      attrs({{"kernel_shape", Ints{2, 2}}, {"dilations", Ints{2, 2}}, {"pads", Ints{1, 1, 1, 1}}}),
      attrs({{"kernel_shape", Ints{6, 5}}}),  // global
  };
  unsigned seed = 500;
  for (const Attributes& a : cases) {
    for (const std::string op : {"MaxPool", "AveragePool"}) {
      if (op == "AveragePool" && a.has("dilations"))
        continue;
      SCOPED_TRACE(op + " case " + std::to_string(seed));
      Tensor x = random64({2, 2, 6, 5}, seed++);
      const Tensor y = runOpEagerly(op, {&x}, a).at(0);
      const Tensor dy = random64(y.shape(), seed++);
      Attributes gradAttrs = a;
      gradAttrs.set("input_shape", x.shape());
      const Tensor dx = op == "MaxPool" ? runOpEagerly("MaxPoolGrad", {&dy, &x}, a).at(0)
                                        : runOpEagerly("AveragePoolGrad", {&dy}, gradAttrs).at(0);
      auto loss = [&] {
        const Tensor out = runOpEagerly(op, {&x}, a).at(0);
        double sum = 0;
        for (std::int64_t i = 0; i < out.numel(); ++i)
          sum += out.data<double>()[i] * dy.data<double>()[i];
        return sum;
      };
      constexpr double kEps = 1e-6;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const double saved = x.data<double>()[i];
        x.data<double>()[i] = saved + kEps;
        const double plus = loss();
        x.data<double>()[i] = saved - kEps;
        const double minus = loss();
        x.data<double>()[i] = saved;
        ASSERT_NEAR(dx.data<double>()[i], (plus - minus) / (2 * kEps), 1e-6) << "at flat index " << i;
      }
    }
  }
}

// Ties route the whole gradient to the first maximum of the window, as PyTorch does.
TEST(NnGradientsTest, MaxPoolGradTiesGoToFirstMaximum) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = Tensor::zeros(dtype, {1, 1, 2, 4});
    Tensor dy = Tensor::empty(dtype, {1, 1, 1, 2});
    if (dtype == DType::Float32) {
      std::fill(dy.data<float>(), dy.data<float>() + 2, 1.0f);
    } else {
      std::fill(dy.data<double>(), dy.data<double>() + 2, 1.0);
    }
    const Tensor dx =
        runOpEagerly("MaxPoolGrad", {&dy, &x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})).at(0);
    const std::vector<double> expected{1, 0, 1, 0, 0, 0, 0, 0};
    for (std::int64_t i = 0; i < 8; ++i) {
      const double v = dtype == DType::Float32 ? dx.data<float>()[i] : dx.data<double>()[i];
      EXPECT_EQ(v, expected[static_cast<std::size_t>(i)]) << "at " << i;
    }
  }
}

// ---- Channels-last nodes (Note [Channels-last]): the same rules, on [N, H, W, C] values and KRSC weights ----

Attributes channelsLast(Attributes a) {
  a.set("channels_last", std::int64_t{1});
  return a;
}

TEST(NnGradientsTest, ChannelsLastConvMatchesFiniteDifferences) {
  // x [N, H, W, C] = [2, 5, 4, 4], w [K, R, S, C / group] = [4, 3, 3, 2].
  const std::vector<Tensor> inputs{random64({2, 5, 4, 4}, 500), random64({4, 3, 3, 2}, 501), random64({4}, 502)};
  const Attributes a = channelsLast(attrs({{"group", std::int64_t{2}}, {"pads", Ints{1, 1, 1, 1}}}));
  expectGradientsMatchFiniteDifferences("Conv", inputs, a);               // ConvGrad with dB
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({1, 2}));  // ConvGradWeight with dB
  expectGradientsMatchFiniteDifferences("Conv", inputs, a, wrt({0, 2}));  // ConvGradInput; dB summed over N, H, W
}

TEST(NnGradientsTest, ChannelsLastPoolingAndBatchNormMatchFiniteDifferences) {
  const Tensor x = random64({2, 6, 5, 3}, 510);
  expectGradientsMatchFiniteDifferences(
      "AveragePool", {x}, channelsLast(attrs({{"kernel_shape", Ints{3, 3}}, {"pads", Ints{1, 1, 1, 1}}})));
  expectGradientsMatchFiniteDifferences("MaxPool", {x},
                                        channelsLast(attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})));
  const std::vector<Tensor> bn{x, random64({3}, 511), random64({3}, 512), random64({3}, 513),
                               random64({3}, 514, 0.5, 1.5)};
  expectGradientsMatchFiniteDifferences("BatchNormalization", bn,
                                        channelsLast(attrs({{"training_mode", std::int64_t{1}}, {"epsilon", 1e-3f}})));
  expectGradientsMatchFiniteDifferences("BatchNormalization", bn, channelsLast(attrs({{"epsilon", 1e-3f}})));
}

TEST(NnGradientsTest, BatchNormGradKernelFloat32MatchesFloat64) {
  // A large channel offset checks that the statistics do not cancel in float32.
  Tensor x = random64({4, 5, 6, 7}, 400);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    if ((i / 42) % 5 == 2)
      x.data<double>()[i] += 100.0;
  }
  const Tensor dy = random64(x.shape(), 401);
  const Tensor scale = random64({5}, 402);
  const Tensor mean = random64({5}, 403);
  const Tensor var = random64({5}, 404, 0.5, 2.0);
  expectFloat32MatchesFloat64("BatchNormalizationGrad", {dy, x, scale},
                              attrs({{"training_mode", std::int64_t{1}}, {"epsilon", 1e-5f}}), 3, 2e-4);
  expectFloat32MatchesFloat64("BatchNormalizationGrad", {dy, x, scale, mean, var}, attrs({{"epsilon", 1e-5f}}), 3);
}

}  // namespace
}  // namespace strata
