// Note [Whole-map convolutions] (core/backend/cpu/conv_whole_map.h): a float32 convolution whose every window
// covers the whole input map runs as one dense GEMM on spread weights, forward and backward. The float64 kernels are
// the reference: Conv (with bias and a fused ReLU), ConvGrad, ConvGradInput and ConvGradWeight must agree, and the
// kernels must say which path they took; channels-first and channels-last. The same tests run as avx2.* under
// ONEDNN_MAX_CPU_ISA=AVX2.

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

struct WholeMapCase {
  const char* name;
  Shape x, w;
  Ints pads, strides;
  std::int64_t group;
  bool wholeMap;              // whether the kernels take the whole-map GEMM
  bool channelsLast = false;  // X [N, H, W, C] and W [K, R, S, C] as stored (x and w stay channels-first here)
};

std::vector<WholeMapCase> wholeMapCases() {
  return {
      {"ResNet's layer3 at 32x32: 3x3 on 2x2", {3, 16, 2, 2}, {24, 16, 3, 3}, {1, 1, 1, 1}, {1, 1}, 1, true},
      {"5x5 on 3x3", {2, 8, 3, 3}, {8, 8, 5, 5}, {2, 2, 2, 2}, {1, 1}, 1, true},
      {"3x5 on 2x3", {2, 8, 2, 3}, {6, 8, 3, 5}, {1, 2, 1, 2}, {1, 1}, 1, true},
      {"5x5 stride 2 on 3x3: two outputs a dim", {2, 8, 3, 3}, {8, 8, 5, 5}, {2, 2, 2, 2}, {2, 2}, 1, true},
      {"3x3 on 3x3: the corner windows miss a row", {2, 8, 3, 3}, {8, 8, 3, 3}, {1, 1, 1, 1}, {1, 1}, 1, false},
      {"grouped 3x3 on 2x2", {2, 8, 2, 2}, {8, 4, 3, 3}, {1, 1, 1, 1}, {1, 1}, 2, false},
      {"channels-last 3x3 on 2x2", {3, 16, 2, 2}, {24, 16, 3, 3}, {1, 1, 1, 1}, {1, 1}, 1, true, true},
      {"channels-last 3x5 on 2x3", {2, 8, 2, 3}, {6, 8, 3, 5}, {1, 2, 1, 2}, {1, 1}, 1, true, true},
      {"channels-last 5x5 stride 2 on 3x3", {2, 8, 3, 3}, {8, 8, 5, 5}, {2, 2, 2, 2}, {2, 2}, 1, true, true},
      {"channels-last 3x3 on 3x3", {2, 8, 3, 3}, {8, 8, 3, 3}, {1, 1, 1, 1}, {1, 1}, 1, false, true},
  };
}

Shape stored(const Shape& shape, const WholeMapCase& c) {
  return c.channelsLast ? toChannelsLast(shape) : shape;
}

Attributes convAttrs(const WholeMapCase& c) {
  Attributes a;
  a.set("pads", c.pads);
  a.set("strides", c.strides);
  a.set("group", c.group);
  if (c.channelsLast)
    a.set("channels_last", std::int64_t{1});
  return a;
}

bool saysWholeMap(const std::string& implementation) {
  return implementation.find("whole-map windows") != std::string::npos;
}

TEST(WholeMapConvolutionTest, ForwardMatchesFloat64WithBiasAndFusedRelu) {
  unsigned seed = 2100;
  for (const WholeMapCase& c : wholeMapCases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = testing::randomTensor(DType::Float64, stored(c.x, c), seed++);
    const Tensor w = testing::randomTensor(DType::Float64, stored(c.w, c), seed++);
    const Tensor b = testing::randomTensor(DType::Float64, {c.w[0]}, seed++);
    Attributes attrs = convAttrs(c);
    testing::expectFloat32MatchesFloat64("Conv", {x, w, b}, attrs, 1, 1e-5);
    testing::expectFloat32MatchesFloat64("Conv", {x, w}, attrs, 1, 1e-5);
    const Tensor x32 = testing::toFloat32(x), w32 = testing::toFloat32(w), b32 = testing::toFloat32(b);
    EXPECT_EQ(saysWholeMap(testing::cpuKernelImplementation("Conv", {&x32, &w32, &b32}, attrs, 1)), c.wholeMap);
    attrs.set("fused_relu", std::int64_t{1});
    testing::expectFloat32MatchesFloat64("Conv", {x, w, b}, attrs, 1, 1e-5);
  }
}

TEST(WholeMapConvolutionTest, GradientsMatchFloat64) {
  unsigned seed = 2200;
  for (const WholeMapCase& c : wholeMapCases()) {
    SCOPED_TRACE(c.name);
    const Attributes attrs = convAttrs(c);
    const testing::ConvGradientInputs in =
        testing::expectConvGradientsMatchFloat64(stored(c.x, c), stored(c.w, c), attrs, seed);
    seed += 3;
    for (const auto& [op, inputs, attributes, outputs] :
         {std::tuple<std::string, std::vector<const Tensor*>, Attributes, std::size_t>{
              "ConvGrad", {&in.dy32, &in.x32, &in.w32}, attrs, 3},
          {"ConvGradInput", {&in.dy32, &in.w32}, in.inputAttrs, 1},
          {"ConvGradWeight", {&in.dy32, &in.x32}, in.weightAttrs, 2}}) {
      EXPECT_EQ(saysWholeMap(testing::cpuKernelImplementation(op, inputs, attributes, outputs)), c.wholeMap) << op;
    }
  }
}

}  // namespace
}  // namespace strata
