// Note [Pruned taps] (core/backend/cpu/conv_taps.h): float32 convolutions on small maps run with the kernel taps
// that meet the input only. The float64 kernels keep every tap, so they are the reference: forward outputs, data and
// weight gradients (exactly zero at the cut taps) and bias gradients must agree. The same tests run as avx2.* under
// ONEDNN_MAX_CPU_ISA=AVX2, where the weight gradient of some of these shapes runs as one batched GEMM.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

struct PrunedCase {
  const char* name;
  Shape x, w;
  Attributes attrs;
  std::string taps;  // what implementation() must say: "taps 1x1 of 3x3", or "" when nothing is cut
};

Attributes convAttrs(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values)
    a.set(name, value);
  return a;
}

std::vector<PrunedCase> prunedCases() {
  const auto pads1 = convAttrs({{"pads", Ints{1, 1, 1, 1}}});
  return {
      {"ResNet layer4 at 32x32: 3x3 on 1x1", {4, 16, 1, 1}, {24, 16, 3, 3}, pads1, "taps 1x1 of 3x3"},
      {"its strided first conv: 2x2 -> 1x1",
       {4, 16, 2, 2},
       {24, 16, 3, 3},
       convAttrs({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}}),
       "taps 2x2 of 3x3"},
      {"ConvNeXt stage 3 at 32x32: 7x7 depthwise on 2x2",
       {2, 8, 2, 2},
       {8, 1, 7, 7},
       convAttrs({{"pads", Ints{3, 3, 3, 3}}, {"group", std::int64_t{8}}}),
       "taps 3x3 of 7x7"},
      {"grouped, bias-free, one row",
       {2, 6, 1, 5},
       {6, 2, 3, 3},
       convAttrs({{"pads", Ints{1, 1, 1, 1}}, {"group", std::int64_t{3}}}),
       "taps 1x3 of 3x3"},
      {"dilated: only the middle tap meets the input",
       {2, 4, 2, 2},
       {5, 4, 3, 3},
       convAttrs({{"pads", Ints{2, 2, 2, 2}}, {"dilations", Ints{2, 2}}}),
       "taps 1x1 of 3x3"},
      {"1-D", {3, 4, 2}, {6, 4, 5}, convAttrs({{"pads", Ints{2, 2}}}), "taps 3 of 5"},
      {"3-D", {1, 3, 1, 2, 1}, {4, 3, 3, 3, 3}, convAttrs({{"pads", Ints{1, 1, 1, 1, 1, 1}}}), "taps 1x3x1 of 3x3x3"},
      {"every tap used", {2, 4, 4, 4}, {6, 4, 3, 3}, pads1, ""},
  };
}

void expectTapNote(const std::string& implementation, const std::string& taps) {
  if (taps.empty()) {
    EXPECT_EQ(implementation.find("taps"), std::string::npos) << implementation;
  } else {
    EXPECT_NE(implementation.find("; " + taps), std::string::npos) << implementation;
  }
}

TEST(PrunedTapsTest, ConvolutionsOnSmallMapsMatchTheFullKernel) {
  unsigned seed = 700;
  for (const PrunedCase& c : prunedCases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = testing::randomTensor(DType::Float64, c.x, seed++);
    const Tensor w = testing::randomTensor(DType::Float64, c.w, seed++);
    const Tensor b = testing::randomTensor(DType::Float64, {c.w[0]}, seed++);
    testing::expectFloat32MatchesFloat64("Conv", {x, w, b}, c.attrs, 1);
    const Tensor x32 = testing::toFloat32(x), w32 = testing::toFloat32(w), b32 = testing::toFloat32(b);
    expectTapNote(testing::cpuKernelImplementation("Conv", {&x32, &w32, &b32}, c.attrs, 1), c.taps);
  }
}

TEST(PrunedTapsTest, GradientsOnSmallMapsMatchTheFullKernel) {
  unsigned seed = 800;
  for (const PrunedCase& c : prunedCases()) {
    SCOPED_TRACE(c.name);
    // dX, dW and dB together, dX and dW, and each alone (the ConvGradInput and ConvGradWeight kernels).
    const testing::ConvGradientInputs in = testing::expectConvGradientsMatchFloat64(c.x, c.w, c.attrs, seed);
    seed += 3;
    expectTapNote(testing::cpuKernelImplementation("ConvGrad", {&in.dy32, &in.x32, &in.w32}, c.attrs, 3), c.taps);
    expectTapNote(testing::cpuKernelImplementation("ConvGradWeight", {&in.dy32, &in.x32}, in.weightAttrs, 1), c.taps);
  }
}

// The cut taps' weight gradient is exactly zero, as the full kernel's is (they only ever multiply padding), even
// when the output buffer held something else before.
TEST(PrunedTapsTest, CutTapsGetExactlyZeroGradient) {
  const PrunedCase c = prunedCases().front();  // 3x3 on 1x1: every tap but the centre is cut
  const Tensor x = testing::toFloat32(testing::randomTensor(DType::Float64, c.x, 1));
  const Tensor dy = testing::toFloat32(testing::randomTensor(DType::Float64, {c.x[0], c.w[0], 1, 1}, 2));
  Attributes weightAttrs = c.attrs;
  weightAttrs.set("weight_shape", c.w);
  for (int run = 0; run < 2; ++run) {  // the second run reuses kernels' scratch memory
    const Tensor dw = runOpEagerly("ConvGradWeight", {&dy, &x}, weightAttrs).at(0);
    for (std::int64_t plane = 0; plane < c.w[0] * c.w[1]; ++plane) {
      for (std::int64_t tap = 0; tap < 9; ++tap) {
        const float v = dw.data<float>()[plane * 9 + tap];
        if (tap == 4) {
          EXPECT_NE(v, 0.0f) << "plane " << plane;
        } else {
          ASSERT_EQ(v, 0.0f) << "plane " << plane << " tap " << tap;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
