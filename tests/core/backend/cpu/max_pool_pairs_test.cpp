// Note [2x2 max pooling loop] (core/backend/cpu/max_pool_pairs.h): float32 MaxPool and MaxPoolGrad with 2x2 windows
// at stride 2 run Strata's vectorised loops. The float64 direct loops are the reference: both pick a window's first
// maximum or first NaN, so forward values and routed gradients must agree exactly, on maps whose rows end in a
// partial vector, odd sizes whose last row and column lie in no window, ties and NaNs; channels-first, and
// channels-last with channel counts that end in a partial vector. The kernels must say which path they took. The
// same tests run as avx2.* under ONEDNN_MAX_CPU_ISA=AVX2.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "max_pool_test_values.h"

namespace strata {
namespace {

using testing::expectSameValues;
using testing::poolAttrs;
using testing::quantised64;

const std::vector<Shape>& pairShapes() {
  static const std::vector<Shape> shapes{
      {1, 1, 2, 2},    // one window
      {2, 3, 14, 14},  // 7 windows a row: a partial vector only
      {2, 2, 9, 34},   // 17 a row: two full vectors and one lane; an odd last row
      {1, 3, 7, 33},   // odd rows and columns
      {3, 2, 32, 32},  // full vectors only
      {1, 1, 3, 2},    // one window and a row in none
  };
  return shapes;
}

TEST(MaxPoolPairsTest, ForwardAndGradientMatchFloat64WithTies) {
  testing::expectMaxPoolMatchesFloat64(poolAttrs({2, 2}, {2, 2}), pairShapes(), 0, 40);
}

TEST(MaxPoolPairsTest, ForwardAndGradientFollowTheFirstNaN) {
  testing::expectMaxPoolMatchesFloat64(poolAttrs({2, 2}, {2, 2}), pairShapes(), 5, 40);
}

// Channels-last: eight channels per vector, so the channel counts matter (shapes channels-first here).
const std::vector<Shape>& channelsLastShapes() {
  static const std::vector<Shape> shapes{
      {1, 8, 2, 2},    // one window, one full vector
      {2, 3, 14, 14},  // a partial vector only
      {2, 13, 9, 34},  // a full vector and a part; an odd last row
      {1, 17, 7, 5},   // odd rows and columns
      {1, 2, 3, 2},    // one window and a row in none
      {2, 9, 2, 3},    // one window a row and a column in none
  };
  return shapes;
}

TEST(MaxPoolPairsTest, ChannelsLastMatchesFloat64WithTiesAndNaNs) {
  testing::expectMaxPoolMatchesFloat64(poolAttrs({2, 2}, {2, 2}), channelsLastShapes(), 0, 60, true);
  testing::expectMaxPoolMatchesFloat64(poolAttrs({2, 2}, {2, 2}), channelsLastShapes(), 5, 80, true);
}

TEST(MaxPoolPairsTest, ALoneNaNAndInfinitiesInAWindow) {
  // Windows: [1, NaN, 3, NaN] -> the first NaN; [-inf, -inf, -inf, -inf] -> the first; [2, 5, 5, 1] -> the first 5.
  Tensor x = Tensor::empty(DType::Float32, {1, 1, 2, 6});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values{1, nan, -inf, -inf, 2, 5, 3, nan, -inf, -inf, 5, 1};
  std::copy(values.begin(), values.end(), x.data<float>());
  Tensor dy = Tensor::empty(DType::Float32, {1, 1, 1, 3});
  std::fill(dy.data<float>(), dy.data<float>() + 3, 1.0f);
  const Attributes attrs = poolAttrs({2, 2}, {2, 2});
  const Tensor y = runOpEagerly("MaxPool", {&x}, attrs).at(0);
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
  EXPECT_EQ(y.data<float>()[1], -inf);
  EXPECT_EQ(y.data<float>()[2], 5.0f);
  const Tensor dx = runOpEagerly("MaxPoolGrad", {&dy, &x}, attrs).at(0);
  const std::vector<float> expected{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (std::size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(dx.data<float>()[i], expected[i]) << "at " << i;
}

TEST(MaxPoolPairsTest, OnlyTwoByTwoWindowsAtStrideTwoTakeTheLoop) {
  const Tensor x = testing::toFloat32(quantised64({2, 8, 12, 12}, 7));
  testing::expectLoopTaken(x,
                           {
                               {"2x2 stride 2", poolAttrs({2, 2}, {2, 2}), true},
                               {"3x3 stride 2", poolAttrs({3, 3}, {2, 2}), false},
                               {"2x2 stride 1", poolAttrs({2, 2}, {1, 1}), false},
                               {"2x2 stride 2 padded", poolAttrs({2, 2}, {2, 2}, {1, 1, 1, 1}), false},
                           },
                           "2x2 windows");
  Attributes last = poolAttrs({2, 2}, {2, 2});
  last.set("channels_last", std::int64_t{1});
  const Tensor xLast = toChannelsLast(x);
  testing::expectLoopTaken(xLast, {{"channels-last 2x2 stride 2", last, true}}, "2x2 windows");
  // Odd maps in ceil mode have partial windows: not the loop's geometry.
  const Tensor odd = testing::toFloat32(quantised64({1, 8, 7, 7}, 8));
  EXPECT_EQ(testing::cpuKernelImplementation("MaxPool", {&odd}, poolAttrs({2, 2}, {2, 2}, {0, 0, 0, 0}, 1), 1)
                .find("2x2 windows"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
