// Note [Winograd convolutions] (core/backend/cpu/conv_winograd.h): float32 3x3 stride-1 convolutions and their data
// gradients as Winograd F(4x4, 3x3). The float64 kernels (direct loops) are the reference, channels-first and
// channels-last, on sizes that leave partial tiles, on every pad from 0 to 2, with and without bias. The kernels are
// forced onto the path with STRATA_CPU_WINOGRAD=1 (the automatic choice wants more channels and pixels than a test
// needs), and must say they took it. The tolerance is 1e-4 of the largest output magnitude, not the direct kernels'
// 1e-5: F(4x4, 3x3)'s transforms scale intermediate sums by up to 8 and 1/24.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

constexpr double kTolerance = 1e-4;

struct WinogradCase {
  const char* name;
  Shape x, w;
  Ints pads;
};

std::vector<WinogradCase> cases() {
  return {
      {"pads 1, partial tiles both ways, C != O", {2, 8, 9, 11}, {5, 8, 3, 3}, {1, 1, 1, 1}},
      {"no padding (the data gradient pads by 2)", {2, 6, 10, 7}, {4, 6, 3, 3}, {0, 0, 0, 0}},
      {"asymmetric pads", {1, 7, 8, 9}, {6, 7, 3, 3}, {2, 0, 1, 2}},
      {"a map smaller than one tile", {3, 5, 3, 2}, {4, 5, 3, 3}, {1, 1, 1, 1}},
  };
}

Attributes convAttrs(const Ints& pads, bool channelsLast = false) {
  Attributes a;
  a.set("pads", pads);
  if (channelsLast)
    a.set("channels_last", std::int64_t{1});
  return a;
}

class ScopedWinograd {
 public:
  explicit ScopedWinograd(const char* mode) { setenv("STRATA_CPU_WINOGRAD", mode, 1); }
  ~ScopedWinograd() { unsetenv("STRATA_CPU_WINOGRAD"); }
  ScopedWinograd(const ScopedWinograd&) = delete;
  ScopedWinograd& operator=(const ScopedWinograd&) = delete;
};

Tensor cast(const Tensor& t, DType dtype) {
  Attributes a;
  a.set("to", static_cast<std::int64_t>(dtypeToOnnx(dtype)));
  return runOpEagerly("Cast", {&t}, a).at(0);
}

// A float64 channels-first tensor as a kernel under test reads it: float32, transposed when `last`.
Tensor stored(const Tensor& t, bool last) {
  return cast(last ? toChannelsLast(t) : t, DType::Float32);
}

bool winograd(const std::string& implementation) {
  return implementation.find("Winograd F(4x4, 3x3)") != std::string::npos;
}

// `got` (float32, channels-last when `last`) against `want` (float64, channels-first).
void expectClose(const Tensor& got, const Tensor& want, bool last, const std::string& what) {
  const Tensor expected = last ? toChannelsLast(want) : want;
  const Tensor actual = cast(got, DType::Float64);
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  double scale = 1e-6;
  for (std::int64_t i = 0; i < expected.numel(); ++i)
    scale = std::max(scale, std::abs(expected.data<double>()[i]));
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_NEAR(actual.data<double>()[i], expected.data<double>()[i], kTolerance * scale) << what << " element " << i;
  }
}

TEST(ConvWinogradTest, ForwardMatchesFloat64BothLayouts) {
  const ScopedWinograd forced("1");
  unsigned seed = 3000;
  for (const WinogradCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = testing::randomTensor(DType::Float64, c.x, seed++);
    const Tensor w = testing::randomTensor(DType::Float64, c.w, seed++);
    const Tensor b = testing::randomTensor(DType::Float64, {c.w[0]}, seed++);
    for (bool withBias : {true, false}) {
      std::vector<const Tensor*> in64{&x, &w};
      if (withBias)
        in64.push_back(&b);
      const Tensor want = runOpEagerly("Conv", in64, convAttrs(c.pads)).at(0);
      for (bool last : {false, true}) {
        const Tensor x32 = stored(x, last);
        const Tensor w32 = stored(w, last);
        const Tensor b32 = cast(b, DType::Float32);
        std::vector<const Tensor*> in32{&x32, &w32};
        if (withBias)
          in32.push_back(&b32);
        const Attributes attrs = convAttrs(c.pads, last);
        const std::string implementation = testing::cpuKernelImplementation("Conv", in32, attrs, 1);
        EXPECT_TRUE(winograd(implementation)) << implementation;
        expectClose(runOpEagerly("Conv", in32, attrs).at(0), want, last,
                    std::string(last ? "channels-last" : "channels-first") + (withBias ? " with bias" : ""));
      }
    }
  }
}

TEST(ConvWinogradTest, DataGradientMatchesFloat64BothLayouts) {
  const ScopedWinograd forced("1");
  unsigned seed = 3100;
  for (const WinogradCase& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = testing::randomTensor(DType::Float64, c.x, seed++);
    const Tensor w = testing::randomTensor(DType::Float64, c.w, seed++);
    const Tensor y = runOpEagerly("Conv", {&x, &w}, convAttrs(c.pads)).at(0);
    const Tensor dy = testing::randomTensor(DType::Float64, y.shape(), seed++);
    const std::vector<Tensor> want = runOpEagerly("ConvGrad", {&dy, &x, &w}, convAttrs(c.pads), 3);
    for (bool last : {false, true}) {
      const std::string layout = last ? "channels-last" : "channels-first";
      const Tensor dy32 = stored(dy, last);
      const Tensor x32 = stored(x, last);
      const Tensor w32 = stored(w, last);
      const Attributes attrs = convAttrs(c.pads, last);
      const std::string implementation = testing::cpuKernelImplementation("ConvGrad", {&dy32, &x32, &w32}, attrs, 3);
      EXPECT_NE(implementation.find("data: Winograd"), std::string::npos) << implementation;
      const std::vector<Tensor> got = runOpEagerly("ConvGrad", {&dy32, &x32, &w32}, attrs, 3);
      expectClose(got[0], want[0], last, layout + " dX");
      expectClose(got[1], want[1], last, layout + " dW (oneDNN beside Winograd's dX)");
      Attributes inputAttrs = attrs;
      inputAttrs.set("input_shape", last ? toChannelsLast(c.x) : c.x);
      expectClose(runOpEagerly("ConvGradInput", {&dy32, &w32}, inputAttrs).at(0), want[0], last,
                  layout + " ConvGradInput");
    }
  }
}

TEST(ConvWinogradTest, TakenWhereItPaysAndNotWhereItCannotApply) {
  const Tensor w = testing::randomTensor(DType::Float32, {64, 64, 3, 3}, 1);
  const Tensor x = testing::randomTensor(DType::Float32, {1, 64, 16, 16}, 2);
  const Tensor small = testing::randomTensor(DType::Float32, {1, 64, 8, 8}, 3);
  const Attributes same = convAttrs({1, 1, 1, 1});
  EXPECT_TRUE(winograd(testing::cpuKernelImplementation("Conv", {&x, &w}, same, 1)));
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&small, &w}, same, 1)));
  {
    const ScopedWinograd off("0");
    EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x, &w}, same, 1)));
  }
  const ScopedWinograd forced("1");
  Attributes strided = same;
  strided.set("strides", Ints{2, 2});
  Attributes dilated = same;
  dilated.set("dilations", Ints{2, 2});
  Attributes grouped = same;
  grouped.set("group", std::int64_t{2});
  const Tensor groupedW = testing::randomTensor(DType::Float32, {64, 32, 3, 3}, 4);
  const Tensor wide = testing::randomTensor(DType::Float32, {64, 64, 5, 5}, 5);
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x, &w}, strided, 1)));
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x, &w}, dilated, 1)));
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x, &groupedW}, grouped, 1)));
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x, &wide}, convAttrs({2, 2, 2, 2}), 1)));
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x, &w}, convAttrs({3, 3, 3, 3}), 1)));
  const Tensor x64 = testing::randomTensor(DType::Float64, {1, 64, 16, 16}, 6);
  const Tensor w64 = testing::randomTensor(DType::Float64, {64, 64, 3, 3}, 7);
  EXPECT_FALSE(winograd(testing::cpuKernelImplementation("Conv", {&x64, &w64}, same, 1)));
}

}  // namespace
}  // namespace strata
