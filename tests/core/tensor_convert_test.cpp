// Tensor::convertFrom on the host: casts and adds between the floating dtypes, rounding to nearest even, with the
// rounding cases worked out by hand (bfloat16 keeps 8 significant bits, float16 11).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "strata/error.h"
#include "strata/tensor.h"

namespace strata {
namespace {

Tensor floats(std::initializer_list<float> values) {
  Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

std::vector<std::uint16_t> bitsOf(const Tensor& t) {
  return {t.data<std::uint16_t>(), t.data<std::uint16_t>() + t.numel()};
}

TEST(TensorConvertTest, RoundsToNearestEvenIntoSixteenBits) {
  const float bf16Ulp = std::ldexp(1.0f, -7);  // of bfloat16 at 1
  const float halfUlp = std::ldexp(1.0f, -10);
  // Halfway below an even neighbour stays; halfway above an odd one goes up; past halfway rounds up.
  Tensor bf16 = Tensor::empty(DType::BFloat16, {4});
  bf16.convertFrom(floats({1.0f + bf16Ulp / 2, 1.0f + 1.5f * bf16Ulp, 1.0f + 0.75f * bf16Ulp, -2.0f}));
  EXPECT_EQ(bitsOf(bf16), (std::vector<std::uint16_t>{0x3F80, 0x3F82, 0x3F81, 0xC000}));
  Tensor half = Tensor::empty(DType::Float16, {4});
  half.convertFrom(floats({1.0f + halfUlp / 2, 1.0f + 1.5f * halfUlp, 65520.0f, std::ldexp(1.0f, -24)}));
  // 65520 is halfway between float16's largest finite value and the next power of two: infinity.
  EXPECT_EQ(bitsOf(half), (std::vector<std::uint16_t>{0x3C00, 0x3C02, 0x7C00, 0x0001}));
}

TEST(TensorConvertTest, WidensAndAddsExactly) {
  Tensor bf16 = Tensor::empty(DType::BFloat16, {3});
  bf16.convertFrom(floats({1.5f, -0.25f, 3.0f}));
  Tensor sum = floats({0.5f, 0.25f, std::ldexp(1.0f, -20)});
  sum.convertFrom(bf16, /*accumulate=*/true);
  EXPECT_EQ(sum.data<float>()[0], 2.0f);
  EXPECT_EQ(sum.data<float>()[1], 0.0f);
  EXPECT_EQ(sum.data<float>()[2], 3.0f + std::ldexp(1.0f, -20)) << "float32 keeps what bfloat16 could not";

  Tensor wide = Tensor::empty(DType::Float64, {1});
  *wide.data<double>() = 1e-12;
  wide.convertFrom(floats({1.0f}), true);
  EXPECT_EQ(*wide.data<double>(), 1.0 + 1e-12) << "float64 arithmetic when either side is float64";

  // Accumulating into 16 bits rounds once, after a float sum: 1 + ulp/2 ties to the even 1.
  bf16.convertFrom(floats({1.0f, 0.0f, 0.0f}));
  bf16.convertFrom(floats({std::ldexp(1.0f, -8), 0.0f, 0.0f}), true);
  EXPECT_EQ(bitsOf(bf16)[0], 0x3F80);
}

TEST(TensorConvertTest, KeepsNaNAndInfinity) {
  Tensor bf16 = Tensor::empty(DType::BFloat16, {2});
  bf16.convertFrom(floats({std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}));
  Tensor back = Tensor::empty(DType::Float32, {2});
  back.convertFrom(bf16);
  EXPECT_TRUE(std::isnan(back.data<float>()[0]));
  EXPECT_EQ(back.data<float>()[1], -std::numeric_limits<float>::infinity());
}

TEST(TensorConvertTest, RefusesWhatItCannotConvert) {
  Tensor ints = Tensor::zeros(DType::Int64, {2});
  Tensor target = Tensor::zeros(DType::Float32, {2});
  try {
    target.convertFrom(ints);
    FAIL() << "an int64 source was converted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot convert int64 into float32: floating dtypes only"), std::string::npos)
        << e.what();
  }
  try {
    target.convertFrom(floats({1.0f, 2.0f, 3.0f}), true);
    FAIL() << "3 elements were added into 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element counts differ"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace strata
