// Note [Whole-map convolutions] (core/backend/cpu/conv_whole_map.h): a float32 convolution whose every window
// covers the whole input map runs as one dense GEMM on spread weights, forward and backward. The float64 kernels are
// the reference: Conv (with bias and a fused ReLU), ConvGrad, ConvGradInput and ConvGradWeight must agree, and the
// kernels must say which path they took; channels-first and channels-last. The same tests run as avx2.* under
// ONEDNN_MAX_CPU_ISA=AVX2.

#include <gtest/gtest.h>

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

TEST(WholeMapConvolutionTest, ForwardAndGradientsMatchFloat64) {
  unsigned seed = 2100;
  for (const WholeMapCase& c : wholeMapCases()) {
    SCOPED_TRACE(c.name);
    testing::expectConvolutionPathMatchesFloat64(stored(c.x, c), stored(c.w, c), convAttrs(c), "whole-map windows",
                                                 c.wholeMap, seed);
    seed += 10;
  }
}

}  // namespace
}  // namespace strata
