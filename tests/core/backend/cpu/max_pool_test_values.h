#pragma once

// Shared by the tests of Strata's max-pooling loops (max_pool_pairs_test.cpp, max_pool_3x3_test.cpp): the float64
// direct loops are the reference, and values on a grid of quarters make ties and exact sums.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"
#include "strata/op_registry.h"

namespace strata::testing {

using Ints = std::vector<std::int64_t>;

inline Attributes poolAttrs(Ints kernel, Ints strides, Ints pads = {0, 0, 0, 0}, std::int64_t ceilMode = 0) {
  Attributes a;
  a.set("kernel_shape", kernel);
  a.set("strides", strides);
  a.set("pads", pads);
  a.set("ceil_mode", ceilMode);
  return a;
}

// Values on a grid of quarters, so that windows hold ties; `nanEvery` > 0 puts a NaN at every such flat index.
inline Tensor quantised64(const Shape& shape, unsigned seed, std::int64_t nanEvery = 0) {
  Tensor t = randomTensor(DType::Float64, shape, seed, -2.0, 2.0);
  double* v = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    v[i] = std::round(v[i] * 4.0) / 4.0;
    if (nanEvery > 0 && i % nanEvery == 3)
      v[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return t;
}

// Equal element by element, NaN equal to NaN.
inline void expectSameValues(const Tensor& expected64, const Tensor& actual32) {
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

// MaxPool and MaxPoolGrad in float32 against float64 on each shape (channels-first), exactly: values and routed
// gradients. dY is on the grid too, so that the sums where windows overlap are exact in both. `channelsLast`: the
// float32 nodes run channels_last = 1 on the same values stored [N, H, W, C], their results turned back.
inline void expectMaxPoolMatchesFloat64(const Attributes& attrs, const std::vector<Shape>& shapes,
                                        std::int64_t nanEvery, unsigned seed, bool channelsLast = false) {
  Attributes attrs32 = attrs;
  if (channelsLast)
    attrs32.set("channels_last", std::int64_t{1});
  const auto stored = [&](const Tensor& t) { return channelsLast ? toChannelsLast(t) : t; };
  const auto back = [&](const Tensor& t) { return channelsLast ? toChannelsFirst(t) : t; };
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(shapeToString(shape));
    const Tensor x64 = quantised64(shape, seed++, nanEvery);
    const Tensor x32 = stored(toFloat32(x64));
    const Tensor y64 = runOpEagerly("MaxPool", {&x64}, attrs).at(0);
    const Tensor y32 = runOpEagerly("MaxPool", {&x32}, attrs32).at(0);
    expectSameValues(y64, back(y32));
    const Tensor dy64 = quantised64(y64.shape(), seed++);
    const Tensor dy32 = stored(toFloat32(dy64));
    const Tensor dx64 = runOpEagerly("MaxPoolGrad", {&dy64, &x64}, attrs).at(0);
    const Tensor dx32 = runOpEagerly("MaxPoolGrad", {&dy32, &x32}, attrs32).at(0);
    expectSameValues(dx64, back(dx32));
  }
}

// Whether MaxPool and MaxPoolGrad on `x` with `attrs` name a loop whose implementation contains `marker`.
struct LoopCase {
  const char* name;
  Attributes attrs;
  bool loop;
};

inline void expectLoopTaken(const Tensor& x, const std::vector<LoopCase>& cases, const std::string& marker) {
  for (const LoopCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor y = runOpEagerly("MaxPool", {&x}, c.attrs).at(0);
    for (const auto& [op, inputs] : {std::pair<std::string, std::vector<const Tensor*>>{"MaxPool", {&x}},
                                     std::pair<std::string, std::vector<const Tensor*>>{"MaxPoolGrad", {&y, &x}}}) {
      const std::string implementation = cpuKernelImplementation(op, inputs, c.attrs, 1);
      EXPECT_EQ(implementation.find(marker) != std::string::npos, c.loop) << op << ": " << implementation;
    }
  }
}

}  // namespace strata::testing
