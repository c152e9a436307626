// Channels-last nodes (Note [Channels-last] in strata/channels_last.h) against their channels-first selves: every
// layout-aware op, forward and gradient, run on channels-last inputs must give the channels-last transpose of what
// it gives on channels-first ones. On the test device (Note [Test device]): on a GPU this checks cuDNN's NHWC
// kernels; on the CPU its own channels-last kernels for float32 (Note [CPU channels-last]) and the transposing
// adapter for float64.

#include "strata/channels_last.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "support/test_device.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

Attributes attrs(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values)
    a.set(name, value);
  return a;
}

Tensor random(DType dtype, const Shape& shape, unsigned seed, double low = -1.0, double high = 1.0) {
  const Tensor t = testing::randomTensor(DType::Float64, shape, seed, low, high);
  return dtype == DType::Float64
             ? t
             : runOpEagerly("Cast", {&t}, attrs({{"to", static_cast<std::int64_t>(dtypeToOnnx(dtype))}})).at(0);
}

Tensor transposed(const Tensor& t, const Ints& perm) {
  return runOpEagerly("Transpose", {&t}, attrs({{"perm", perm}})).at(0);
}

Tensor asFloat64(const Tensor& t) {
  return runOpEagerly("Cast", {&t}, attrs({{"to", static_cast<std::int64_t>(dtypeToOnnx(DType::Float64))}})).at(0);
}

struct LayoutCase {
  std::string op;
  std::vector<Tensor> inputs;  // channels-first
  Attributes attrs;
  std::size_t outputs = 1;
};

// Runs the case channels-first and channels-last on the test device and compares every output, channels-last,
// within rtol of the output's largest magnitude.
void expectLayoutsAgree(const LayoutCase& c, double rtol) {
  const testing::TestDevice& device = testing::testDevice();
  if (!device.skipReason.empty()) {
    GTEST_SKIP() << device.skipReason;
  }
  std::vector<Tensor> lastInputs;
  for (const Tensor& t : c.inputs) {
    lastInputs.push_back(t.rank() >= 3 ? transposed(t, channelsLastPerm(t.rank())) : t);
  }
  Attributes lastAttrs = c.attrs;
  lastAttrs.set("channels_last", std::int64_t{1});
  for (const char* name : {"input_shape", "weight_shape"}) {
    if (c.attrs.has(name))
      lastAttrs.set(name, toChannelsLast(c.attrs.getInts(name)));
  }
  std::vector<const Tensor*> first, last;
  for (std::size_t i = 0; i < c.inputs.size(); ++i) {
    first.push_back(&c.inputs[i]);
    last.push_back(&lastInputs[i]);
  }
  const std::vector<Tensor> expected = runOpEagerly(c.op, first, c.attrs, c.outputs, true, device.device);
  const std::vector<Tensor> actual = runOpEagerly(c.op, last, lastAttrs, c.outputs, true, device.device);
  for (std::size_t o = 0; o < c.outputs; ++o) {
    const Tensor want = asFloat64(
        expected[o].rank() >= 3 ? transposed(expected[o], channelsLastPerm(expected[o].rank())) : expected[o]);
    ASSERT_EQ(actual[o].shape(), want.shape()) << c.op << " output " << o;
    ASSERT_EQ(actual[o].dtype(), expected[o].dtype()) << c.op << " output " << o;
    const Tensor got = asFloat64(actual[o]);
    double scale = 0;
    for (std::int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::abs(want.data<double>()[i]));
    for (std::int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_NEAR(got.data<double>()[i], want.data<double>()[i], rtol * std::max(scale, 1e-6))
          << c.op << " output " << o << " element " << i << " on " << device.device.toString();
    }
  }
}

const Ints kPads1{1, 1, 1, 1};

TEST(ChannelsLastOpsTest, ConvMatchesChannelsFirst) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    expectLayoutsAgree({"Conv",
                        {random(dtype, {2, 4, 7, 6}, 1), random(dtype, {8, 4, 3, 3}, 2), random(dtype, {8}, 3)},
                        attrs({{"pads", kPads1}})},
                       1e-5);
    expectLayoutsAgree(
        {"Conv",
         {random(dtype, {2, 6, 9, 8}, 4), random(dtype, {4, 3, 3, 3}, 5)},
         attrs({{"group", std::int64_t{2}}, {"strides", Ints{2, 2}}, {"pads", kPads1}, {"dilations", Ints{1, 2}}})},
        1e-5);
    // Asymmetric pads: cuDNN's padded-copy path (Note [Asymmetric conv padding]).
    expectLayoutsAgree(
        {"Conv", {random(dtype, {1, 3, 6, 6}, 6), random(dtype, {2, 3, 3, 3}, 7)}, attrs({{"pads", Ints{0, 1, 1, 0}}})},
        1e-5);
  }
}

TEST(ChannelsLastOpsTest, ConvGradientsMatchChannelsFirst) {
  const Tensor x = random(DType::Float32, {2, 4, 7, 6}, 10);
  const Tensor w = random(DType::Float32, {6, 2, 3, 3}, 11);
  const Tensor dy = random(DType::Float32, {2, 6, 4, 3}, 12);
  const Attributes a = attrs({{"group", std::int64_t{2}}, {"strides", Ints{2, 2}}, {"pads", kPads1}});
  expectLayoutsAgree({"ConvGrad", {dy, x, w}, a, 3}, 1e-5);
  Attributes input = a;
  input.set("input_shape", x.shape());
  expectLayoutsAgree({"ConvGradInput", {dy, w}, input}, 1e-5);
  Attributes weight = a;
  weight.set("weight_shape", w.shape());
  expectLayoutsAgree({"ConvGradWeight", {dy, x}, weight, 2}, 1e-5);
}

TEST(ChannelsLastOpsTest, BatchNormMatchesChannelsFirst) {
  const Tensor x = random(DType::Float32, {4, 5, 6, 3}, 20);
  const Tensor scale = random(DType::Float32, {5}, 21), bias = random(DType::Float32, {5}, 22);
  const Tensor mean = random(DType::Float32, {5}, 23), var = random(DType::Float32, {5}, 24, 0.5, 2.0);
  expectLayoutsAgree({"BatchNormalization",
                      {x, scale, bias, mean, var},
                      attrs({{"training_mode", std::int64_t{1}}, {"momentum", 0.8f}}),
                      3},
                     1e-5);
  expectLayoutsAgree({"BatchNormalization", {x, scale, bias, mean, var}, {}}, 1e-5);
  const Tensor dy = random(DType::Float32, x.shape(), 25);
  expectLayoutsAgree(
      {"BatchNormalizationGrad", {dy, x, scale}, attrs({{"training_mode", std::int64_t{1}}, {"epsilon", 1e-5f}}), 3},
      1e-4);
  expectLayoutsAgree({"BatchNormalizationGrad", {dy, x, scale, mean, var}, attrs({{"epsilon", 1e-5f}}), 3}, 1e-5);
}

TEST(ChannelsLastOpsTest, PoolingMatchesChannelsFirst) {
  const Tensor x = random(DType::Float32, {2, 3, 8, 7}, 30);
  const Attributes window = attrs({{"kernel_shape", Ints{3, 3}}, {"strides", Ints{2, 2}}, {"pads", kPads1}});
  const Attributes exclusive = attrs({{"kernel_shape", Ints{3, 3}},
                                      {"strides", Ints{2, 2}},
                                      {"pads", kPads1},
                                      {"count_include_pad", std::int64_t{0}}});
  expectLayoutsAgree({"MaxPool", {x}, window}, 0);
  expectLayoutsAgree({"AveragePool", {x}, exclusive}, 1e-6);
  expectLayoutsAgree({"AveragePool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})}, 1e-6);
  const Tensor dy = random(DType::Float32, {2, 3, 4, 4}, 31);
  // Where windows overlap, a position's gradients are summed in each kernel's own order (channels-first: Strata's
  // loop, Note [3x3 max pooling loop]; channels-last: oneDNN), so within a rounding; where they go is checked exactly
  // against float64 in max_pool_3x3_test.cpp.
  expectLayoutsAgree({"MaxPoolGrad", {dy, x}, window}, 1e-6);
  Attributes average = exclusive;
  average.set("input_shape", x.shape());
  expectLayoutsAgree({"AveragePoolGrad", {dy}, average}, 1e-6);
}

// Resize and ResizeGrad read channels-last operands themselves (their passes run along H and W with the channels
// innermost); roi, scales and sizes stay in the node's channels-first order.
TEST(ChannelsLastOpsTest, ResizeMatchesChannelsFirst) {
  const Tensor roi = Tensor::empty(DType::Float32, {0});
  Tensor scales = Tensor::empty(DType::Float32, {4});
  const float values[] = {1.0f, 1.0f, 2.0f, 0.5f};
  std::copy(values, values + 4, scales.data<float>());
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = random(dtype, {2, 3, 5, 6}, 35);
    const Tensor dy = random(dtype, {2, 3, 10, 3}, 36);
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      SCOPED_TRACE(mode);
      const Attributes resize = attrs({{"mode", std::string(mode)}});
      expectLayoutsAgree({"Resize", {x, roi, scales}, resize}, 1e-6);
      Attributes grad = resize;
      grad.set("input_shape", x.shape());
      expectLayoutsAgree({"ResizeGrad", {dy, roi, scales}, grad}, 1e-6);
    }
  }
}

// 16-bit data beside float32 batch-norm parameters, as mixed precision runs them (cuDNN's NHWC tensor-core paths).
TEST(ChannelsLastOpsTest, SixteenBitConvAndBatchNormMatchChannelsFirst) {
  for (DType low : {DType::BFloat16, DType::Float16}) {
    const Tensor x = random(low, {2, 8, 6, 6}, 40);
    const Tensor w = random(low, {8, 8, 3, 3}, 41);
    expectLayoutsAgree({"Conv", {x, w}, attrs({{"pads", kPads1}})}, 1e-2);
    const Tensor dy = random(low, {2, 8, 6, 6}, 42);
    expectLayoutsAgree({"ConvGrad", {dy, x, w}, attrs({{"pads", kPads1}}), 2}, 1e-2);
    const Tensor scale = random(DType::Float32, {8}, 43), bias = random(DType::Float32, {8}, 44);
    const Tensor mean = random(DType::Float32, {8}, 45), var = random(DType::Float32, {8}, 46, 0.5, 2.0);
    expectLayoutsAgree(
        {"BatchNormalization", {x, scale, bias, mean, var}, attrs({{"training_mode", std::int64_t{1}}}), 3}, 1e-2);
    expectLayoutsAgree({"BatchNormalizationGrad", {dy, x, scale}, attrs({{"training_mode", std::int64_t{1}}}), 3},
                       2e-2);
    expectLayoutsAgree({"MaxPool", {x}, attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})}, 0);
  }
}

// The CPU's float32 channels-last kernels on what they treat apart: pruned taps (Note [Pruned taps]), one output
// pixel as a GEMM (Note [Convolutions as one GEMM]), depthwise, 1-D and 3-D windows, one-pixel batch norm.
TEST(ChannelsLastOpsTest, SmallMapsOnePixelAndOtherRanksMatchChannelsFirst) {
  struct ConvCase {
    Shape x, w;
    Attributes a;
  };
  const std::vector<ConvCase> convs{
      {{3, 8, 1, 1}, {6, 8, 3, 3}, attrs({{"pads", kPads1}})},                           // centre tap, GEMM
      {{3, 8, 2, 2}, {6, 8, 3, 3}, attrs({{"pads", kPads1}, {"strides", Ints{2, 2}}})},  // 2x2 taps, GEMM
      {{3, 8, 2, 2}, {6, 8, 1, 1}, attrs({{"strides", Ints{2, 2}}})},                    // one pixel gathered
      {{2, 6, 2, 2}, {6, 1, 7, 7}, attrs({{"pads", Ints{3, 3, 3, 3}}, {"group", std::int64_t{6}}})},  // depthwise
      {{2, 6, 2, 3}, {4, 6, 3, 3}, attrs({{"pads", kPads1}})},                                        // pruned rows
      {{2, 3, 9}, {4, 3, 3}, attrs({{"pads", Ints{1, 1}}, {"strides", Ints{2}}})},                    // 1-D
      {{1, 3, 3, 4, 2}, {2, 3, 3, 3, 3}, attrs({{"pads", Ints{1, 1, 1, 1, 1, 1}}})},                  // 3-D
  };
  unsigned seed = 70;
  for (const ConvCase& c : convs) {
    SCOPED_TRACE(shapeToString(c.x) + " * " + shapeToString(c.w));
    const Tensor x = random(DType::Float32, c.x, seed++);
    const Tensor w = random(DType::Float32, c.w, seed++);
    const Tensor b = random(DType::Float32, {c.w[0]}, seed++);
    expectLayoutsAgree({"Conv", {x, w, b}, c.a}, 1e-5);
    const Tensor y = runOpEagerly("Conv", {&x, &w}, c.a).at(0);
    const Tensor dy = random(DType::Float32, y.shape(), seed++);
    expectLayoutsAgree({"ConvGrad", {dy, x, w}, c.a, 3}, 1e-5);
    Attributes input = c.a;
    input.set("input_shape", x.shape());
    expectLayoutsAgree({"ConvGradInput", {dy, w}, input}, 1e-5);
    Attributes weight = c.a;
    weight.set("weight_shape", w.shape());
    expectLayoutsAgree({"ConvGradWeight", {dy, x}, weight, 1}, 1e-5);
  }
  const Tensor x = random(DType::Float32, {6, 5, 1, 1}, 90);
  const Tensor scale = random(DType::Float32, {5}, 91), bias = random(DType::Float32, {5}, 92);
  const Tensor mean = random(DType::Float32, {5}, 93), var = random(DType::Float32, {5}, 94, 0.5, 2.0);
  expectLayoutsAgree(
      {"BatchNormalization", {x, scale, bias, mean, var}, attrs({{"training_mode", std::int64_t{1}}}), 3}, 1e-5);
  expectLayoutsAgree({"BatchNormalizationGrad",
                      {random(DType::Float32, x.shape(), 95), x, scale},
                      attrs({{"training_mode", std::int64_t{1}}}),
                      3},
                     1e-4);
}

// Note [CPU channels-last]: float32 channels-last nodes of every layout-aware op run on the CPU's own kernels, not
// through the transposing adapter; float64 ones are transposed around the float64 loops.
TEST(ChannelsLastOpsTest, CpuFloat32KernelsRunChannelsLastThemselves) {
  const Attributes pool =
      attrs({{"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}, {"channels_last", std::int64_t{1}}});
  const Attributes conv = attrs({{"pads", kPads1}, {"channels_last", std::int64_t{1}}});
  const auto implementation = [](const std::string& type, const std::vector<TensorMeta>& inputs, const Attributes& a,
                                 std::size_t outputs) {
    std::vector<InputInfo> infos;
    for (const TensorMeta& meta : inputs)
      infos.push_back(InputInfo{true, meta});
    const std::string node = "node";
    const std::vector<TensorMeta> out =
        OpRegistry::instance().schema(type)->inferShapes(ShapeContext{infos, a, outputs, node, type});
    return (*OpRegistry::instance().kernel(type, DeviceType::CPU))(KernelInit{infos, out, a, node, true})
        ->implementation();
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const TensorMeta x{dtype, {2, 8, 8, 4}}, w{dtype, {6, 3, 3, 4}}, y{dtype, {2, 8, 8, 6}}, c{dtype, {4}};
    Attributes bn;
    bn.set("training_mode", std::int64_t{1});
    bn.set("channels_last", std::int64_t{1});
    Attributes poolGrad = pool;
    const std::vector<std::string> found{
        implementation("Conv", {x, w}, conv, 1), implementation("ConvGrad", {y, x, w}, conv, 3),
        implementation("MaxPool", {x}, pool, 1),
        implementation("MaxPoolGrad", {TensorMeta{dtype, {2, 4, 4, 4}}, x}, poolGrad, 1),
        implementation("BatchNormalization", {x, c, c, c, c}, bn, 3)};
    for (const std::string& kernel : found) {
      EXPECT_EQ(kernel.find("transposed from channels-last") == std::string::npos, dtype == DType::Float32)
          << dtypeName(dtype) << ": " << kernel;
    }
  }
}

TEST(ChannelsLastOpsTest, ShapeInferenceGivesChannelsLastShapes) {
  const Tensor x = random(DType::Float32, {1, 6, 5, 3}, 50);  // [N, H, W, C] = C 3
  const Tensor w = random(DType::Float32, {4, 3, 3, 3}, 51);  // [K, R, S, C]
  const Tensor y =
      runOpEagerly("Conv", {&x, &w}, attrs({{"channels_last", std::int64_t{1}}, {"strides", Ints{2, 1}}})).at(0);
  EXPECT_EQ(y.shape(), (Shape{1, 2, 3, 4}));
}

TEST(ChannelsLastOpsTest, BadChannelsLastNodesAreClearErrors) {
  const Tensor x = random(DType::Float32, {1, 4, 4, 2}, 60);
  const Tensor w = random(DType::Float32, {2, 1, 1, 2}, 61);
  const Tensor flat = random(DType::Float32, {4, 2}, 62);
  const auto message = [](const std::function<void()>& run) {
    try {
      run();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              runOpEagerly("Conv", {&x, &w}, attrs({{"channels_last", std::int64_t{2}}}));
            }).find("channels_last must be 0 or 1, got 2"),
            std::string::npos);
  EXPECT_NE(
      message([&] {
        runOpEagerly("MaxPool", {&x}, attrs({{"channels_last", std::int64_t{1}}, {"kernel_shape", Ints{2, 2}}}), 2);
      }).find("Indices output"),
      std::string::npos);
  const std::string rank = message([&] {
    runOpEagerly("BatchNormalization", {&flat, &w, &w, &w, &w}, attrs({{"channels_last", std::int64_t{1}}}));
  });
  EXPECT_NE(rank.find("rank 3 or more"), std::string::npos) << rank;
  EXPECT_NE(rank.find("BatchNormalization"), std::string::npos) << rank;
  // A channels-last operand that contradicts the others is reported with the channels-first views named.
  const std::string mismatch = message([&] {
    runOpEagerly("Conv", {&x, &flat}, attrs({{"channels_last", std::int64_t{1}}}));
  });
  EXPECT_NE(mismatch.find("channels_last = 1"), std::string::npos) << mismatch;
}

TEST(ChannelsLastOpsTest, PermutationsMoveTheChannelDim) {
  EXPECT_EQ(toChannelsLast(Shape{2, 3, 4, 5}), (Shape{2, 4, 5, 3}));
  EXPECT_EQ(toChannelsFirst(Shape{2, 4, 5, 3}), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(toChannelsLast(Shape{2, 3, 4}), (Shape{2, 4, 3}));
  EXPECT_EQ(toChannelsLast(Shape{2, 3}), (Shape{2, 3}));
  EXPECT_EQ(channelsLastPerm(5), (Ints{0, 2, 3, 4, 1}));
  EXPECT_EQ(channelsFirstPerm(5), (Ints{0, 4, 1, 2, 3}));
  EXPECT_TRUE(isChannelsLastOp("ConvGradWeight"));
  EXPECT_FALSE(isChannelsLastOp("GlobalAveragePool"));
}

}  // namespace
}  // namespace strata
