// The CUDA backend's float16/bfloat16 ops against the CPU's (Note [Low precision on the CPU]: float32 arithmetic,
// one rounding per output). Run as gpu.CudaDeviceLowPrecision* with a GPU; skipped with the reason elsewhere.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>

#include "strata/op_registry.h"
#include "support/test_device.h"
#include "test_models.h"

namespace strata {
namespace {

Tensor randomLow(Shape shape, unsigned seed, DType low) {
  const Tensor t = testing::randomTensor(std::move(shape), seed);
  Attributes attrs;
  attrs.set("to", static_cast<std::int64_t>(dtypeToOnnx(low)));
  return runOpEagerly("Cast", {&t}, attrs).at(0);
}

std::vector<double> asDoubles(const Tensor& t) {
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::Float32) {
      values[static_cast<std::size_t>(i)] = t.data<float>()[i];
      continue;
    }
    const std::uint16_t bits = t.data<std::uint16_t>()[i];
    values[static_cast<std::size_t>(i)] = t.dtype() == DType::Float16 ? halfToFloat(bits) : bfloat16ToFloat(bits);
  }
  return values;
}

// Batch norm's float32 scale, bias, running mean and running variance for 16 channels.
std::array<Tensor, 4> batchNormParameters() {
  std::array<Tensor, 4> p = {Tensor::empty(DType::Float32, {16}), Tensor::empty(DType::Float32, {16}),
                             Tensor::zeros(DType::Float32, {16}), Tensor::empty(DType::Float32, {16})};
  for (std::int64_t c = 0; c < 16; ++c) {
    p[0].data<float>()[c] = 1.0f + 0.05f * static_cast<float>(c);
    p[1].data<float>()[c] = 0.01f * static_cast<float>(c);
    p[3].data<float>()[c] = 1.0f;
  }
  return p;
}

class CudaDeviceLowPrecisionTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!testing::testDevice().skipReason.empty() || testing::testDevice().device.type != DeviceType::CUDA) {
      GTEST_SKIP() << (testing::testDevice().skipReason.empty() ? "run with STRATA_TEST_DEVICE=cuda (ctest -L gpu)"
                                                                : testing::testDevice().skipReason);
    }
  }

  // The GPU's outputs against the CPU's: the same float32 sums in another order, so a rounding may land one
  // 16-bit step apart; the relative L2 error stays below the dtype's epsilon. Float32 outputs (batch norm's
  // statistics and parameter gradients) within 1e-4.
  void expectMatchesCpu(const std::string& op, const std::vector<Tensor>& inputs, const Attributes& attrs = {},
                        std::size_t outputs = 1) {
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : inputs) {
      ptrs.push_back(&t);
    }
    const std::vector<Tensor> cpu = runOpEagerly(op, ptrs, attrs, outputs, true);
    const std::vector<Tensor> gpu = runOpEagerly(op, ptrs, attrs, outputs, true, testing::testDevice().device);
    for (std::size_t k = 0; k < cpu.size(); ++k) {
      ASSERT_EQ(gpu[k].dtype(), cpu[k].dtype()) << op << " output " << k;
      const double eps = cpu[k].dtype() == DType::Float32 ? 1e-4 : GetParam() == DType::BFloat16 ? 0x1p-8 : 0x1p-11;
      ASSERT_EQ(gpu[k].shape(), cpu[k].shape()) << op << " output " << k;
      const std::vector<double> expected = asDoubles(cpu[k]);
      const std::vector<double> actual = asDoubles(gpu[k]);
      double diff = 0;
      double norm = 0;
      for (std::size_t i = 0; i < expected.size(); ++i) {
        diff += (actual[i] - expected[i]) * (actual[i] - expected[i]);
        norm += expected[i] * expected[i];
      }
      EXPECT_LE(std::sqrt(diff / std::max(norm, 1e-30)), eps) << op << " output " << k;
    }
  }
};

TEST_P(CudaDeviceLowPrecisionTest, Convolution) {
  const DType low = GetParam();
  Attributes attrs;
  attrs.set("pads", std::vector<std::int64_t>{1, 1, 1, 1});
  const Tensor x = randomLow({4, 8, 12, 12}, 1, low);
  const Tensor w = randomLow({16, 8, 3, 3}, 2, low);
  expectMatchesCpu("Conv", {x, w, randomLow({16}, 3, low)}, attrs);
  expectMatchesCpu("ConvGrad", {randomLow({4, 16, 12, 12}, 4, low), x, w}, attrs, 3);
}

TEST_P(CudaDeviceLowPrecisionTest, MatrixProducts) {
  const DType low = GetParam();
  Attributes transB;
  transB.set("transB", std::int64_t{1});
  expectMatchesCpu("Gemm", {randomLow({32, 64}, 5, low), randomLow({48, 64}, 6, low), randomLow({48}, 7, low)}, transB);
  expectMatchesCpu("MatMul", {randomLow({3, 32, 64}, 8, low), randomLow({64, 16}, 9, low)});
}

TEST_P(CudaDeviceLowPrecisionTest, FollowOpsAndSums) {
  const DType low = GetParam();
  const Tensor a = randomLow({4, 8, 8, 8}, 10, low);
  expectMatchesCpu("Relu", {a});
  expectMatchesCpu("ReluGrad", {randomLow({4, 8, 8, 8}, 11, low), a});
  expectMatchesCpu("Add", {a, randomLow({4, 8, 8, 8}, 12, low)});
  Attributes pool;
  pool.set("kernel_shape", std::vector<std::int64_t>{3, 3});
  pool.set("strides", std::vector<std::int64_t>{2, 2});
  pool.set("pads", std::vector<std::int64_t>{1, 1, 1, 1});
  expectMatchesCpu("MaxPool", {a}, pool);
  expectMatchesCpu("MaxPoolGrad", {randomLow({4, 8, 4, 4}, 13, low), a}, pool);
  Tensor axes = Tensor::empty(DType::Int64, {2});
  axes.data<std::int64_t>()[0] = 0;
  axes.data<std::int64_t>()[1] = 2;
  expectMatchesCpu("ReduceSum", {a, axes});
  Attributes perm;
  perm.set("perm", std::vector<std::int64_t>{0, 2, 3, 1});
  expectMatchesCpu("Transpose", {a}, perm);
}

TEST_P(CudaDeviceLowPrecisionTest, BatchNormWithFloat32Statistics) {
  const DType low = GetParam();
  const Tensor x = randomLow({8, 16, 6, 6}, 14, low);
  const auto [scale, bias, mean, var] = batchNormParameters();
  Attributes training;
  training.set("training_mode", std::int64_t{1});
  expectMatchesCpu("BatchNormalization", {x, scale, bias, mean, var}, training, 3);
  expectMatchesCpu("BatchNormalizationGrad", {randomLow({8, 16, 6, 6}, 15, low), x, scale}, training, 3);
  Attributes inference;
  inference.set("training_mode", std::int64_t{0});
  expectMatchesCpu("BatchNormalization", {x, scale, bias, mean, var}, inference, 1);
  expectMatchesCpu("BatchNormalizationGrad", {randomLow({8, 16, 6, 6}, 16, low), x, scale, mean, var}, inference, 3);
}

// Strata's batch statistics, which take over where cuDNN refuses a training forward (cudnn_batchnorm.cpp), forced
// with STRATA_CUDA_BATCHNORM=strata: 16-bit and float32 X, channels-first and channels-last.
TEST_P(CudaDeviceLowPrecisionTest, BatchNormTrainingWithoutCudnn) {
  ASSERT_EQ(setenv("STRATA_CUDA_BATCHNORM", "strata", 1), 0);
  const auto [scale, bias, mean, var] = batchNormParameters();
  Attributes training;
  training.set("training_mode", std::int64_t{1});
  training.set("momentum", 0.8f);
  Attributes trainingLast = training;
  trainingLast.set("channels_last", std::int64_t{1});
  for (const DType dtype : {GetParam(), DType::Float32}) {
    expectMatchesCpu("BatchNormalization", {randomLow({8, 16, 6, 6}, 17, dtype), scale, bias, mean, var}, training, 3);
    expectMatchesCpu("BatchNormalization", {randomLow({8, 6, 6, 16}, 18, dtype), scale, bias, mean, var}, trainingLast,
                     3);
  }
  unsetenv("STRATA_CUDA_BATCHNORM");
}

INSTANTIATE_TEST_SUITE_P(CudaDeviceLowPrecision, CudaDeviceLowPrecisionTest,
                         ::testing::Values(DType::BFloat16, DType::Float16),
                         [](const auto& test) { return std::string(dtypeName(test.param)); });

}  // namespace
}  // namespace strata
