// Note [Small maps as batch columns] (core/backend/cpu/conv_batch_columns.h): a channels-last float32 convolution
// with a stride, at most 16 output pixels per image and several taps runs as one GEMM over the batch's columns,
// forward and backward. The float64 kernels are the reference: Conv (with bias and a fused ReLU), ConvGrad,
// ConvGradInput and ConvGradWeight must agree, on strides, dilation, uneven pads and taps that meet padding only at
// some pixels, and the kernels must say which path they took (channels-first, stride 1, grouped and larger maps do
// not take it). The same tests run as avx2.* under ONEDNN_MAX_CPU_ISA=AVX2.

#include <gtest/gtest.h>

#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

struct ColumnsCase {
  const char* name;
  Shape x, w;  // channels-first; stored channels-last unless channelsFirst
  Ints pads, strides, dilations;
  std::int64_t group;
  bool columns;  // whether the kernels take the batch columns
  bool channelsFirst = false;
};

std::vector<ColumnsCase> columnsCases() {
  return {
      {"ResNet's layer3.0: 3x3 stride 2, 4x4 -> 2x2",
       {3, 16, 4, 4},
       {24, 16, 3, 3},
       {1, 1, 1, 1},
       {2, 2},
       {1, 1},
       1,
       true},
      {"ResNet's layer2.0: 3x3 stride 2, 8x8 -> 4x4",
       {2, 8, 8, 8},
       {12, 8, 3, 3},
       {1, 1, 1, 1},
       {2, 2},
       {1, 1},
       1,
       true},
      {"3x3 on 4x4, stride 1: oneDNN's", {2, 12, 4, 4}, {8, 12, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1, false},
      {"uneven pads, 3x2 kernel, stride (2, 1)", {2, 5, 5, 3}, {6, 5, 3, 2}, {0, 1, 2, 0}, {2, 1}, {1, 1}, 1, true},
      {"dilated 3x3 on 5x5", {2, 8, 5, 5}, {8, 8, 3, 3}, {2, 2, 2, 2}, {2, 2}, {2, 2}, 1, true},
      {"channels-first", {2, 8, 8, 8}, {12, 8, 3, 3}, {1, 1, 1, 1}, {2, 2}, {1, 1}, 1, false, true},
      {"grouped", {2, 8, 4, 4}, {8, 4, 3, 3}, {1, 1, 1, 1}, {2, 2}, {1, 1}, 2, false},
      {"25 output pixels", {2, 8, 9, 9}, {8, 8, 3, 3}, {1, 1, 1, 1}, {2, 2}, {1, 1}, 1, false},
  };
}

Shape stored(const Shape& shape, const ColumnsCase& c) {
  return c.channelsFirst ? shape : toChannelsLast(shape);
}

Attributes convAttrs(const ColumnsCase& c) {
  Attributes a;
  a.set("pads", c.pads);
  a.set("strides", c.strides);
  a.set("dilations", c.dilations);
  a.set("group", c.group);
  if (!c.channelsFirst)
    a.set("channels_last", std::int64_t{1});
  return a;
}

TEST(BatchColumnsConvolutionTest, ForwardAndGradientsMatchFloat64) {
  unsigned seed = 2500;
  for (const ColumnsCase& c : columnsCases()) {
    SCOPED_TRACE(c.name);
    testing::expectConvolutionPathMatchesFloat64(stored(c.x, c), stored(c.w, c), convAttrs(c), "batch columns",
                                                 c.columns, seed);
    seed += 10;
  }
}

}  // namespace
}  // namespace strata
