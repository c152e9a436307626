// Note [Batch-norm loops] (core/backend/cpu/batch_norm_loops.h): float32 batch norm, forward and backward, against
// the float64 kernels, on the layouts the loops treat apart (one pixel per channel, planes below kSmallPlane = 32
// elements run a task's channels at once (Note [Small planes]), larger planes one at a time, and both sides of 32) and
// on data whose mean is far from zero against its spread (1000 +- 1), where a one-pass variance would cancel.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

// X = offset + spread * uniform(-1, 1), and the other inputs: scale, B, input_mean, input_var.
std::vector<Tensor> batchNormInputs(const Shape& x, double offset, double spread, unsigned seed) {
  Tensor data = testing::randomTensor(DType::Float64, x, seed);
  for (std::int64_t i = 0; i < data.numel(); ++i)
    data.data<double>()[i] = offset + spread * data.data<double>()[i];
  const Shape c{x[1]};
  Tensor var = testing::randomTensor(DType::Float64, c, seed + 4, 0.5, 2.0);
  return {data, testing::randomTensor(DType::Float64, c, seed + 1, 0.5, 1.5),
          testing::randomTensor(DType::Float64, c, seed + 2), testing::randomTensor(DType::Float64, c, seed + 3), var};
}

Attributes batchNormAttrs(bool training) {
  Attributes a;
  a.set("epsilon", 1e-5f);
  a.set("momentum", 0.9f);
  a.set("training_mode", std::int64_t{training ? 1 : 0});
  return a;
}

TEST(BatchNormLoopsTest, ForwardMatchesFloat64) {
  unsigned seed = 900;
  for (const Shape& x : {Shape{16, 24, 1, 1}, Shape{4, 5, 2, 3}, Shape{5, 9, 4, 4}, Shape{3, 6, 31}, Shape{3, 6, 32},
                         Shape{3, 7, 9, 10}, Shape{2, 3, 50}}) {
    for (const auto& [offset, spread] : {std::pair{0.0, 1.0}, std::pair{1000.0, 1.0}}) {
      SCOPED_TRACE(::testing::Message() << shapeToString(x) << " offset " << offset << " spread " << spread);
      const std::vector<Tensor> inputs = batchNormInputs(x, offset, spread, seed);
      seed += 5;
      // Training: Y and the running mean and variance.
      testing::expectFloat32MatchesFloat64("BatchNormalization", inputs, batchNormAttrs(true), 3, 1e-4);
      testing::expectFloat32MatchesFloat64("BatchNormalization", inputs, batchNormAttrs(false), 1, 1e-4);
    }
  }
}

TEST(BatchNormLoopsTest, BackwardMatchesFloat64) {
  unsigned seed = 950;
  for (const Shape& x : {Shape{16, 24, 1, 1}, Shape{4, 5, 2, 3}, Shape{5, 9, 4, 4}, Shape{3, 6, 31}, Shape{3, 6, 32},
                         Shape{3, 7, 9, 10}}) {
    for (const auto& [offset, spread] : {std::pair{0.0, 1.0}, std::pair{1000.0, 1.0}}) {
      SCOPED_TRACE(::testing::Message() << shapeToString(x) << " offset " << offset << " spread " << spread);
      std::vector<Tensor> inputs = batchNormInputs(x, offset, spread, seed);
      const Tensor dy = testing::randomTensor(DType::Float64, x, seed + 9);
      seed += 10;
      // dY, X, scale (training); dY, X, scale, mean, var (frozen statistics).
      testing::expectFloat32MatchesFloat64("BatchNormalizationGrad", {dy, inputs[0], inputs[1]}, batchNormAttrs(true),
                                           3, 1e-3);
      testing::expectFloat32MatchesFloat64("BatchNormalizationGrad", {dy, inputs[0], inputs[1], inputs[3], inputs[4]},
                                           batchNormAttrs(false), 3, 1e-4);
    }
  }
}

}  // namespace
}  // namespace strata
