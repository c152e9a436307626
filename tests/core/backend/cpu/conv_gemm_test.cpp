// Note [Convolutions as one GEMM] (core/backend/cpu/conv_gemm.h): float32 convolutions with one output pixel per
// image, or a single tap and at most 16 output pixels, run as one GEMM over the batch. The float64 kernels are the
// reference: forward outputs and every gradient must agree, and the kernels must say they took the GEMM (or that they
// did not, where it does not apply).

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

struct GemmCase {
  const char* name;
  Shape x, w;
  Attributes attrs;
  bool gemm;  // whether the kernels take the GEMM
};

Attributes with(std::initializer_list<std::pair<const char*, AttributeValue>> values) {
  Attributes a;
  for (const auto& [name, value] : values)
    a.set(name, value);
  return a;
}

std::vector<GemmCase> gemmCases() {
  return {
      {"1x1 on 1x1 (ResNet-50's layer4)", {8, 24, 1, 1}, {16, 24, 1, 1}, {}, true},
      {"3x3 on 1x1, pruned to its centre", {8, 24, 1, 1}, {16, 24, 3, 3}, with({{"pads", Ints{1, 1, 1, 1}}}), true},
      {"1x1 stride 2 on 2x2: one pixel of each plane (its downsample)",
       {8, 24, 2, 2},
       {16, 24, 1, 1},
       with({{"strides", Ints{2, 2}}}),
       true},
      {"3x3 stride 2 on 2x2, pruned to the 2x2 that is the whole input",
       {8, 24, 2, 2},
       {16, 24, 3, 3},
       with({{"pads", Ints{1, 1, 1, 1}}, {"strides", Ints{2, 2}}}),
       true},
      {"a kernel as large as the input, 1-D", {5, 6, 7}, {9, 6, 7}, {}, true},
      {"3-D, one pixel of each volume", {3, 4, 3, 3, 3}, {5, 4, 1, 1, 1}, with({{"strides", Ints{3, 3, 3}}}), true},
      {"grouped: not a GEMM", {8, 24, 1, 1}, {24, 8, 1, 1}, with({{"group", std::int64_t{3}}}), false},

  };
}

void expectGemm(const std::string& implementation, bool gemm) {
  EXPECT_EQ(implementation.find("one GEMM over the batch") != std::string::npos, gemm) << implementation;
}

TEST(ConvGemmTest, ForwardMatchesTheConvolution) {
  unsigned seed = 1000;
  for (const GemmCase& c : gemmCases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = testing::randomTensor(DType::Float64, c.x, seed++);
    const Tensor w = testing::randomTensor(DType::Float64, c.w, seed++);
    const Tensor b = testing::randomTensor(DType::Float64, {c.w[0]}, seed++);
    testing::expectFloat32MatchesFloat64("Conv", {x, w, b}, c.attrs, 1);
    testing::expectFloat32MatchesFloat64("Conv", {x, w}, c.attrs, 1);
    const Tensor x32 = testing::toFloat32(x), w32 = testing::toFloat32(w), b32 = testing::toFloat32(b);
    expectGemm(testing::cpuKernelImplementation("Conv", {&x32, &w32, &b32}, c.attrs, 1), c.gemm);
  }
}

TEST(ConvGemmTest, GradientsMatchTheConvolution) {
  unsigned seed = 1100;
  for (const GemmCase& c : gemmCases()) {
    SCOPED_TRACE(c.name);
    const testing::ConvGradientInputs in = testing::expectConvGradientsMatchFloat64(c.x, c.w, c.attrs, seed);
    seed += 3;
    expectGemm(testing::cpuKernelImplementation("ConvGrad", {&in.dy32, &in.x32, &in.w32}, c.attrs, 3), c.gemm);
    expectGemm(testing::cpuKernelImplementation("ConvGradInput", {&in.dy32, &in.w32}, in.inputAttrs, 1), c.gemm);
  }
}

}  // namespace
}  // namespace strata
