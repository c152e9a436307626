#include "strata/optim/optimizer.h"

#include <cmath>

#include <gtest/gtest.h>

#include "strata/optim/lr_schedule.h"

namespace strata {
namespace {

ParameterStore storeOf(std::vector<float> values) {
  Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<float>());
  return ParameterStore({{"w", t}});
}

TEST(OptimizerTest, ParametersAndGradientsAreViewsOfFlatBuffers) {
  Tensor a = Tensor::zeros(DType::Float32, {2, 2});
  Tensor b = Tensor::zeros(DType::Float32, {3});
  Tensor c = Tensor::zeros(DType::Float64, {5});
  ParameterStore store({{"a", a}, {"b", b}, {"c", c}});
  EXPECT_EQ(store.groupCount(), 2u);
  EXPECT_EQ(store.flatParameters(0).numel(), 7);
  EXPECT_EQ(store.info(1).offset, 4);
  store.gradient(1).data<float>()[2] = 5.0f;
  EXPECT_EQ(store.flatGradients(0).data<float>()[6], 5.0f);
  EXPECT_EQ(store.parameter(0).storage(), store.flatParameters(0).storage());
}

TEST(OptimizerTest, GradientClippingScalesByTheGlobalNorm) {
  ParameterStore store = storeOf({0.0f, 0.0f});
  store.gradient(0).data<float>()[0] = 3.0f;
  store.gradient(0).data<float>()[1] = 4.0f;  // norm 5
  Optimizer sgd(store, OptimizerOptions{.maxGradNorm = 1.0});
  EXPECT_NEAR(sgd.step(1.0), 5.0, 1e-6);
  // Clipped to norm 1 (PyTorch's max_norm / (norm + 1e-6)), then one plain SGD step with lr 1.
  EXPECT_NEAR(store.parameter(0).data<float>()[0], -0.6f, 1e-5);
  EXPECT_NEAR(store.parameter(0).data<float>()[1], -0.8f, 1e-5);
}

TEST(OptimizerTest, StepBumpsTheParameterVersion) {
  ParameterStore store = storeOf({1.0f});
  const std::uint64_t before = store.parameter(0).storage()->version();
  Optimizer(store, OptimizerOptions{}).step(0.1);
  EXPECT_GT(store.parameter(0).storage()->version(), before);
}

TEST(OptimizerTest, LearningRateSchedules) {
  LrScheduleOptions constant{.baseLr = 0.1};
  EXPECT_DOUBLE_EQ(learningRateAt(constant, 100), 0.1);
  LrScheduleOptions warmup{.baseLr = 0.1, .warmupSteps = 4};
  EXPECT_DOUBLE_EQ(learningRateAt(warmup, 0), 0.025);
  EXPECT_DOUBLE_EQ(learningRateAt(warmup, 3), 0.1);
  LrScheduleOptions step{.kind = LrScheduleKind::Step, .baseLr = 1.0, .stepSize = 10, .gamma = 0.5};
  EXPECT_DOUBLE_EQ(learningRateAt(step, 9), 1.0);
  EXPECT_DOUBLE_EQ(learningRateAt(step, 25), 0.25);
  LrScheduleOptions cosine{.kind = LrScheduleKind::Cosine, .baseLr = 1.0, .totalSteps = 100};
  EXPECT_DOUBLE_EQ(learningRateAt(cosine, 0), 1.0);
  EXPECT_NEAR(learningRateAt(cosine, 50), 0.5, 1e-12);
  EXPECT_NEAR(learningRateAt(cosine, 100), 0.0, 1e-12);
  EXPECT_THROW(parseLrScheduleKind("linear"), Error);
  EXPECT_THROW(parseOptimizerKind("lamb"), Error);
}

}  // namespace
}  // namespace strata
