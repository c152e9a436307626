// Note [Depthwise weight gradient] (core/backend/cpu/conv_depthwise_grad.h): the weight gradient of a depthwise
// convolution runs as Strata's loop where oneDNN offers only a GEMM per image and channel (small maps); so does that of
// a grouped convolution with 2, 4 or 8 channels per group (Note [Small-group weight gradient]). The float64
// kernels are the reference: dX, dW and dB together and apart must agree, and the kernels must say which path they
// took. The same tests run as avx2.* under ONEDNN_MAX_CPU_ISA=AVX2.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

struct DepthwiseCase {
  const char* name;
  Shape x, w;
  Attributes attrs;
  bool loop;  // whether the weight gradient takes the loop
};

Attributes depthwiseAttrs(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values)
    a.set(name, value);
  return a;
}

std::vector<DepthwiseCase> depthwiseCases() {
  const auto group = [](std::int64_t g) { return std::pair<const char*, AttributeValue>{"group", g}; };
  return {
      {"EfficientNetV2-S stage 5 at 32x32: 3x3 on 2x2",
       {4, 24, 2, 2},
       {24, 1, 3, 3},
       depthwiseAttrs({group(24), {"pads", Ints{1, 1, 1, 1}}}),
       true},
      {"its stage 4's first: 3x3 stride 2, 4x4 -> 2x2: oneDNN's own kernel",
       {4, 16, 4, 4},
       {16, 1, 3, 3},
       depthwiseAttrs({group(16), {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}}),
       false},
      {"channel multiplier 2, uneven pads, bias",
       {3, 8, 3, 2},
       {16, 1, 3, 3},
       depthwiseAttrs({group(8), {"pads", Ints{1, 0, 2, 1}}}),
       true},
      {"dilated 3x3 on 3x3",
       {2, 8, 3, 3},
       {8, 1, 3, 3},
       depthwiseAttrs({group(8), {"pads", Ints{2, 2, 2, 2}}, {"dilations", Ints{2, 2}}}),
       true},
      {"5x5 on 4x3, stride (2, 1)",
       {2, 16, 4, 3},
       {16, 1, 5, 5},
       depthwiseAttrs({group(16), {"pads", Ints{2, 2, 2, 2}}, {"strides", Ints{2, 1}}}),
       true},
      {"ConvNeXt-Tiny's 7x7 on 8x8",
       {2, 16, 8, 8},
       {16, 1, 7, 7},
       depthwiseAttrs({group(16), {"pads", Ints{3, 3, 3, 3}}}),
       true},
      {"3x3 on 14x14: oneDNN's own kernel",
       {2, 16, 14, 14},
       {16, 1, 3, 3},
       depthwiseAttrs({group(16), {"pads", Ints{1, 1, 1, 1}}}),
       false},
      {"grouped with two channels per group on 2x2: one GEMM per group",
       {2, 8, 2, 2},
       {8, 2, 3, 3},
       depthwiseAttrs({group(4), {"pads", Ints{1, 1, 1, 1}}}),
       false},
      {"four channels per group, stride 2, uneven pads",
       {2, 32, 11, 9},
       {32, 4, 3, 3},
       depthwiseAttrs({group(8), {"pads", Ints{1, 0, 2, 1}}, {"strides", Ints{2, 2}}}),
       true},
      {"four channels per group on one row: pruned to the middle row of taps",
       {2, 16, 1, 20},
       {16, 4, 3, 3},
       depthwiseAttrs({group(4), {"pads", Ints{1, 1, 1, 1}}}),
       true},
      {"four channels per group, dilated",
       {2, 16, 8, 8},
       {16, 4, 3, 3},
       depthwiseAttrs({group(4), {"pads", Ints{2, 2, 2, 2}}, {"dilations", Ints{2, 2}}}),
       true},
  };
}

// The depthwise loop or its small-group form (Note [Small-group weight gradient]).
void expectLoop(const std::string& implementation, bool loop) {
  const bool taken = implementation.find("weights: depthwise loop") != std::string::npos ||
                     implementation.find("weights: small-group loop") != std::string::npos;
  EXPECT_EQ(taken, loop) << implementation;
}

// Every gradient kernel against float64, and whether ConvGrad and ConvGradWeight took the loop.
void expectCases(const std::vector<DepthwiseCase>& cases, unsigned seed) {
  for (const DepthwiseCase& c : cases) {
    SCOPED_TRACE(c.name);
    const testing::ConvGradientInputs in = testing::expectConvGradientsMatchFloat64(c.x, c.w, c.attrs, seed);
    seed += 3;
    expectLoop(testing::cpuKernelImplementation("ConvGrad", {&in.dy32, &in.x32, &in.w32}, c.attrs, 3), c.loop);
    expectLoop(testing::cpuKernelImplementation("ConvGradWeight", {&in.dy32, &in.x32}, in.weightAttrs, 1), c.loop);
  }
}

TEST(DepthwiseWeightGradientTest, GradientsMatchFloat64) {
  expectCases(depthwiseCases(), 1500);
}

// Grouped convolutions with several channels per group (Note [Batched weight gradient], grad_nn_conv.cpp): where
// oneDNN offers its GEMM per image and group, small maps run one GEMM per group over the batch instead, larger ones
// with 2, 4 or 8 channels per group the small-group loop (Note [Small-group weight gradient]), and the profile says
// which.
struct GroupedCase {
  const char* name;
  Shape x, w;  // channels-first (the channels-last cases store them [N, H, W, C] and [O, kh, kw, C / group])
  std::int64_t group;
  std::string weights;  // the start of what implementation() must say
  bool channelsLast = false;
};

TEST(DepthwiseWeightGradientTest, GroupedConvolutionsRunOneGemmPerGroupOrTheSmallGroupLoop) {
  const std::vector<GroupedCase> cases{
      {"RegNetY's last stage: 3x3 on 2x2, 8 channels per group",
       {4, 32, 2, 2},
       {32, 8, 3, 3},
       4,
       "weights: batched im2col + oneDNN sgemm per group"},
      {"two channels per group on 2x2",
       {2, 8, 2, 2},
       {8, 2, 3, 3},
       4,
       "weights: batched im2col + oneDNN sgemm per group"},
      {"ResNeXt's layer1: 4 channels per group on 8x8",
       {2, 16, 8, 8},
       {16, 4, 3, 3},
       4,
       "weights: small-group loop (4 channels per group)"},
      {"two channels per group on 6x5",
       {3, 16, 6, 5},
       {16, 2, 3, 3},
       8,
       "weights: small-group loop (2 channels per group)"},
      {"four channels per group, a 5x5 kernel on 9x9",
       {2, 24, 9, 9},
       {24, 4, 5, 5},
       6,
       "weights: small-group loop (4 channels per group)"},
      {"channels-last: RegNetY's last stage",
       {4, 32, 2, 2},
       {32, 8, 3, 3},
       4,
       "weights: batched im2col + oneDNN sgemm per group",
       true},
      {"channels-last: two channels per group on 2x2",
       {2, 8, 2, 2},
       {8, 2, 3, 3},
       4,
       "weights: batched im2col + oneDNN sgemm per group",
       true},
  };
  unsigned seed = 1700;
  for (const GroupedCase& c : cases) {
    SCOPED_TRACE(c.name);
    Attributes attrs = depthwiseAttrs({{"group", c.group}, {"pads", Ints{1, 1, 1, 1}}});
    if (c.channelsLast)
      attrs.set("channels_last", std::int64_t{1});
    const Shape x = c.channelsLast ? toChannelsLast(c.x) : c.x, w = c.channelsLast ? toChannelsLast(c.w) : c.w;
    const testing::ConvGradientInputs in = testing::expectConvGradientsMatchFloat64(x, w, attrs, seed);
    seed += 3;
    const std::string implementation =
        testing::cpuKernelImplementation("ConvGrad", {&in.dy32, &in.x32, &in.w32}, attrs, 3);
    EXPECT_EQ(implementation.rfind(c.weights, 0), 0u) << implementation;
  }
}

// Note [CPU channels-last]: X and dY [N, H, W, C], W [O, kh, kw, C / group]; the depthwise loop runs across blocks of
// 64 channels, the small-group loop across 8.
std::vector<DepthwiseCase> channelsLastCases() {
  const auto group = [](std::int64_t g) { return std::pair<const char*, AttributeValue>{"group", g}; };
  const std::pair<const char*, AttributeValue> channelsLast{"channels_last", std::int64_t{1}};
  return {
      {"3x3 on 2x2, 80 channels: a block and a part",
       {4, 2, 2, 80},
       {80, 3, 3, 1},
       depthwiseAttrs({group(80), {"pads", Ints{1, 1, 1, 1}}, channelsLast}),
       true},
      {"channel multiplier 2, uneven pads",
       {3, 3, 2, 8},
       {16, 3, 3, 1},
       depthwiseAttrs({group(8), {"pads", Ints{1, 0, 2, 1}}, channelsLast}),
       true},
      {"dilated 3x3 on 3x3",
       {2, 3, 3, 8},
       {8, 3, 3, 1},
       depthwiseAttrs({group(8), {"pads", Ints{2, 2, 2, 2}}, {"dilations", Ints{2, 2}}, channelsLast}),
       true},
      {"5x5 on 4x3, stride (2, 1)",
       {2, 4, 3, 16},
       {16, 5, 5, 1},
       depthwiseAttrs({group(16), {"pads", Ints{2, 2, 2, 2}}, {"strides", Ints{2, 1}}, channelsLast}),
       true},
      {"four channels per group on 8x8 (weights OHWI)",
       {2, 8, 8, 16},
       {16, 3, 3, 4},
       depthwiseAttrs({group(4), {"pads", Ints{1, 1, 1, 1}}, channelsLast}),
       true},
      {"four channels per group on one row (weights OHWI): pruned taps",
       {2, 1, 20, 16},
       {16, 3, 3, 4},
       depthwiseAttrs({group(4), {"pads", Ints{1, 1, 1, 1}}, channelsLast}),
       true},
      {"two channels per group, stride 2",
       {2, 7, 9, 16},
       {16, 3, 3, 2},
       depthwiseAttrs({group(8), {"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}, channelsLast}),
       true},
  };
}

TEST(DepthwiseWeightGradientTest, ChannelsLastGradientsMatchFloat64) {
  expectCases(channelsLastCases(), 1600);
}

}  // namespace
}  // namespace strata
