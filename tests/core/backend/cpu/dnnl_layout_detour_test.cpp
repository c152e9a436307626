// Note [Layout detours] (core/backend/cpu/dnnl_layout_detour.h): the oneDNN kernels of the paper models' ops run
// JIT-compiled code on plain activations, on whichever ISA the host has. The same tests run as avx2.* under
// ONEDNN_MAX_CPU_ISA=AVX2 (tests/CMakeLists.txt), where oneDNN pools plain NCHW with a reference loop.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

std::string implementationOf(const std::string& type, const std::vector<TensorMeta>& inputs, const Attributes& attrs,
                             bool training = false) {
  const OpSchema* schema = OpRegistry::instance().schema(type);
  const KernelFactory* factory = OpRegistry::instance().kernel(type, DeviceType::CPU);
  EXPECT_TRUE(schema != nullptr && factory != nullptr) << type;
  std::vector<InputInfo> infos;
  for (const TensorMeta& meta : inputs)
    infos.push_back(InputInfo{true, meta});
  const std::string nodeName = "node";
  const std::vector<TensorMeta> outputs = schema->inferShapes(
      ShapeContext{infos, attrs, training && type == "BatchNormalization" ? 3u : 1u, nodeName, type});
  std::unique_ptr<OpKernel> kernel = (*factory)(KernelInit{infos, outputs, attrs, nodeName, training});
  return kernel->implementation();
}

bool isJit(const std::string& implementation) {
  return implementation.find("jit") != std::string::npos || implementation.find("brg") != std::string::npos;
}

// Note [2x2 max pooling loop]: max pooling with 2x2 windows at stride 2 runs Strata's own vectorised loops.
bool isPairLoop(const std::string& implementation) {
  return implementation == "2x2 windows, vectorised loop";
}

// Note [3x3 max pooling loop]: so does max pooling with 3x3 windows at stride 2.
bool isThreeByThreeLoop(const std::string& implementation) {
  return implementation == "3x3 windows at stride 2, vectorised loop";
}

TensorMeta f32(const Shape& shape) {
  return TensorMeta{DType::Float32, shape};
}

TEST(LayoutDetourTest, PoolingRunsJitKernelsOnPlainActivations) {
  Attributes maxPool;  // the bundled CNN's and VGG's
  maxPool.set("kernel_shape", Ints{2, 2});
  maxPool.set("strides", Ints{2, 2});
  Attributes stem;  // ResNet's stem
  stem.set("kernel_shape", Ints{3, 3});
  stem.set("strides", Ints{2, 2});
  stem.set("pads", Ints{1, 1, 1, 1});
  Attributes strideOne;  // Inception's: oneDNN's
  strideOne.set("kernel_shape", Ints{3, 3});
  strideOne.set("pads", Ints{1, 1, 1, 1});
  Attributes average;  // DenseNet's transitions
  average.set("kernel_shape", Ints{2, 2});
  average.set("strides", Ints{2, 2});
  const Attributes none;
  for (std::int64_t channels : {1, 3, 32, 64}) {
    SCOPED_TRACE(channels);
    for (const auto& [type, attrs] : {std::pair<std::string, const Attributes*>{"MaxPool", &maxPool},
                                      {"MaxPool", &stem},
                                      {"MaxPool", &strideOne},
                                      {"AveragePool", &average}}) {
      const std::string implementation = implementationOf(type, {f32({8, channels, 28, 28})}, *attrs);
      if (attrs == &maxPool) {
        EXPECT_TRUE(isPairLoop(implementation)) << type << ": " << implementation;
      } else if (attrs == &stem) {
        EXPECT_TRUE(isThreeByThreeLoop(implementation)) << type << ": " << implementation;
      } else {
        EXPECT_TRUE(isJit(implementation)) << type << ": " << implementation;
      }
    }
    // Note [Global mean loop]: a vectorised mean per plane, no reorders.
    EXPECT_EQ(implementationOf("GlobalAveragePool", {f32({8, channels, 28, 28})}, none), "vectorised mean per plane");
  }
}

// Note [Batch-norm loops]: batch norm runs Strata's own vectorised loops on plain activations, never oneDNN's
// reference-speed plain-layout kernel (ncsp_bnorm) and without reorders.
TEST(LayoutDetourTest, BatchNormRunsVectorisedLoopsOnPlainActivations) {
  for (std::int64_t channels : {3, 16, 64, 256}) {
    SCOPED_TRACE(channels);
    const std::vector<TensorMeta> inputs{f32({8, channels, 8, 8}), f32({channels}), f32({channels}), f32({channels}),
                                         f32({channels})};
    const Attributes inference;
    Attributes training;
    training.set("training_mode", std::int64_t{1});
    EXPECT_EQ(implementationOf("BatchNormalization", inputs, inference), "vectorised loop");
    EXPECT_EQ(implementationOf("BatchNormalization", inputs, training, true), "vectorised loop");
  }
}

TEST(LayoutDetourTest, ConvolutionsRunJitKernels) {
  Attributes three;
  three.set("kernel_shape", Ints{3, 3});
  three.set("pads", Ints{1, 1, 1, 1});
  Attributes one;
  one.set("kernel_shape", Ints{1, 1});
  for (const auto& [c, m, attrs] : {std::tuple<std::int64_t, std::int64_t, const Attributes*>{1, 32, &three},
                                    {3, 64, &three},
                                    {64, 64, &three},
                                    {64, 256, &one},
                                    {256, 64, &one}}) {
    const Shape kernel = attrs == &three ? Shape{m, c, 3, 3} : Shape{m, c, 1, 1};
    const std::string implementation = implementationOf("Conv", {f32({8, c, 16, 16}), f32(kernel)}, *attrs);
    EXPECT_TRUE(isJit(implementation)) << c << " -> " << m << ": " << implementation;
  }
}

Tensor toFloat32(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.meta().shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
  return out;
}

// Note [Pooling backward]: float32 MaxPoolGrad runs oneDNN's JIT forward_training and backward (2x2 and 3x3 windows
// at stride 2: Strata's loops, Note [2x2 max pooling loop], Note [3x3 max pooling loop]); it must route every gradient
// as the float64 direct loop does: to the first maximum of its window. Inputs from {0, 1, 2} make most windows tie (as
// after a ReLU); integer-valued gradients keep the sums exact.
TEST(LayoutDetourTest, MaxPoolGradRunsJitKernelsAndKeepsTheFirstMaximum) {
  Attributes pairs;  // the bundled CNN's and VGG's
  pairs.set("kernel_shape", Ints{2, 2});
  pairs.set("strides", Ints{2, 2});
  Attributes stem;  // ResNet's stem: overlapping windows, padding
  stem.set("kernel_shape", Ints{3, 3});
  stem.set("strides", Ints{2, 2});
  stem.set("pads", Ints{1, 1, 1, 1});
  Attributes strideOne;  // overlapping windows on oneDNN
  strideOne.set("kernel_shape", Ints{3, 3});
  strideOne.set("pads", Ints{1, 1, 1, 1});
  Attributes dilated;  // oneDNN 2.6 has no JIT kernel for it: the direct loop, same rule
  dilated.set("kernel_shape", Ints{2, 2});
  dilated.set("dilations", Ints{2, 2});
  for (const Attributes* attrs : {&pairs, &stem, &strideOne, &dilated}) {
    for (std::int64_t channels : {3, 32}) {
      const Shape xShape{4, channels, 11, 12};
      Tensor x64 = Tensor::empty(DType::Float64, xShape);
      std::uint32_t state = 12345;
      auto next = [&state] {
        state = state * 1664525u + 1013904223u;
        return state >> 16;
      };
      for (std::int64_t i = 0; i < x64.numel(); ++i)
        x64.data<double>()[i] = static_cast<double>(next() % 3);
      const std::vector<TensorMeta> yMeta = OpRegistry::instance().schema("MaxPool")->inferShapes(
          ShapeContext{{InputInfo{true, f32(xShape)}}, *attrs, 1, "node", "MaxPool"});
      Tensor dy64 = Tensor::empty(DType::Float64, yMeta.at(0).shape);
      for (std::int64_t i = 0; i < dy64.numel(); ++i)
        dy64.data<double>()[i] = static_cast<double>(1 + next() % 50);
      const Tensor x32 = toFloat32(x64);
      const Tensor dy32 = toFloat32(dy64);
      const std::string implementation = implementationOf("MaxPoolGrad", {dy32.meta(), x32.meta()}, *attrs);
      if (attrs == &pairs) {
        EXPECT_TRUE(isPairLoop(implementation)) << implementation;
      } else if (attrs == &stem) {
        EXPECT_TRUE(isThreeByThreeLoop(implementation)) << implementation;
      } else if (attrs != &dilated) {
        EXPECT_TRUE(isJit(implementation)) << implementation;
      }
      const Tensor expected = runOpEagerly("MaxPoolGrad", {&dy64, &x64}, *attrs).at(0);
      const Tensor actual = runOpEagerly("MaxPoolGrad", {&dy32, &x32}, *attrs).at(0);
      ASSERT_EQ(actual.numel(), expected.numel());
      for (std::int64_t i = 0; i < actual.numel(); ++i) {
        ASSERT_EQ(actual.data<float>()[i], expected.data<double>()[i])
            << implementation << ", " << channels << " channels, at flat index " << i;
      }
    }
  }
}

TEST(LayoutDetourTest, TheProfileSaysWhenAKernelReorders) {
  Attributes maxPool;  // 3x3 at stride 1 (windows at stride 2 run Strata's loops)
  maxPool.set("kernel_shape", Ints{3, 3});
  maxPool.set("pads", Ints{1, 1, 1, 1});
  const std::string implementation = implementationOf("MaxPool", {f32({8, 32, 28, 28})}, maxPool);
  ASSERT_EQ(implementation.rfind("oneDNN ", 0), 0u) << implementation;
  // Either oneDNN pools plain NCHW itself or the kernel says which layout it detours through.
  if (implementation.find("reordered") != std::string::npos) {
    EXPECT_NE(implementation.find("-channel blocks"), std::string::npos) << implementation;
  }
  // Float64 has no oneDNN kernel: the direct loop says so.
  const std::string f64 = implementationOf("MaxPool", {TensorMeta{DType::Float64, {2, 3, 8, 8}}}, maxPool);
  EXPECT_EQ(f64, "direct loop");
}

}  // namespace
}  // namespace strata
