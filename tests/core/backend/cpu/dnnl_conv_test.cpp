// Note [Fused ReLU] (graphs/relu_fusion.h) in the CPU convolution (core/backend/cpu/dnnl_conv.cpp): with
// fused_relu = 1 every path (oneDNN's convolution with a ReLU post-op, the Winograd output transform, the one-GEMM
// convolution and the float64 loops, both layouts where a path has them) writes exactly what Relu of the plain
// convolution writes, and says it fused the ReLU.

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

Tensor toChannelsLast(const Tensor& t) {
  Attributes a;
  a.set("perm", channelsLastPerm(t.rank()));
  return runOpEagerly("Transpose", {&t}, a).at(0);
}

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
        Attributes fused = plain;
        fused.set("fused_relu", std::int64_t{1});

        const std::string implementation = testing::cpuKernelImplementation("Conv", inputs, fused, 1);
        EXPECT_NE(implementation.find(c.path), std::string::npos) << implementation;
        EXPECT_NE(implementation.find(" + ReLU"), std::string::npos) << implementation;
        const Tensor convolved = runOpEagerly("Conv", inputs, plain).at(0);
        const Tensor want = runOpEagerly("Relu", {&convolved}, {}).at(0);
        const Tensor got = runOpEagerly("Conv", inputs, fused).at(0);
        ASSERT_EQ(got.shape(), want.shape());
        std::int64_t zeros = 0;
        for (std::int64_t i = 0; i < want.numel(); ++i) {
          const double g = c.dtype == DType::Float64 ? got.data<double>()[i] : got.data<float>()[i];
          const double e = c.dtype == DType::Float64 ? want.data<double>()[i] : want.data<float>()[i];
          ASSERT_EQ(g, e) << "element " << i;
          zeros += e == 0.0 ? 1 : 0;
        }
        // Random weights leave about half the outputs negative: the ReLU had something to do.
        EXPECT_GT(zeros, want.numel() / 5);
        EXPECT_LT(zeros, want.numel() - want.numel() / 5);
      }
    }
  }
}

}  // namespace
}  // namespace strata
