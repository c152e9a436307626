// Note [3x3 max pooling loop] (core/backend/cpu/max_pool_3x3.h): float32 MaxPool and MaxPoolGrad with 3x3 windows at
// stride 2 run Strata's separable vectorised loops. The float64 direct loops are the reference: both pick a window's
// first maximum in row-major order or its first NaN, so forward values and routed gradients must agree exactly
// (values and gradients on a grid of quarters, so that overlapping windows' sums are exact too), with padding, in
// floor and ceil mode, on rows that end in partial vectors, and where a window's maximum is -inf (the planes the loop
// hands back to the direct loop). The kernels must say which path they took.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "max_pool_test_values.h"

namespace strata {
namespace {

using testing::poolAttrs;
using testing::quantised64;

struct Geometry {
  const char* name;
  Attributes attrs;
  std::vector<Shape> shapes;
};

std::vector<Geometry> geometries() {
  return {
      {"no padding, ceil mode (SqueezeNet)",
       poolAttrs({3, 3}, {2, 2}, {0, 0, 0, 0}, 1),
       {{2, 3, 31, 31}, {1, 2, 8, 8}, {1, 2, 7, 10}, {8, 17, 15, 15}}},
      {"padding 1 (ResNet's stem)", poolAttrs({3, 3}, {2, 2}, {1, 1, 1, 1}), {{2, 3, 16, 16}, {1, 2, 56, 56}}},
      {"no padding, floor mode", poolAttrs({3, 3}, {2, 2}), {{1, 1, 3, 3}, {1, 2, 9, 34}, {1, 1, 6, 70}, {2, 1, 4, 5}}},
      {"uneven padding", poolAttrs({3, 3}, {2, 2}, {2, 0, 1, 2}, 1), {{1, 2, 11, 13}, {1, 1, 5, 40}}},
  };
}

void expectEveryGeometryMatchesFloat64(std::int64_t nanEvery, unsigned seed) {
  for (const Geometry& g : geometries()) {
    SCOPED_TRACE(g.name);
    testing::expectMaxPoolMatchesFloat64(g.attrs, g.shapes, nanEvery, seed);
    seed += 50;
  }
}

TEST(MaxPool3x3Test, ForwardAndGradientMatchFloat64WithTies) {
  expectEveryGeometryMatchesFloat64(0, 70);
}

TEST(MaxPool3x3Test, ForwardAndGradientFollowTheFirstNaN) {
  expectEveryGeometryMatchesFloat64(7, 90);
}

TEST(MaxPool3x3Test, WindowsOfMinusInfinityRouteToTheirFirstValidPosition) {
  // Plane 0 starts with a 3x3 block of -inf under padding 1: its first windows' maximum is -inf, where the staged
  // padding could win; plane 1 is ordinary. Both must route as the float64 loop does.
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x64 = quantised64({1, 2, 6, 6}, 5);
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t c = 0; c < 3; ++c)
      x64.data<double>()[r * 6 + c] = -inf;
  }
  const Attributes attrs = poolAttrs({3, 3}, {2, 2}, {1, 1, 1, 1});
  const Tensor x32 = testing::toFloat32(x64);
  const Tensor y64 = runOpEagerly("MaxPool", {&x64}, attrs).at(0);
  testing::expectSameValues(y64, runOpEagerly("MaxPool", {&x32}, attrs).at(0));
  EXPECT_EQ(y64.data<double>()[0], -inf);
  const Tensor dy64 = quantised64(y64.shape(), 6);
  const Tensor dy32 = testing::toFloat32(dy64);
  const Tensor dx64 = runOpEagerly("MaxPoolGrad", {&dy64, &x64}, attrs).at(0);
  const Tensor dx32 = runOpEagerly("MaxPoolGrad", {&dy32, &x32}, attrs).at(0);
  testing::expectSameValues(dx64, dx32);
  // The first window (rows -1..1, columns -1..1) is all -inf: its gradient goes to (0, 0), not to a pad.
  EXPECT_EQ(dx32.data<float>()[0], static_cast<float>(dy64.data<double>()[0]));
}

TEST(MaxPool3x3Test, OnlyThreeByThreeWindowsAtStrideTwoTakeTheLoop) {
  const Tensor x = testing::toFloat32(quantised64({2, 8, 13, 13}, 7));
  Attributes dilated = poolAttrs({3, 3}, {2, 2});
  dilated.set("dilations", std::vector<std::int64_t>{2, 2});
  testing::expectLoopTaken(x,
                           {
                               {"3x3 stride 2", poolAttrs({3, 3}, {2, 2}), true},
                               {"3x3 stride 2 padded, ceil mode", poolAttrs({3, 3}, {2, 2}, {1, 1, 1, 1}, 1), true},
                               {"3x3 stride 1", poolAttrs({3, 3}, {1, 1}), false},
                               {"3x3 stride 2 dilated", dilated, false},
                               {"3x2 stride 2", poolAttrs({3, 2}, {2, 2}), false},
                               {"2x2 stride 2", poolAttrs({2, 2}, {2, 2}), false},
                           },
                           "3x3 windows");
}

}  // namespace
}  // namespace strata
