#include "strata/optim/loss_scaler.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "strata/error.h"
#include "strata/optim/optimizer.h"

namespace strata {
namespace {

TEST(LossScalerTest, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  LossScaler scaler(LossScalerOptions{.initialScale = 1024.0, .growthInterval = 3});
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_FALSE(scaler.update(false));  // resets the run of good steps
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024.0);
  EXPECT_EQ(scaler.skippedSteps(), 1);
}

TEST(LossScalerTest, FixedScaleStillSkipsOverflow) {
  LossScaler scaler(LossScalerOptions{.initialScale = 128.0, .growthInterval = 1, .dynamic = false});
  EXPECT_FALSE(scaler.update(false));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 128.0);
  EXPECT_EQ(scaler.skippedSteps(), 1);
}

TEST(LossScalerTest, StopsGrowingBeforeFloat32Overflows) {
  LossScaler scaler(LossScalerOptions{.initialScale = 0x1p127, .growthInterval = 1});
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 0x1p127);
}

TEST(LossScalerTest, RejectsMeaninglessOptions) {
  EXPECT_THROW(LossScaler(LossScalerOptions{.initialScale = 0.0}), Error);
  EXPECT_THROW(LossScaler(LossScalerOptions{.initialScale = std::numeric_limits<double>::infinity()}), Error);
  EXPECT_THROW(LossScaler(LossScalerOptions{.growthFactor = 1.0}), Error);
  EXPECT_THROW(LossScaler(LossScalerOptions{.backoffFactor = 1.5}), Error);
}

TEST(LossScalerTest, StateRoundTripsForCheckpoints) {
  LossScaler scaler(LossScalerOptions{.initialScale = 1024.0, .growthInterval = 3});
  scaler.update(false);
  scaler.update(true);
  LossScaler resumed(LossScalerOptions{.initialScale = 1024.0, .growthInterval = 3});
  resumed.restore(scaler.state());
  for (int step = 0; step < 4; ++step) {  // the same run of good steps: both grow on the same step
    EXPECT_EQ(resumed.update(true), scaler.update(true));
    EXPECT_EQ(resumed.scale(), scaler.scale()) << step;
  }
  EXPECT_EQ(resumed.skippedSteps(), 1);
  EXPECT_THROW(resumed.restore(LossScalerState{.scale = -1.0}), Error);
  EXPECT_THROW(resumed.restore(LossScalerState{.scale = 2.0, .goodSteps = -3}), Error);
}

ParameterStore storeOf(std::vector<float> values) {
  Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<float>());
  return ParameterStore({{"w", t}});
}

TEST(LossScalerTest, OptimizerDividesTheScaleOut) {
  ParameterStore store = storeOf({1.0f, 2.0f});
  store.gradient(0).data<float>()[0] = 3.0f * 256.0f;
  store.gradient(0).data<float>()[1] = 4.0f * 256.0f;
  LossScaler scaler(LossScalerOptions{.initialScale = 256.0});
  Optimizer sgd(store, OptimizerOptions{.maxGradNorm = 1.0});
  sgd.setLossScaler(&scaler);
  EXPECT_NEAR(sgd.step(1.0), 5.0, 1e-5);  // the unscaled norm, then clipped to 1
  EXPECT_FALSE(sgd.lastStepSkipped());
  EXPECT_NEAR(store.parameter(0).data<float>()[0], 1.0f - 0.6f, 1e-5);
  EXPECT_NEAR(store.parameter(0).data<float>()[1], 2.0f - 0.8f, 1e-5);
  EXPECT_EQ(sgd.steps(), 1);
}

TEST(LossScalerTest, OptimizerSkipsAStepWithOverflowedGradients) {
  ParameterStore store = storeOf({1.0f, 2.0f});
  store.gradient(0).data<float>()[0] = std::numeric_limits<float>::infinity();
  store.gradient(0).data<float>()[1] = 1.0f;
  LossScaler scaler(LossScalerOptions{.initialScale = 256.0});
  Optimizer adam(store, OptimizerOptions{.kind = OptimizerKind::Adam});
  adam.setLossScaler(&scaler);
  EXPECT_FALSE(std::isfinite(adam.step(0.1)));
  EXPECT_TRUE(adam.lastStepSkipped());
  EXPECT_EQ(adam.steps(), 0);  // Adam's bias correction does not count the skipped step
  EXPECT_EQ(store.parameter(0).data<float>()[0], 1.0f);
  EXPECT_EQ(store.parameter(0).data<float>()[1], 2.0f);
  EXPECT_EQ(scaler.scale(), 128.0);
  store.gradient(0).data<float>()[0] = std::nanf("");
  adam.step(0.1);
  EXPECT_TRUE(adam.lastStepSkipped());
  EXPECT_EQ(scaler.skippedSteps(), 2);
}

}  // namespace
}  // namespace strata
