// Resize's gradient rule (graphs/src/gradients/resize_gradients.cpp) and its ResizeGrad kernel against finite
// differences, in float64, for every mode, coordinate transformation and nearest rounding, upsampling, downsampling
// and odd sizes, channels-first and channels-last.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/attributes.h"
#include "strata/tensor.h"

namespace strata {
namespace resize_gradients_test {

using testing::expectGradientsMatchFiniteDifferences;
using testing::randomTensor;

Tensor floats(const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor ints(const std::vector<std::int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<std::int64_t>());
  return t;
}

Attributes resizeAttrs(const std::string& mode, const std::string& coordinates,
                       const std::string& nearest = "round_prefer_floor") {
  Attributes a;
  a.set("mode", mode);
  a.set("coordinate_transformation_mode", coordinates);
  a.set("nearest_mode", nearest);
  return a;
}

// X with scales (upsampling x2 and a downsampling that leaves a fraction) and with odd sizes.
void expectAllSamplingsMatch(const Attributes& attrs, unsigned seed) {
  const Tensor none;
  expectGradientsMatchFiniteDifferences(
      "Resize", {randomTensor(DType::Float64, {2, 2, 3, 4}, seed), none, floats({1, 1, 2, 2})}, attrs);
  expectGradientsMatchFiniteDifferences(
      "Resize", {randomTensor(DType::Float64, {1, 2, 5, 7}, seed + 1), none, floats({1, 1, 0.6F, 0.5F})}, attrs);
  expectGradientsMatchFiniteDifferences(
      "Resize", {randomTensor(DType::Float64, {1, 2, 5, 3}, seed + 2), none, Tensor(), ints({1, 2, 9, 2})}, attrs);
}

TEST(ResizeGradientsTest, NearestEveryRounding) {
  unsigned seed = 1;
  for (const char* coordinates : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}) {
    for (const char* rounding : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}) {
      SCOPED_TRACE(std::string(coordinates) + "/" + rounding);
      expectAllSamplingsMatch(resizeAttrs("nearest", coordinates, rounding), seed);
      seed += 3;
    }
  }
}

TEST(ResizeGradientsTest, LinearEveryCoordinateMode) {
  unsigned seed = 100;
  for (const char* coordinates :
       {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn"}) {
    SCOPED_TRACE(coordinates);
    expectAllSamplingsMatch(resizeAttrs("linear", coordinates), seed);
    seed += 3;
  }
}

TEST(ResizeGradientsTest, CubicEveryCoordinateModeAndExcludeOutside) {
  unsigned seed = 200;
  for (const char* coordinates : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
    SCOPED_TRACE(coordinates);
    expectAllSamplingsMatch(resizeAttrs("cubic", coordinates), seed);
    seed += 3;
  }
  Attributes exclude = resizeAttrs("cubic", "half_pixel");
  exclude.set("cubic_coeff_a", -0.5F);
  exclude.set("exclude_outside", std::int64_t{1});
  expectAllSamplingsMatch(exclude, 230);
}

TEST(ResizeGradientsTest, CropAndResizeAndOtherRanks) {
  Attributes crop = resizeAttrs("linear", "tf_crop_and_resize");
  crop.set("extrapolation_value", 10.0F);
  expectGradientsMatchFiniteDifferences("Resize",
                                        {randomTensor(DType::Float64, {1, 1, 4, 4}, 300),
                                         floats({0, 0, 0.4F, 0.6F, 1, 1, 1.2F, 1.7F}), Tensor(), ints({1, 1, 3, 3})},
                                        crop);
  expectGradientsMatchFiniteDifferences("Resize",
                                        {randomTensor(DType::Float64, {2, 3, 4}, 301), Tensor(), floats({1, 1, 2.5F})},
                                        resizeAttrs("cubic", "half_pixel"));
  expectGradientsMatchFiniteDifferences(
      "Resize", {randomTensor(DType::Float64, {1, 2, 3, 2, 4}, 302), Tensor(), floats({1, 1, 2, 1.5F, 0.5F})},
      resizeAttrs("linear", "align_corners"));
}

// A channels-last node: X and dX are [N, H, W, C], input_shape too; scales stay in the node's NCHW order.
TEST(ResizeGradientsTest, ChannelsLast) {
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    Attributes attrs = resizeAttrs(mode, "half_pixel");
    attrs.set("channels_last", std::int64_t{1});
    expectGradientsMatchFiniteDifferences(
        "Resize", {randomTensor(DType::Float64, {2, 3, 4, 5}, 400), Tensor(), floats({1, 1, 2, 0.5F})}, attrs);
  }
}

TEST(ResizeGradientsTest, Float32) {
  testing::GradientCheckOptions options;
  expectGradientsMatchFiniteDifferences(
      "Resize", {randomTensor(DType::Float32, {2, 3, 6, 5}, 500), Tensor(), floats({1, 1, 2, 2})},
      resizeAttrs("linear", "half_pixel"), options);
}

}  // namespace resize_gradients_test
}  // namespace strata
