// Note [Batch-norm loops] (core/backend/cpu/batch_norm_loops.h): float32 batch norm, forward and backward, against
// the float64 kernels, on the layouts the loops treat apart (one pixel per channel, planes below kSmallPlane = 32
// elements run a task's channels at once (Note [Small planes]), larger planes one at a time, and both sides of 32) and
// on data whose mean is far from zero against its spread (1000 +- 1), where a one-pass variance would cancel.
// Operands with one element per plane (1x1 maps, and every channels-last operand) run the row loops of Note
// [Row-major batch norm]: shapes with more than one block of 512 rows and more than 128 rows per float sum.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/channels_last.h"
#include "strata/error.h"
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
  for (const Shape& x : {Shape{16, 24, 1, 1}, Shape{1300, 20, 1, 1}, Shape{4, 5, 2, 3}, Shape{5, 9, 4, 4},
                         Shape{3, 6, 31}, Shape{3, 6, 32}, Shape{3, 7, 9, 10}, Shape{2, 3, 50}}) {
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
  for (const Shape& x : {Shape{16, 24, 1, 1}, Shape{1300, 20, 1, 1}, Shape{4, 5, 2, 3}, Shape{5, 9, 4, 4},
                         Shape{3, 6, 31}, Shape{3, 6, 32}, Shape{3, 7, 9, 10}}) {
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

// Float32 channels-last outputs (turned back) against the float64 kernel on the channels-first data.
void expectChannelsLastMatchesFloat64(const std::string& op, const std::vector<Tensor>& inputs64,
                                      const Attributes& attrs, std::size_t outputCount, double rtol) {
  SCOPED_TRACE(op);
  std::vector<Tensor> inputs32;
  std::vector<const Tensor*> p64, p32;
  for (const Tensor& t : inputs64) {
    const Tensor t32 = testing::toFloat32(t);
    inputs32.push_back(t32.rank() >= 3 ? toChannelsLast(t32) : t32);
  }
  for (std::size_t i = 0; i < inputs64.size(); ++i) {
    p64.push_back(&inputs64[i]);
    p32.push_back(&inputs32[i]);
  }
  Attributes last = attrs;
  last.set("channels_last", std::int64_t{1});
  const std::vector<Tensor> expected = runOpEagerly(op, p64, attrs, outputCount, true);
  const std::vector<Tensor> actual = runOpEagerly(op, p32, last, outputCount, true);
  for (std::size_t k = 0; k < outputCount; ++k) {
    const Tensor got = actual[k].rank() >= 3 ? toChannelsFirst(actual[k]) : actual[k];
    ASSERT_EQ(got.shape(), expected[k].shape()) << "output " << k;
    double scale = 0;
    for (std::int64_t i = 0; i < expected[k].numel(); ++i)
      scale = std::max(scale, std::fabs(expected[k].data<double>()[i]));
    for (std::int64_t i = 0; i < expected[k].numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], expected[k].data<double>()[i], rtol * std::max(scale, 1e-3))
          << "output " << k << " at flat index " << i;
  }
}

TEST(BatchNormLoopsTest, ChannelsLastMatchesFloat64) {
  unsigned seed = 1100;
  // Rows (N x spatial): 1440 (three blocks), 270, 16.
  for (const Shape& x : {Shape{40, 24, 6, 6}, Shape{3, 7, 9, 10}, Shape{16, 24, 1, 1}}) {
    for (const auto& [offset, spread] : {std::pair{0.0, 1.0}, std::pair{1000.0, 1.0}}) {
      SCOPED_TRACE(::testing::Message() << shapeToString(x) << " offset " << offset << " spread " << spread);
      const std::vector<Tensor> inputs = batchNormInputs(x, offset, spread, seed);
      const Tensor dy = testing::randomTensor(DType::Float64, x, seed + 9);
      seed += 10;
      expectChannelsLastMatchesFloat64("BatchNormalization", inputs, batchNormAttrs(true), 3, 1e-4);
      expectChannelsLastMatchesFloat64("BatchNormalization", inputs, batchNormAttrs(false), 1, 1e-4);
      expectChannelsLastMatchesFloat64("BatchNormalizationGrad", {dy, inputs[0], inputs[1]}, batchNormAttrs(true), 3,
                                       1e-3);
      expectChannelsLastMatchesFloat64("BatchNormalizationGrad", {dy, inputs[0], inputs[1], inputs[3], inputs[4]},
                                       batchNormAttrs(false), 3, 1e-4);
    }
  }
}

// Note [Fused ReLU]: the fused node computes exactly what BatchNormalization then Relu computes (forward), and
// BatchNormalizationGrad gated by the fused output exactly what ReluGrad then BatchNormalizationGrad computes: same
// float32 arithmetic, so equal to the bit, on every layout the loops treat apart.
void expectBitwiseEqual(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << what << " element " << i;
}

TEST(BatchNormLoopsTest, FusedReluEqualsBatchNormThenRelu) {
  unsigned seed = 990;
  for (const Shape& x : {Shape{16, 24, 1, 1}, Shape{4, 5, 2, 3}, Shape{3, 6, 31}, Shape{3, 6, 32}, Shape{3, 7, 9, 10},
                         Shape{40, 24, 6, 6}}) {
    for (const bool channelsLast : {false, true}) {
      for (const bool training : {true, false}) {
        SCOPED_TRACE(::testing::Message() << shapeToString(x) << (channelsLast ? " channels-last" : "")
                                          << (training ? " training" : " inference"));
        std::vector<Tensor> inputs;
        for (const Tensor& t : batchNormInputs(x, 0.3, 1.0, seed))
          inputs.push_back(testing::toFloat32(t));
        Tensor dr = testing::toFloat32(testing::randomTensor(DType::Float64, x, seed + 9));
        seed += 10;
        Attributes plain = batchNormAttrs(training);
        if (channelsLast)
          plain.set("channels_last", std::int64_t{1});  // the same bytes read as [N, spatial..., C]
        Attributes fused = plain;
        fused.set("fused_relu", std::int64_t{1});
        if (channelsLast) {
          Shape stored{x[0]};
          stored.insert(stored.end(), x.begin() + 2, x.end());
          stored.push_back(x[1]);
          inputs[0] = inputs[0].reshape(stored);
          dr = dr.reshape(stored);
        }
        std::vector<const Tensor*> forwardInputs;
        for (const Tensor& t : inputs)
          forwardInputs.push_back(&t);
        const Tensor y = runOpEagerly("BatchNormalization", forwardInputs, plain, 1, training).at(0);
        const Tensor relu = runOpEagerly("Relu", {&y}, Attributes{}).at(0);
        const Tensor r = runOpEagerly("BatchNormalization", forwardInputs, fused, 1, training).at(0);
        expectBitwiseEqual(r, relu, "Y");

        const Tensor dy = runOpEagerly("ReluGrad", {&dr, &relu}, Attributes{}).at(0);
        const Tensor* stats[2] = {training ? nullptr : &inputs[3], training ? nullptr : &inputs[4]};
        const std::vector<Tensor> want = runOpEagerly(
            "BatchNormalizationGrad", {&dy, &inputs[0], &inputs[1], stats[0], stats[1]}, plain, 3, training);
        const std::vector<Tensor> got = runOpEagerly(
            "BatchNormalizationGrad", {&dr, &inputs[0], &inputs[1], stats[0], stats[1], &r}, fused, 3, training);
        expectBitwiseEqual(got[0], want[0], "dX");
        expectBitwiseEqual(got[1], want[1], "dScale");
        expectBitwiseEqual(got[2], want[2], "dB");
      }
    }
  }
}

TEST(BatchNormLoopsTest, AFusedGradientWithoutItsOutputIsRefused) {
  const std::vector<Tensor> inputs = batchNormInputs(Shape{2, 3, 4}, 0.0, 1.0, 980);
  Attributes fused = batchNormAttrs(true);
  fused.set("fused_relu", std::int64_t{1});
  const Tensor& x = inputs[0];
  EXPECT_THROW(runOpEagerly("BatchNormalizationGrad", {&x, &x, &inputs[1]}, fused, 3, true), Error);
  EXPECT_THROW(
      runOpEagerly("BatchNormalizationGrad", {&x, &x, &inputs[1], nullptr, nullptr, &x}, batchNormAttrs(true), 3, true),
      Error);
}

}  // namespace
}  // namespace strata
