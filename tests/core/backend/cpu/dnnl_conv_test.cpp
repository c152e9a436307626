// Note [Fused ReLU] (graphs/relu_fusion.h) in the CPU convolution (core/backend/cpu/dnnl_conv.cpp): with
// fused_relu = 1, or fused_clip = 1 and its bounds, every path (oneDNN's convolution with a ReLU post-op, the Winograd
// output transform, the one-GEMM convolution and the float64 loops, both layouts where a path has them) writes exactly
// what Relu (Clip) of the plain convolution writes, and says it fused it.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

struct FusedReluCase {
  const char* name;
  Shape x, w;
  std::vector<std::int64_t> pads;
  const char* winograd;  // STRATA_CPU_WINOGRAD for the case
  const char* path;      // what implementation() names
  DType dtype = DType::Float32;
};

std::vector<FusedReluCase> fusedReluCases() {
  return {
      {"oneDNN's convolution", {2, 8, 9, 11}, {16, 8, 3, 3}, {1, 1, 1, 1}, "0", "oneDNN"},
      {"Winograd", {2, 8, 9, 11}, {16, 8, 3, 3}, {1, 1, 1, 1}, "1", "Winograd"},
      {"one GEMM (1x1 on 1x1)", {8, 24, 1, 1}, {16, 24, 1, 1}, {0, 0, 0, 0}, "0", "one GEMM"},
      {"float64", {2, 3, 5, 4}, {4, 3, 3, 3}, {1, 1, 1, 1}, "0", "float64", DType::Float64},
  };
}

class WinogradMode {
 public:
  explicit WinogradMode(const char* mode) { setenv("STRATA_CPU_WINOGRAD", mode, 1); }
  ~WinogradMode() { unsetenv("STRATA_CPU_WINOGRAD"); }
  WinogradMode(const WinogradMode&) = delete;
  WinogradMode& operator=(const WinogradMode&) = delete;
};

TEST(DnnlConvTest, FusedReluWritesWhatReluOfTheConvolutionWrites) {
  unsigned seed = 4000;
  for (const FusedReluCase& c : fusedReluCases()) {
    const WinogradMode mode(c.winograd);
    const Tensor x = testing::randomTensor(c.dtype, c.x, seed++);
    const Tensor w = testing::randomTensor(c.dtype, c.w, seed++);
    const Tensor b = testing::randomTensor(c.dtype, {c.w[0]}, seed++);
    for (const bool last : {false, true}) {
      if (last && c.dtype != DType::Float32)
        continue;
      for (const bool withBias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << c.name << (last ? ", channels-last" : "") << (withBias ? ", bias" : ""));
        const Tensor xs = last ? toChannelsLast(x) : x;
        const Tensor ws = last ? toChannelsLast(w) : w;
        std::vector<const Tensor*> inputs{&xs, &ws};
        if (withBias)
          inputs.push_back(&b);
        Attributes plain;
        plain.set("pads", c.pads);
        if (last)
          plain.set("channels_last", std::int64_t{1});
        const Tensor convolved = runOpEagerly("Conv", inputs, plain).at(0);
        for (const bool clip : {false, true}) {
          SCOPED_TRACE(clip ? "Clip(-0.3, 0.4)" : "Relu");
          Attributes fused = plain;
          Tensor lo = Tensor::empty(c.dtype, {});
          Tensor hi = Tensor::empty(c.dtype, {});
          if (c.dtype == DType::Float64) {
            *lo.data<double>() = -0.3f;  // the float32 attribute's value, widened
            *hi.data<double>() = 0.4f;
          } else {
            *lo.data<float>() = -0.3f;
            *hi.data<float>() = 0.4f;
          }
          if (clip) {
            fused.set("fused_clip", std::int64_t{1});
            fused.set("clip_min", -0.3f);
            fused.set("clip_max", 0.4f);
          } else {
            fused.set("fused_relu", std::int64_t{1});
          }
          const std::string implementation = testing::cpuKernelImplementation("Conv", inputs, fused, 1);
          EXPECT_NE(implementation.find(c.path), std::string::npos) << implementation;
          EXPECT_NE(implementation.find(clip ? " + Clip" : " + ReLU"), std::string::npos) << implementation;
          const Tensor want = clip ? runOpEagerly("Clip", {&convolved, &lo, &hi}, {}).at(0)
                                   : runOpEagerly("Relu", {&convolved}, {}).at(0);
          const Tensor got = runOpEagerly("Conv", inputs, fused).at(0);
          ASSERT_EQ(got.shape(), want.shape());
          std::int64_t low = 0, high = 0;
          const double floor = clip ? -0.3f : 0.0f;
          for (std::int64_t i = 0; i < want.numel(); ++i) {
            const double g = c.dtype == DType::Float64 ? got.data<double>()[i] : got.data<float>()[i];
            const double e = c.dtype == DType::Float64 ? want.data<double>()[i] : want.data<float>()[i];
            ASSERT_EQ(g, e) << "element " << i;
            low += e == floor ? 1 : 0;
            high += clip && e == static_cast<double>(0.4f) ? 1 : 0;
          }
          // Random weights put a good share of the outputs below the floor (and above Clip's ceiling): the fused
          // activation had something to do.
          EXPECT_GT(low, want.numel() / 10);
          if (clip) {
            EXPECT_GT(high, want.numel() / 10);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
