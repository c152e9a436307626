// The CPU's 16-bit ops (Note [Low precision on the CPU]): float32 arithmetic on exactly widened inputs, each
// output rounded once.
#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/op_registry.h"
#include "test_models.h"

namespace strata {
namespace {

Tensor cast(const Tensor& t, DType to) {
  Attributes attrs;
  attrs.set("to", static_cast<std::int64_t>(dtypeToOnnx(to)));
  return runOpEagerly("Cast", {&t}, attrs).at(0);
}

// op(16-bit inputs) against round(op(float32 copies of the same values)), bit for bit.
void expectEmulated(const std::string& op, const std::vector<Tensor>& float32Inputs, const Attributes& attrs, DType low,
                    std::size_t outputs = 1) {
  std::vector<Tensor> lowInputs;
  std::vector<Tensor> wideInputs;
  for (const Tensor& t : float32Inputs) {
    lowInputs.push_back(t.dtype() == DType::Float32 ? cast(t, low) : t);
    wideInputs.push_back(t.dtype() == DType::Float32 ? cast(lowInputs.back(), DType::Float32) : t);
  }
  std::vector<const Tensor*> lowPtrs;
  std::vector<const Tensor*> widePtrs;
  for (std::size_t i = 0; i < lowInputs.size(); ++i) {
    lowPtrs.push_back(&lowInputs[i]);
    widePtrs.push_back(&wideInputs[i]);
  }
  const std::vector<Tensor> actual = runOpEagerly(op, lowPtrs, attrs, outputs);
  const std::vector<Tensor> wide = runOpEagerly(op, widePtrs, attrs, outputs);
  ASSERT_EQ(actual.size(), wide.size());
  for (std::size_t k = 0; k < actual.size(); ++k) {
    ASSERT_EQ(actual[k].dtype(), low) << op << " output " << k;
    const Tensor expected = cast(wide[k], low);
    ASSERT_EQ(actual[k].shape(), expected.shape());
    for (std::int64_t i = 0; i < expected.numel(); ++i) {
      ASSERT_EQ(actual[k].data<std::uint16_t>()[i], expected.data<std::uint16_t>()[i]) << op << " element " << i;
    }
  }
}

class LowPrecisionOpsTest : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecisionOpsTest, ConvolutionAndItsGradient) {
  Attributes attrs;
  attrs.set("pads", std::vector<std::int64_t>{1, 1, 1, 1});
  const Tensor x = testing::randomTensor({2, 3, 6, 6}, 1);
  const Tensor w = testing::randomTensor({4, 3, 3, 3}, 2);
  const Tensor b = testing::randomTensor({4}, 3);
  expectEmulated("Conv", {x, w, b}, attrs, GetParam());
  const Tensor dy = testing::randomTensor({2, 4, 6, 6}, 4);
  expectEmulated("ConvGrad", {dy, x, w}, attrs, GetParam(), 3);
}

TEST_P(LowPrecisionOpsTest, MatrixProducts) {
  Attributes transB;
  transB.set("transB", std::int64_t{1});
  expectEmulated("Gemm",
                 {testing::randomTensor({5, 8}, 5), testing::randomTensor({3, 8}, 6), testing::randomTensor({3}, 7)},
                 transB, GetParam());
  expectEmulated("MatMul", {testing::randomTensor({2, 5, 8}, 8), testing::randomTensor({8, 3}, 9)}, {}, GetParam());
}

TEST_P(LowPrecisionOpsTest, FollowOpsAndSums) {
  const Tensor a = testing::randomTensor({2, 4, 4, 4}, 10);
  expectEmulated("Relu", {a}, {}, GetParam());
  expectEmulated("ReluGrad", {testing::randomTensor({2, 4, 4, 4}, 11), a}, {}, GetParam());
  expectEmulated("Add", {a, testing::randomTensor({4, 1, 1}, 12)}, {}, GetParam());
  Attributes pool;
  pool.set("kernel_shape", std::vector<std::int64_t>{2, 2});
  pool.set("strides", std::vector<std::int64_t>{2, 2});
  expectEmulated("MaxPool", {a}, pool, GetParam());
  expectEmulated("MaxPoolGrad", {testing::randomTensor({2, 4, 2, 2}, 13), a}, pool, GetParam());
  Tensor axes = Tensor::empty(DType::Int64, {1});
  axes.data<std::int64_t>()[0] = 0;
  expectEmulated("ReduceSum", {a, axes}, {}, GetParam());
}

TEST_P(LowPrecisionOpsTest, BatchNormKeepsItsStatisticsInFloat32) {
  const DType low = GetParam();
  const Tensor x = cast(testing::randomTensor({4, 3, 5, 5}, 20), low);
  const Tensor scale = testing::randomTensor({3}, 21);
  const Tensor bias = testing::randomTensor({3}, 22);
  Tensor mean = Tensor::zeros(DType::Float32, {3});
  Tensor var = Tensor::zeros(DType::Float32, {3});
  for (std::int64_t c = 0; c < 3; ++c) {
    var.data<float>()[c] = 1.0f;
  }
  Attributes training;
  training.set("training_mode", std::int64_t{1});
  const std::vector<Tensor> outs =
      runOpEagerly("BatchNormalization", {&x, &scale, &bias, &mean, &var}, training, 3, true);
  EXPECT_EQ(outs[0].dtype(), low);
  EXPECT_EQ(outs[1].dtype(), DType::Float32);  // running statistics
  EXPECT_EQ(outs[2].dtype(), DType::Float32);
  const Tensor wideX = cast(x, DType::Float32);
  const std::vector<Tensor> wide =
      runOpEagerly("BatchNormalization", {&wideX, &scale, &bias, &mean, &var}, training, 3, true);
  const Tensor expected = cast(wide[0], low);
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_EQ(outs[0].data<std::uint16_t>()[i], expected.data<std::uint16_t>()[i]) << i;
  }
  EXPECT_EQ(outs[1].data<float>()[0], wide[1].data<float>()[0]);
  const Tensor dy = cast(testing::randomTensor({4, 3, 5, 5}, 23), low);
  const std::vector<Tensor> grads = runOpEagerly("BatchNormalizationGrad", {&dy, &x, &scale}, training, 3, true);
  EXPECT_EQ(grads[0].dtype(), low);
  EXPECT_EQ(grads[1].dtype(), DType::Float32);
  EXPECT_EQ(grads[2].dtype(), DType::Float32);
  // A 16-bit scale is not what batch norm takes.
  const Tensor lowScale = cast(scale, low);
  EXPECT_THROW(runOpEagerly("BatchNormalization", {&x, &lowScale, &bias, &mean, &var}, training, 3, true), Error);
}

TEST_P(LowPrecisionOpsTest, DataMovementKeepsTheBits) {
  const Tensor low = cast(testing::randomTensor({2, 3, 4}, 14), GetParam());
  Attributes perm;
  perm.set("perm", std::vector<std::int64_t>{2, 0, 1});
  const Tensor moved = runOpEagerly("Transpose", {&low}, perm).at(0);
  ASSERT_EQ(moved.dtype(), GetParam());
  EXPECT_EQ(moved.data<std::uint16_t>()[1], low.data<std::uint16_t>()[4]);  // [0,0,1] <- [0,1,0]
}

TEST_P(LowPrecisionOpsTest, MixedWidthsAreRefusedWithTheNode) {
  const Tensor low = cast(testing::randomTensor({4}, 15), GetParam());
  const Tensor wide = testing::randomTensor({4}, 16);
  try {
    runOpEagerly("Add", {&low, &wide}, {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inputs mix"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
}

TEST_P(LowPrecisionOpsTest, OnlyDeclaredOpsTake16Bits) {
  EXPECT_TRUE(OpRegistry::instance().schema("Conv")->lowPrecision);
  EXPECT_TRUE(OpRegistry::instance().schema("Reshape")->lowPrecision);
  EXPECT_FALSE(OpRegistry::instance().schema("Softmax")->lowPrecision);
  const Tensor low = cast(testing::randomTensor({2, 4}, 17), GetParam());
  EXPECT_THROW(runOpEagerly("Softmax", {&low}, {}), Error);
}

INSTANTIATE_TEST_SUITE_P(BothWidths, LowPrecisionOpsTest, ::testing::Values(DType::BFloat16, DType::Float16),
                         [](const auto& test) { return std::string(dtypeName(test.param)); });

}  // namespace
}  // namespace strata
