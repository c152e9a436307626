// Note [2x2 max pooling loop] (core/backend/cpu/max_pool_pairs.h): float32 MaxPool and MaxPoolGrad with 2x2 windows
// at stride 2 run Strata's vectorised loops. The float64 direct loops are the reference: both pick a window's first
// maximum or first NaN, so forward values and routed gradients must agree exactly, on maps whose rows end in a
// partial vector, odd sizes whose last row and column lie in no window, ties and NaNs. The kernels must say which
// path they took. The same tests run as avx2.* under ONEDNN_MAX_CPU_ISA=AVX2.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

Attributes poolAttrs(Ints kernel, Ints strides, Ints pads = {0, 0, 0, 0}, std::int64_t ceilMode = 0) {
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("ceil_mode", ceilMode);
  return a;
}

// Values on a grid of quarters, so that windows hold ties; `nanEvery` > 0 puts a NaN at every such flat index.
Tensor quantised64(const Shape& shape, unsigned seed, std::int64_t nanEvery = 0) {
  Tensor t = testing::randomTensor(DType::Float64, shape, seed, -2.0, 2.0);
  double* v = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    v[i] = std::round(v[i] * 4.0) / 4.0;
    if (nanEvery > 0 && i % nanEvery == 3)
      v[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return t;
}

// Equal element by element, NaN equal to NaN.
void expectSameValues(const Tensor& expected64, const Tensor& actual32) {
  ASSERT_EQ(expected64.shape(), actual32.shape());
  for (std::int64_t i = 0; i < expected64.numel(); ++i) {
    const double e = expected64.data<double>()[i];
    const double a = actual32.data<float>()[i];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << "at flat index " << i << ": expected NaN, got " << a;
    } else {
      EXPECT_EQ(a, e) << "at flat index " << i;
    }
  }
}

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

void expectPairPoolingMatchesFloat64(std::int64_t nanEvery) {
  const Attributes attrs = poolAttrs({2, 2}, {2, 2});
  unsigned seed = 40;
  for (const Shape& shape : pairShapes()) {
    SCOPED_TRACE(shapeToString(shape));
    const Tensor x64 = quantised64(shape, seed++, nanEvery);
    const Tensor x32 = testing::toFloat32(x64);
    const Tensor y64 = runOpEagerly("MaxPool", {&x64}, attrs).at(0);
    const Tensor y32 = runOpEagerly("MaxPool", {&x32}, attrs).at(0);
    expectSameValues(y64, y32);
    const Tensor dy64 = testing::randomTensor(DType::Float64, y64.shape(), seed++);
    const Tensor dy32 = testing::toFloat32(dy64);
    // dY in float32 first, so that routing it is exact in both.
    const Tensor dy64Exact = runOpEagerly("Cast", {&dy32},
                                          [] {
                                            Attributes a;
                                            a.set("to", std::int64_t{11});
                                            return a;
                                          }())
                                 .at(0);
    const Tensor dx64 = runOpEagerly("MaxPoolGrad", {&dy64Exact, &x64}, attrs).at(0);
    const Tensor dx32 = runOpEagerly("MaxPoolGrad", {&dy32, &x32}, attrs).at(0);
    expectSameValues(dx64, dx32);
  }
}

TEST(MaxPoolPairsTest, ForwardAndGradientMatchFloat64WithTies) {
  expectPairPoolingMatchesFloat64(0);
}

TEST(MaxPoolPairsTest, ForwardAndGradientFollowTheFirstNaN) {
  expectPairPoolingMatchesFloat64(5);
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
  struct Case {
    const char* name;
    Attributes attrs;
    bool loop;
  };
  const std::vector<Case> cases{
      {"2x2 stride 2", poolAttrs({2, 2}, {2, 2}), true},
      {"3x3 stride 2", poolAttrs({3, 3}, {2, 2}), false},
      {"2x2 stride 1", poolAttrs({2, 2}, {1, 1}), false},
      {"2x2 stride 2 padded", poolAttrs({2, 2}, {2, 2}, {1, 1, 1, 1}), false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor y = runOpEagerly("MaxPool", {&x}, c.attrs).at(0);
    for (const auto& [op, inputs] : {std::pair<std::string, std::vector<const Tensor*>>{"MaxPool", {&x}},
                                     std::pair<std::string, std::vector<const Tensor*>>{"MaxPoolGrad", {&y, &x}}}) {
      const std::string implementation = testing::cpuKernelImplementation(op, inputs, c.attrs, 1);
      EXPECT_EQ(implementation.find("2x2 windows") != std::string::npos, c.loop) << op << ": " << implementation;
    }
  }
  // Odd maps in ceil mode have partial windows: not the loop's geometry.
  const Tensor odd = testing::toFloat32(quantised64({1, 8, 7, 7}, 8));
  EXPECT_EQ(testing::cpuKernelImplementation("MaxPool", {&odd}, poolAttrs({2, 2}, {2, 2}, {0, 0, 0, 0}, 1), 1)
                .find("2x2 windows"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
