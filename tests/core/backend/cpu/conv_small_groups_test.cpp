// Note [Small-group convolutions] (core/backend/cpu/conv_small_groups.h): grouped convolutions with 2, 4 or 8 input
// and output channels per group run Strata's loop for the forward and the data gradient wherever oneDNN would run its
// GEMM per image and group (under the AVX2 cap on ResNeXt's layer1; the same tests run as avx2.* with
// ONEDNN_MAX_CPU_ISA=AVX2, where the loops are taken). Every kernel against float64: forward with and without bias
// and fused ReLU, dX, dW and dB; channels-first and channels-last; strides, dilation and uneven pads, where the data
// gradient gathers from output pixels that only some taps reach.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

struct SmallGroupCase {
  const char* name;
  Shape x, w;  // as stored (channels-last: X [N, H, W, C], W [O, kh, kw, C / group])
  std::int64_t group;
  Ints pads, strides, dilations;
  bool channelsLast = false;
};

Attributes caseAttrs(const SmallGroupCase& c) {
  Attributes a;
  a.set("group", c.group);
  a.set("pads", c.pads);
  a.set("strides", c.strides);
  a.set("dilations", c.dilations);
  if (c.channelsLast)
    a.set("channels_last", std::int64_t{1});
  return a;
}

std::vector<SmallGroupCase> smallGroupCases() {
  return {
      {"ResNeXt's layer1: 4 per group, 3x3 on 8x8", {2, 16, 8, 8}, {16, 4, 3, 3}, 4, {1, 1, 1, 1}, {1, 1}, {1, 1}},
      {"2 per group, stride 2, uneven pads", {2, 16, 9, 7}, {16, 2, 3, 3}, 8, {1, 0, 2, 1}, {2, 2}, {1, 1}},
      {"8 per group, 5x5 kernel, stride (2, 1)", {1, 32, 7, 6}, {32, 8, 5, 5}, 4, {2, 2, 2, 2}, {2, 1}, {1, 1}},
      {"4 per group, dilated", {2, 24, 8, 8}, {24, 4, 3, 3}, 6, {2, 2, 2, 2}, {1, 1}, {2, 2}},
      {"channels-last, 4 per group", {2, 8, 8, 16}, {16, 3, 3, 4}, 4, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
      {"channels-last, 2 per group, stride 2", {2, 7, 9, 16}, {16, 3, 3, 2}, 8, {1, 1, 1, 1}, {2, 2}, {1, 1}, true},
  };
}

TEST(SmallGroupConvolutionTest, ForwardAndGradientsMatchFloat64) {
  unsigned seed = 2100;
  for (const SmallGroupCase& c : smallGroupCases()) {
    SCOPED_TRACE(c.name);
    const Attributes attrs = caseAttrs(c);
    const Tensor x = testing::randomTensor(DType::Float64, c.x, seed);
    const Tensor w = testing::randomTensor(DType::Float64, c.w, seed + 1);
    const Tensor b = testing::randomTensor(DType::Float64, {c.w[0]}, seed + 2);
    testing::expectFloat32MatchesFloat64("Conv", {x, w}, attrs, 1);
    testing::expectFloat32MatchesFloat64("Conv", {x, w, b}, attrs, 1);
    Attributes relu = attrs;
    relu.set("fused_relu", std::int64_t{1});
    testing::expectFloat32MatchesFloat64("Conv", {x, w, b}, relu, 1);
    testing::expectConvGradientsMatchFloat64(c.x, c.w, attrs, seed + 3);
    seed += 10;
  }
}

// None of these shapes runs oneDNN's GEMM per image and group, in any pass, on this host's ISA.
TEST(SmallGroupConvolutionTest, NoPassRunsAGemmPerImageAndGroup) {
  for (const SmallGroupCase& c : smallGroupCases()) {
    SCOPED_TRACE(c.name);
    const Attributes attrs = caseAttrs(c);
    const Tensor x = testing::toFloat32(testing::randomTensor(DType::Float64, c.x, 1));
    const Tensor w = testing::toFloat32(testing::randomTensor(DType::Float64, c.w, 2));
    const Tensor y = runOpEagerly("Conv", {&x, &w}, attrs).at(0);
    for (const std::string& implementation : {testing::cpuKernelImplementation("Conv", {&x, &w}, attrs, 1),
                                              testing::cpuKernelImplementation("ConvGrad", {&y, &x, &w}, attrs, 3)}) {
      EXPECT_EQ(implementation.find("GEMM per image and group"), std::string::npos) << implementation;
    }
  }
}

}  // namespace
}  // namespace strata
