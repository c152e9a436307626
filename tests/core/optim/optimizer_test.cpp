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
  EXPECT_THROW(parseOptimizerKind("lion"), Error);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

std::int64_t optimizerStateBytes() {
  return allocatorFor(Device::cpu())
      .stats()
      .snapshot()
      .current[static_cast<std::size_t>(MemoryCategory::OptimizerState)];
}

// Two float32 parameters and a float64 one: two flat buffers.
ParameterStore threeParameterStore() {
  Tensor a = Tensor::empty(DType::Float32, {40});
  Tensor b = Tensor::empty(DType::Float32, {25});
  Tensor c = Tensor::empty(DType::Float64, {30});
  for (std::int64_t i = 0; i < 40; ++i) {
    a.data<float>()[i] = std::sin(static_cast<float>(i));
  }
  for (std::int64_t i = 0; i < 25; ++i) {
    b.data<float>()[i] = std::cos(static_cast<float>(i));
  }
  for (std::int64_t i = 0; i < 30; ++i) {
    c.data<double>()[i] = std::sin(0.5 * static_cast<double>(i));
  }
  return ParameterStore({{"a", a}, {"b", b}, {"c", c}});
}

// The same pseudo-random gradients in any store built by threeParameterStore.
void fillGradients(ParameterStore& store, int step) {
  const Tensor& f32 = store.flatGradients(0);
  for (std::int64_t i = 0; i < f32.numel(); ++i) {
    f32.data<float>()[i] = std::sin(static_cast<float>(i * 7 + step * 13)) * 0.5f;
  }
  const Tensor& f64 = store.flatGradients(1);
  for (std::int64_t i = 0; i < f64.numel(); ++i) {
    f64.data<double>()[i] = std::cos(static_cast<double>(i * 3 + step * 5)) * 0.25;
  }
}

struct SliceCase {
  const char* name;
  OptimizerOptions options;
};

class SliceOptimizerTest : public ::testing::TestWithParam<SliceCase> {};

TEST_P(SliceOptimizerTest, MatchesTheFullOptimizerOnItsSliceAndAllocatesStateForItOnly) {
  const OptimizerOptions& options = GetParam().options;
  ParameterStore reference = threeParameterStore();
  ParameterStore sliced = threeParameterStore();
  const ParameterStore untouched = threeParameterStore();
  Optimizer full(reference, options);

  // [10, 50) of the float32 buffer (across parameters a and b) and [5, 20) of the float64 one.
  const std::int64_t stateBefore = optimizerStateBytes();
  Optimizer shard(
      {ParameterSlice{sliced.flatParameters(0).flatSlice(10, 40), sliced.flatGradients(0).flatSlice(10, 40)},
       ParameterSlice{sliced.flatParameters(1).flatSlice(5, 15), sliced.flatGradients(1).flatSlice(5, 15)}},
      options);
  const std::int64_t stateBytes = static_cast<std::int64_t>(optimizerStatesPerSlice(options)) * (40 * 4 + 15 * 8);
  EXPECT_EQ(optimizerStateBytes() - stateBefore, stateBytes);
  std::int64_t reported = 0;
  for (const Tensor& t : shard.state()) {
    reported += static_cast<std::int64_t>(t.bytes());
  }
  EXPECT_EQ(reported, stateBytes);

  for (int step = 0; step < 5; ++step) {
    fillGradients(reference, step);
    fillGradients(sliced, step);
    full.step(0.05);
    shard.step(0.05);
  }
  EXPECT_EQ(shard.steps(), 5);
  const Tensor& want32 = reference.flatParameters(0);
  const Tensor& have32 = sliced.flatParameters(0);
  for (std::int64_t i = 0; i < want32.numel(); ++i) {
    const float expected = i >= 10 && i < 50 ? want32.data<float>()[i] : untouched.flatParameters(0).data<float>()[i];
    ASSERT_EQ(have32.data<float>()[i], expected) << "float32 element " << i;
  }
  const Tensor& want64 = reference.flatParameters(1);
  const Tensor& have64 = sliced.flatParameters(1);
  for (std::int64_t i = 0; i < want64.numel(); ++i) {
    const double expected = i >= 5 && i < 20 ? want64.data<double>()[i] : untouched.flatParameters(1).data<double>()[i];
    ASSERT_EQ(have64.data<double>()[i], expected) << "float64 element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    UpdateRules, SliceOptimizerTest,
    ::testing::Values(
        SliceCase{"Sgd", OptimizerOptions{}},
        SliceCase{"SgdMomentumWeightDecay", OptimizerOptions{.momentum = 0.9, .dampening = 0.1, .weightDecay = 0.01}},
        SliceCase{"SgdNesterov", OptimizerOptions{.momentum = 0.9, .nesterov = true, .weightDecay = 0.01}},
        SliceCase{"Adam", OptimizerOptions{.kind = OptimizerKind::Adam, .weightDecay = 0.01}},
        SliceCase{"AdamW", OptimizerOptions{.kind = OptimizerKind::AdamW, .weightDecay = 0.05}}),
    [](const ::testing::TestParamInfo<SliceCase>& param) { return std::string(param.param.name); });

TEST(SliceOptimizerTest, StepBumpsTheVersionOfTheSlicedStorage) {
  ParameterStore store = threeParameterStore();
  const std::uint64_t before = store.flatParameters(1).storage()->version();
  Optimizer({ParameterSlice{store.flatParameters(1).flatSlice(0, 3), store.flatGradients(1).flatSlice(0, 3)}},
            OptimizerOptions{})
      .step(0.1);
  EXPECT_GT(store.flatParameters(1).storage()->version(), before);
}

TEST(SliceOptimizerTest, RefusesSlicesWhoseParametersAndGradientsDiffer) {
  ParameterStore store = threeParameterStore();
  EXPECT_THROW(
      Optimizer({ParameterSlice{store.flatParameters(0).flatSlice(0, 4), store.flatGradients(0).flatSlice(0, 5)}},
                OptimizerOptions{}),
      Error);
  EXPECT_THROW(
      Optimizer({ParameterSlice{store.flatParameters(0).flatSlice(0, 4), store.flatGradients(1).flatSlice(0, 4)}},
                OptimizerOptions{}),
      Error);
}

}  // namespace
}  // namespace strata
