// RunOptimizers, the run's OptimizerFactory: the full optimizer made on first use, slice optimizers refused where
// the run needs a verdict over all gradients.
#include "strata/optim/run_optimizers.h"

#include <gtest/gtest.h>

#include "strata/error.h"

namespace strata {
namespace {

std::int64_t optimizerStateBytes() {
  return allocatorFor(Device::cpu())
      .stats()
      .snapshot()
      .current[static_cast<std::size_t>(MemoryCategory::OptimizerState)];
}

ParameterStore storeOfZeros(std::int64_t n) {
  return ParameterStore({{"w", Tensor::zeros(DType::Float32, {n})}});
}

TEST(RunOptimizersTest, TheFullOptimizerIsCreatedOnFirstUseOnly) {
  ParameterStore store = storeOfZeros(64);
  RunOptimizers optimizers(store, OptimizerOptions{.kind = OptimizerKind::Adam});
  const std::int64_t before = optimizerStateBytes();
  EXPECT_FALSE(optimizers.fullCreated());
  std::unique_ptr<SliceOptimizer> shard = optimizers.create(
      {ParameterSlice{store.flatParameters(0).flatSlice(0, 16), store.flatGradients(0).flatSlice(0, 16)}});
  EXPECT_EQ(optimizerStateBytes() - before, 2 * 16 * 4) << "a shard's state, not the model's";
  Optimizer& full = optimizers.full();
  EXPECT_TRUE(optimizers.fullCreated());
  EXPECT_EQ(&optimizers.full(), &full);
  EXPECT_EQ(optimizerStateBytes() - before, 2 * 16 * 4 + 2 * 64 * 4);
}

TEST(RunOptimizersTest, TheFullOptimizerUsesTheLossScaler) {
  ParameterStore store = storeOfZeros(2);
  LossScaler scaler(LossScalerOptions{.initialScale = 4.0});
  RunOptimizers optimizers(store, OptimizerOptions{}, &scaler);
  store.gradient(0).data<float>()[0] = 4.0f;  // 1 after the scale is divided out
  EXPECT_NEAR(optimizers.full().step(0.5), 1.0, 1e-6);
  EXPECT_FLOAT_EQ(store.parameter(0).data<float>()[0], -0.5f);
}

TEST(RunOptimizersTest, SliceOptimizersAreRefusedWithClippingOrLossScaling) {
  ParameterStore store = storeOfZeros(8);
  const ParameterSlice slice{store.flatParameters(0).flatSlice(0, 4), store.flatGradients(0).flatSlice(0, 4)};
  RunOptimizers clipped(store, OptimizerOptions{.maxGradNorm = 1.0});
  try {
    clipped.create({slice});
    FAIL() << "gradient clipping needs the global norm";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--clip-grad-norm"), std::string::npos) << e.what();
  }
  LossScaler scaler;
  RunOptimizers scaled(store, OptimizerOptions{}, &scaler);
  EXPECT_THROW(scaled.create({slice}), Error);
}

}  // namespace
}  // namespace strata
