#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "strata/attributes.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "support/tensor_values.h"

namespace strata {
namespace {

// 0.5, -1.25, 2, ... : distinct, mixed-sign values.
template <typename T>
Tensor iota(Shape shape, double start = -3.0, double step = 0.75) {
  Tensor t = Tensor::empty(dtypeOf<T>(), std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data<T>()[i] = static_cast<T>(start + step * static_cast<double>(i));
  }
  return t;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

Tensor run1(const std::string& type, const std::vector<const Tensor*>& inputs, const Attributes& attrs = {}) {
  return runOpEagerly(type, inputs, attrs).at(0);
}

// Naive numpy broadcasting: input offset for output linear index `o`.
std::int64_t broadcastOffset(const Shape& in, const Shape& out, std::int64_t o) {
  std::int64_t offset = 0;
  std::int64_t stride = 1;
  const std::size_t pad = out.size() - in.size();
  for (std::size_t d = out.size(); d-- > 0;) {
    const std::int64_t idx = o % out[d];
    o /= out[d];
    if (d >= pad) {
      const std::int64_t dim = in[d - pad];
      if (dim != 1) {
        offset += idx * stride;
      }
      stride *= dim;
    }
  }
  return offset;
}

template <typename T, typename R, typename F>
void expectBinaryMatchesReference(const std::string& type, const Tensor& a, const Tensor& b, const Shape& outShape,
                                  F ref) {
  const Tensor out = run1(type, {&a, &b});
  ASSERT_EQ(out.shape(), outShape);
  ASSERT_EQ(out.dtype(), dtypeOf<R>());
  for (std::int64_t o = 0; o < out.numel(); ++o) {
    const T x = a.data<T>()[broadcastOffset(a.shape(), outShape, o)];
    const T y = b.data<T>()[broadcastOffset(b.shape(), outShape, o)];
    ASSERT_EQ(out.data<R>()[o], static_cast<R>(ref(x, y))) << type << " at " << o;
  }
}

TEST(ElementwiseOpsTest, AddBroadcastShapesFloat) {
  const auto add = [](float x, float y) { return x + y; };
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{2, 3}, {2, 3}, {2, 3}},                 // same shape
      {{2, 3}, {}, {2, 3}},                     // scalar
      {{1}, {2, 3}, {2, 3}},                    // size-1 scalar on the left
      {{2, 3}, {3}, {2, 3}},                    // rank difference
      {{2, 1, 3}, {4, 1}, {2, 4, 3}},           // both broadcast, rank difference
      {{3, 1}, {1, 5}, {3, 5}},                 // outer product
      {{2, 3, 4, 5}, {3, 1, 1}, {2, 3, 4, 5}},  // per-channel bias
      {{2, 3, 4, 5}, {2, 1, 4, 1}, {2, 3, 4, 5}},
      {{1, 1, 1}, {1, 1}, {1, 1, 1}},
      {{0, 3}, {3}, {0, 3}},  // empty
  };
  for (const Case& c : cases) {
    const Tensor a = iota<float>(c.a);
    const Tensor b = iota<float>(c.b, 10.0, 1.5);
    expectBinaryMatchesReference<float, float>("Add", a, b, c.out, add);
    expectBinaryMatchesReference<float, float>("Add", b, a, c.out, add);
  }
}

TEST(ElementwiseOpsTest, ArithmeticOnEveryDType) {
  const Tensor a64 = iota<double>({2, 3});
  const Tensor b64 = iota<double>({3}, 1.0, 0.5);
  expectBinaryMatchesReference<double, double>("Sub", a64, b64, {2, 3}, [](double x, double y) { return x - y; });
  expectBinaryMatchesReference<double, double>("Div", a64, b64, {2, 3}, [](double x, double y) { return x / y; });

  const Tensor i32 = makeTensor<std::int32_t>({2, 2}, {7, -7, 9, 100});
  const Tensor j32 = makeTensor<std::int32_t>({2}, {2, -3});
  expectBinaryMatchesReference<std::int32_t, std::int32_t>("Mul", i32, j32, {2, 2},
                                                           [](std::int32_t x, std::int32_t y) { return x * y; });
  // Integer division truncates toward zero.
  EXPECT_EQ(values<std::int32_t>(run1("Div", {&i32, &j32})), (std::vector<std::int32_t>{3, 2, 4, -33}));

  const Tensor i64 = makeTensor<std::int64_t>({3}, {std::int64_t{1} << 40, -5, 6});
  const Tensor one64 = makeTensor<std::int64_t>({}, {3});
  EXPECT_EQ(values<std::int64_t>(run1("Add", {&i64, &one64})),
            (std::vector<std::int64_t>{(std::int64_t{1} << 40) + 3, -2, 9}));

  const Tensor u8 = makeTensor<std::uint8_t>({3}, {250, 1, 7});
  const Tensor v8 = makeTensor<std::uint8_t>({3}, {10, 2, 3});
  EXPECT_EQ(values<std::uint8_t>(run1("Add", {&u8, &v8})), (std::vector<std::uint8_t>{4, 3, 10}));  // wraps
  const Tensor s8 = makeTensor<std::int8_t>({2}, {-4, 5});
  const Tensor t8 = makeTensor<std::int8_t>({2}, {3, 3});
  EXPECT_EQ(values<std::int8_t>(run1("Sub", {&s8, &t8})), (std::vector<std::int8_t>{-7, 2}));

  // A zero integer divisor does not trap.
  const Tensor zero = makeTensor<std::int32_t>({}, {0});
  EXPECT_EQ(values<std::int32_t>(run1("Div", {&i32, &zero})), (std::vector<std::int32_t>{0, 0, 0, 0}));
}

TEST(ElementwiseOpsTest, BinaryRejectsIncompatibleShapesAndDTypes) {
  const Tensor a = iota<float>({2, 3});
  const Tensor b = iota<float>({4});
  const Tensor c = iota<float>({3, 2});
  const Tensor d = iota<double>({2, 3});
  EXPECT_THROW(run1("Add", {&a, &b}), Error);
  EXPECT_THROW(run1("Mul", {&a, &c}), Error);
  EXPECT_THROW(run1("Add", {&a, &d}), Error);
  EXPECT_THROW(run1("Where", {&a, &a, &a}), Error);  // condition must be bool
  const Tensor flag = makeTensor<bool>({2}, {true, false});
  EXPECT_THROW(run1("Where", {&flag, &a, &a}), Error);  // [2] vs [2, 3]
  EXPECT_THROW(run1("Sqrt", {&flag}), Error);
}

TEST(ElementwiseOpsTest, LargeBroadcastRunsInParallelChunks) {
  const Tensor a = iota<float>({64, 33, 40}, -100.0, 0.01);
  const Tensor b = iota<float>({33, 1}, 1.0, 0.5);
  const Tensor c = iota<float>({64, 33, 40}, 5.0, -0.003);
  expectBinaryMatchesReference<float, float>("Mul", a, b, {64, 33, 40}, [](float x, float y) { return x * y; });
  expectBinaryMatchesReference<float, float>("Add", a, c, {64, 33, 40}, [](float x, float y) { return x + y; });
  const Tensor big = iota<float>({100000}, -1.0, 1e-5);
  const Tensor out = run1("Relu", {&big});
  for (std::int64_t i = 0; i < big.numel(); ++i) {
    ASSERT_EQ(out.data<float>()[i], std::max(0.0f, big.data<float>()[i]));
  }
}

TEST(ElementwiseOpsTest, PowModAndPRelu) {
  const Tensor x = makeTensor<float>({3}, {1.0f, 2.0f, 3.0f});
  const Tensor y = makeTensor<float>({3}, {4.0f, 0.5f, -1.0f});
  const Tensor pf = run1("Pow", {&x, &y});
  EXPECT_FLOAT_EQ(pf.data<float>()[0], 1.0f);
  EXPECT_FLOAT_EQ(pf.data<float>()[1], std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(pf.data<float>()[2], 1.0f / 3.0f);
  const Tensor two = makeTensor<std::int64_t>({}, {2});
  EXPECT_EQ(values<float>(run1("Pow", {&x, &two})), (std::vector<float>{1.0f, 4.0f, 9.0f}));
  const Tensor bi = makeTensor<std::int64_t>({3}, {3, -2, 5});
  const Tensor ei = makeTensor<std::int64_t>({3}, {21, 3, 0});
  EXPECT_EQ(values<std::int64_t>(run1("Pow", {&bi, &ei})), (std::vector<std::int64_t>{10460353203, -8, 1}));
  const Tensor bi32 = makeTensor<std::int32_t>({2}, {2, 3});
  const Tensor ef = makeTensor<float>({2}, {3.0f, 2.0f});
  EXPECT_EQ(values<std::int32_t>(run1("Pow", {&bi32, &ef})), (std::vector<std::int32_t>{8, 9}));

  const Tensor a = makeTensor<std::int32_t>({4}, {-7, 7, -7, 7});
  const Tensor b = makeTensor<std::int32_t>({4}, {3, -3, -3, 3});
  EXPECT_EQ(values<std::int32_t>(run1("Mod", {&a, &b})), (std::vector<std::int32_t>{2, -2, -1, 1}));
  Attributes fmod;
  fmod.set("fmod", std::int64_t{1});
  EXPECT_EQ(values<std::int32_t>(run1("Mod", {&a, &b}, fmod)), (std::vector<std::int32_t>{-1, 1, -1, 1}));
  const Tensor fa = makeTensor<float>({2}, {-5.5f, 5.5f});
  const Tensor fb = makeTensor<float>({}, {2.0f});
  EXPECT_EQ(values<float>(run1("Mod", {&fa, &fb}, fmod)), (std::vector<float>{-1.5f, 1.5f}));

  const Tensor px = makeTensor<float>({2, 2}, {-2.0f, 3.0f, -4.0f, 5.0f});
  const Tensor slope = makeTensor<float>({2}, {0.5f, 0.25f});
  EXPECT_EQ(values<float>(run1("PRelu", {&px, &slope})), (std::vector<float>{-1.0f, 3.0f, -2.0f, 5.0f}));
}

TEST(ElementwiseOpsTest, UnaryActivationsMatchFormulas) {
  const std::vector<double> xs = {-4.0, -1.5, -0.25, 0.0, 0.3, 1.0, 2.5, 7.0};
  struct Case {
    std::string type;
    std::function<double(double)> ref;
    Attributes attrs;
  };
  Attributes leaky;
  leaky.set("alpha", 0.1f);
  Attributes gtanh;
  gtanh.set("approximate", std::string("tanh"));
  Attributes elu;
  elu.set("alpha", 2.0f);
  const auto softplus = [](double x) { return std::log1p(std::exp(x)); };
  const std::vector<Case> cases = {
      {"Relu", [](double x) { return std::max(0.0, x); }, {}},
      {"LeakyRelu", [](double x) { return x < 0 ? 0.1 * x : x; }, leaky},
      {"Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, {}},
      {"Silu", [](double x) { return x / (1.0 + std::exp(-x)); }, {}},
      {"Tanh", [](double x) { return std::tanh(x); }, {}},
      {"HardSigmoid", [](double x) { return std::clamp(0.2 * x + 0.5, 0.0, 1.0); }, {}},
      {"HardSwish", [](double x) { return x * std::clamp(x / 6.0 + 0.5, 0.0, 1.0); }, {}},
      {"Erf", [](double x) { return std::erf(x); }, {}},
      {"Gelu", [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }, {}},
      {"Gelu", [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); },
       gtanh},
      {"Neg", [](double x) { return -x; }, {}},
      {"Exp", [](double x) { return std::exp(x); }, {}},
      {"Abs", [](double x) { return std::fabs(x); }, {}},
      {"Ceil", [](double x) { return std::ceil(x); }, {}},
      {"Floor", [](double x) { return std::floor(x); }, {}},
      {"Sign", [](double x) { return static_cast<double>((x > 0) - (x < 0)); }, {}},
      {"Softplus", softplus, {}},
      {"Selu",
       [](double x) {
         return x > 0 ? 1.0507009873554805 * x : 1.0507009873554805 * 1.6732632423543772 * (std::exp(x) - 1.0);
       },
       {}},
      {"Elu", [](double x) { return x >= 0 ? x : 2.0 * (std::exp(x) - 1.0); }, elu},
      {"Mish", [&softplus](double x) { return x * std::tanh(softplus(x)); }, {}},
      {"Reciprocal", [](double x) { return 1.0 / x; }, {}},
  };
  for (const Case& c : cases) {
    const Tensor in32 = makeTensor<float>({2, 4}, std::vector<float>(xs.begin(), xs.end()));
    const Tensor in64 = makeTensor<double>({8}, xs);
    const Tensor out32 = run1(c.type, {&in32}, c.attrs);
    const Tensor out64 = run1(c.type, {&in64}, c.attrs);
    ASSERT_EQ(out32.shape(), in32.shape());
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double expected = c.ref(xs[i]);
      if (std::isinf(expected)) {
        EXPECT_EQ(out32.data<float>()[i], static_cast<float>(expected)) << c.type << "(" << xs[i] << ")";
        EXPECT_EQ(out64.data<double>()[i], expected) << c.type << "(" << xs[i] << ")";
        continue;
      }
      const double tol = 1e-5 * std::max(1.0, std::fabs(expected));
      EXPECT_NEAR(out32.data<float>()[i], expected, tol) << c.type << "(" << xs[i] << ")";
      EXPECT_NEAR(out64.data<double>()[i], expected, 1e-7 * std::max(1.0, std::fabs(expected)))  // float attributes
          << c.type << "(" << xs[i] << ")";
    }
  }
  const Tensor pos = makeTensor<float>({3}, {4.0f, 0.25f, 1.0f});
  EXPECT_EQ(values<float>(run1("Sqrt", {&pos})), (std::vector<float>{2.0f, 0.5f, 1.0f}));
  EXPECT_NEAR(run1("Log", {&pos}).data<float>()[0], std::log(4.0), 1e-6);
}

// Float32 Erf (and Gelu) run a rational approximation (erfFloat in elementwise_common.h), not std::erf: it stays
// within 5e-7 relative error of std::erf in double (plus 1e-7 absolute near 0, where float32 itself rounds), over the
// range where erf is not yet +-1 in float32 and beyond.
TEST(ElementwiseOpsTest, Float32ErfStaysWithinAFewUlps) {
  std::vector<float> values;
  for (int i = -60000; i <= 60000; ++i)
    values.push_back(static_cast<float>(i) * 1e-4f);
  for (float tiny : {1e-8f, 3e-6f, 1e-4f, 7e-3f})
    values.insert(values.end(), {tiny, -tiny});
  const Tensor x = makeTensor<float>({static_cast<std::int64_t>(values.size())}, values);
  const Tensor y = run1("Erf", {&x});
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double expected = std::erf(static_cast<double>(values[i]));
    ASSERT_LE(std::fabs(y.data<float>()[i] - expected), 5e-7 * std::fabs(expected) + 1e-7)
        << "erf(" << values[i] << ")";
  }
}

// Float32 Exp and Sigmoid run expFloat (elementwise_common.h), not std::exp: within 3e-7 relative error of exp in
// double over [ln(FLT_MIN), 88.7]; 0 below (where exp is subnormal or 0 in float32) and infinity above 88.72; NaN
// stays NaN. Sigmoid is within 4e-7 relative error of the double one everywhere its float32 value is normal.
TEST(ElementwiseOpsTest, Float32ExpAndSigmoidStayWithinAFewUlps) {
  std::vector<float> values;
  for (int i = -100000; i <= 100000; ++i)
    values.push_back(static_cast<float>(i) * 1e-3f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  values.insert(values.end(), {1e-9f, -1e-9f, 88.7f, 88.72f, 88.73f, -87.33f, -87.34f, -104.0f, nan, inf, -inf});
  const Tensor x = makeTensor<float>({static_cast<std::int64_t>(values.size())}, values);
  const Tensor exp = run1("Exp", {&x});
  const Tensor sigmoid = run1("Sigmoid", {&x});
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    const float e = exp.data<float>()[i], s = sigmoid.data<float>()[i];
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(e) && std::isnan(s));
      continue;
    }
    const double expected = std::exp(v);
    if (v > 88.72283) {
      EXPECT_EQ(e, inf) << "exp(" << v << ")";
    } else if (expected < std::numeric_limits<float>::min()) {
      EXPECT_EQ(e, 0.0f) << "exp(" << v << ")";
    } else {
      ASSERT_LE(std::fabs(e - expected), 3e-7 * expected) << "exp(" << v << ")";
    }
    const double expectedSigmoid = 1.0 / (1.0 + std::exp(-v));
    if (expectedSigmoid >= std::numeric_limits<float>::min()) {
      ASSERT_LE(std::fabs(s - expectedSigmoid), 4e-7 * expectedSigmoid) << "sigmoid(" << v << ")";
    } else {
      ASSERT_LT(s, std::numeric_limits<float>::min()) << "sigmoid(" << v << ")";
    }
  }
}

// Float32 Tanh, Log, Softplus and Mish (and tanh-GELU, Elu) run branch-free approximations (tanhFloat, logFloat,
// log1pUnit over expFloat in elementwise_common.h), not libm: each stays within a few float32 ulps of the double
// function wherever the float32 result is normal, and keeps libm's special values.
TEST(ElementwiseOpsTest, Float32TranscendentalActivationsStayWithinAFewUlps) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> around;  // [-30, 30] densely, then tiny magnitudes
  for (int i = -300000; i <= 300000; ++i)
    around.push_back(static_cast<float>(i) * 1e-4f);
  for (float tiny : {1e-30f, 1e-8f, 3e-6f, 1e-4f, 7e-3f, 0.6249f, 0.6251f})
    around.insert(around.end(), {tiny, -tiny});
  std::vector<float> positive;  // every binade from the smallest subnormal to the largest float, and around 1
  for (float v = std::numeric_limits<float>::denorm_min(); v < 3e38f;
       v = std::max(v * 1.001f, std::nextafter(v, 1.0f)))  // subnormals step by at least one ulp
    positive.push_back(v);
  for (int i = -20000; i <= 20000; ++i)
    positive.push_back(1.0f + static_cast<float>(i) * 6e-8f);
  const auto check = [&](const char* op, const std::vector<float>& xs, double (*ref)(double), double bound) {
    const Tensor x = makeTensor<float>({static_cast<std::int64_t>(xs.size())}, xs);
    const Tensor y = run1(op, {&x});
    double worst = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double expected = ref(xs[i]);
      const float got = y.data<float>()[i];
      if (std::fabs(expected) < std::numeric_limits<float>::min()) {
        ASSERT_LT(std::fabs(got), 2 * std::numeric_limits<float>::min()) << op << "(" << xs[i] << ")";
        continue;
      }
      const double error = std::fabs(got - expected) / std::fabs(expected);
      worst = std::max(worst, error);
      ASSERT_LE(error, bound) << op << "(" << xs[i] << ") = " << got << ", expected " << expected;
    }
    RecordProperty(std::string(op) + "_worst_relative_error", fmt::format("{:.3g}", worst));
    // The special values, as libm gives them.
    const std::vector<float> specials{nan, inf, -inf, 0.0f, -0.0f, -1.0f};
    const Tensor sx = makeTensor<float>({6}, specials);
    const Tensor sy = run1(op, {&sx});
    for (std::size_t i = 0; i < specials.size(); ++i) {
      const float expected = static_cast<float>(ref(specials[i]));
      const float got = sy.data<float>()[i];
      if (std::isnan(expected))
        EXPECT_TRUE(std::isnan(got)) << op << "(" << specials[i] << ") = " << got;
      else
        EXPECT_EQ(got, expected) << op << "(" << specials[i] << ")";
    }
  };
  // Worst relative errors measured (2026-11-27): Tanh 1.3e-7, Log 7.4e-8, Softplus 2.1e-7, Mish 2.5e-7.
  check(
      "Tanh", around, [](double v) { return std::tanh(v); }, 2.5e-7);
  check(
      "Log", positive, [](double v) { return std::log(v); }, 1.5e-7);
  check(
      "Softplus", around, [](double v) { return v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)); },
      4e-7);
  check(
      "Mish", around,
      [](double v) { return v * std::tanh(v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v))); }, 5e-7);
  // The ELU family on expm1Float; measured (2026-11-27): Elu 8.9e-8, Celu 8.9e-8, Selu 1.4e-7.
  const auto elu = [](double v) { return v >= 0 ? v : std::expm1(v); };
  check("Elu", around, elu, 2e-7);
  check("Celu", around, elu, 2e-7);  // alpha = 1
  check(
      "Selu", around,
      [](double v) {
        const double alpha = 1.67326319217681884765625, gamma = 1.05070102214813232421875;  // ONNX's float defaults
        return v > 0 ? gamma * v : gamma * alpha * std::expm1(v);
      },
      3e-7);
}

TEST(ElementwiseOpsTest, UnaryIntegerPaths) {
  const Tensor i = makeTensor<std::int64_t>({4}, {-3, 0, 5, -1});
  EXPECT_EQ(values<std::int64_t>(run1("Relu", {&i})), (std::vector<std::int64_t>{0, 0, 5, 0}));
  EXPECT_EQ(values<std::int64_t>(run1("Abs", {&i})), (std::vector<std::int64_t>{3, 0, 5, 1}));
  EXPECT_EQ(values<std::int64_t>(run1("Neg", {&i})), (std::vector<std::int64_t>{3, 0, -5, 1}));
  EXPECT_EQ(values<std::int64_t>(run1("Sign", {&i})), (std::vector<std::int64_t>{-1, 0, 1, -1}));
  const Tensor j = makeTensor<std::int32_t>({2}, {-2, 3});
  EXPECT_EQ(values<std::int32_t>(run1("Abs", {&j})), (std::vector<std::int32_t>{2, 3}));
}

TEST(ElementwiseOpsTest, IsNaNIsInfAndNanPropagation) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = makeTensor<float>({4}, {1.0f, nan, inf, -inf});
  EXPECT_EQ(values<bool>(run1("IsNaN", {&x})), (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(values<bool>(run1("IsInf", {&x})), (std::vector<bool>{false, false, true, true}));
  Attributes positiveOnly;
  positiveOnly.set("detect_negative", std::int64_t{0});
  EXPECT_EQ(values<bool>(run1("IsInf", {&x}, positiveOnly)), (std::vector<bool>{false, false, true, false}));

  const Tensor y = makeTensor<float>({4}, {nan, 2.0f, 0.0f, 0.0f});
  const Tensor mx = run1("Max", {&x, &y});
  EXPECT_TRUE(std::isnan(mx.data<float>()[0]));
  EXPECT_TRUE(std::isnan(mx.data<float>()[1]));
  EXPECT_EQ(mx.data<float>()[2], inf);
  EXPECT_EQ(mx.data<float>()[3], 0.0f);
}

TEST(ElementwiseOpsTest, ComparisonsAndLogic) {
  const Tensor a = makeTensor<std::int32_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = makeTensor<std::int32_t>({3}, {2, 2, 7});
  EXPECT_EQ(values<bool>(run1("Equal", {&a, &b})), (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_EQ(values<bool>(run1("Less", {&a, &b})), (std::vector<bool>{true, false, true, false, false, true}));
  EXPECT_EQ(values<bool>(run1("Greater", {&a, &b})), (std::vector<bool>{false, false, false, true, true, false}));
  EXPECT_EQ(values<bool>(run1("LessOrEqual", {&a, &b})), (std::vector<bool>{true, true, true, false, false, true}));
  EXPECT_EQ(values<bool>(run1("GreaterOrEqual", {&a, &b})), (std::vector<bool>{false, true, false, true, true, false}));
  const Tensor f = makeTensor<double>({2, 1}, {0.5, 2.0});
  const Tensor g = makeTensor<double>({1, 2}, {1.0, 2.0});
  EXPECT_EQ(run1("Less", {&f, &g}).shape(), (Shape{2, 2}));
  EXPECT_EQ(values<bool>(run1("Less", {&f, &g})), (std::vector<bool>{true, true, false, false}));

  const Tensor p = makeTensor<bool>({2, 2}, {true, true, false, false});
  const Tensor q = makeTensor<bool>({2}, {true, false});
  EXPECT_EQ(values<bool>(run1("And", {&p, &q})), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(values<bool>(run1("Or", {&p, &q})), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(values<bool>(run1("Xor", {&p, &q})), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(values<bool>(run1("Not", {&q})), (std::vector<bool>{false, true}));
  EXPECT_EQ(values<bool>(run1("Equal", {&p, &q})), (std::vector<bool>{true, false, false, true}));
  const Tensor u = makeTensor<std::uint8_t>({2}, {3, 200});
  const Tensor v = makeTensor<std::uint8_t>({}, {100});
  EXPECT_EQ(values<bool>(run1("Greater", {&u, &v})), (std::vector<bool>{false, true}));
  EXPECT_THROW(run1("And", {&a, &b}), Error);
}

TEST(ElementwiseOpsTest, WhereBroadcastsAllThreeInputs) {
  const Tensor cond = makeTensor<bool>({2, 1}, {true, false});
  const Tensor x = makeTensor<float>({1, 3}, {1.0f, 2.0f, 3.0f});
  const Tensor y = makeTensor<float>({}, {-1.0f});
  const Tensor out = run1("Where", {&cond, &x, &y});
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{1.0f, 2.0f, 3.0f, -1.0f, -1.0f, -1.0f}));

  const Tensor c2 = makeTensor<bool>({3}, {true, false, true});
  const Tensor xi = makeTensor<std::int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor yi = makeTensor<std::int64_t>({2, 1}, {-1, -2});
  EXPECT_EQ(values<std::int64_t>(run1("Where", {&c2, &xi, &yi})), (std::vector<std::int64_t>{1, -1, 3, 4, -2, 6}));
  const Tensor xb = makeTensor<bool>({3}, {true, true, true});
  const Tensor yb = makeTensor<bool>({3}, {false, false, false});
  EXPECT_EQ(values<bool>(run1("Where", {&c2, &xb, &yb})), (std::vector<bool>{true, false, true}));
}

TEST(ElementwiseOpsTest, CastBetweenDTypes) {
  const Tensor f = makeTensor<float>({5}, {1.75f, -2.5f, 0.0f, 300.0f, -1.0f});
  const auto castTo = [](const Tensor& t, DType to) {
    Attributes attrs;
    attrs.set("to", std::int64_t{dtypeToOnnx(to)});
    return run1("Cast", {&t}, attrs);
  };
  EXPECT_EQ(values<std::int32_t>(castTo(f, DType::Int32)), (std::vector<std::int32_t>{1, -2, 0, 300, -1}));
  EXPECT_EQ(values<std::int64_t>(castTo(f, DType::Int64)), (std::vector<std::int64_t>{1, -2, 0, 300, -1}));
  EXPECT_EQ(values<bool>(castTo(f, DType::Bool)), (std::vector<bool>{true, true, false, true, true}));
  EXPECT_EQ(values<std::uint8_t>(castTo(f, DType::UInt8)), (std::vector<std::uint8_t>{1, 254, 0, 44, 255}));
  EXPECT_EQ(values<double>(castTo(f, DType::Float64)), (std::vector<double>{1.75, -2.5, 0.0, 300.0, -1.0}));

  const Tensor half = castTo(f, DType::Float16);
  EXPECT_EQ(half.dtype(), DType::Float16);
  EXPECT_EQ(values<float>(castTo(half, DType::Float32)), values<float>(f));  // all exactly representable
  const Tensor bf = castTo(f, DType::BFloat16);
  EXPECT_EQ(values<float>(castTo(bf, DType::Float32)), values<float>(f));
  EXPECT_EQ(values<std::int64_t>(castTo(half, DType::Int64)), (std::vector<std::int64_t>{1, -2, 0, 300, -1}));

  const Tensor b = makeTensor<bool>({2}, {true, false});
  EXPECT_EQ(values<float>(castTo(b, DType::Float32)), (std::vector<float>{1.0f, 0.0f}));
  EXPECT_EQ(values<std::int8_t>(castTo(b, DType::Int8)), (std::vector<std::int8_t>{1, 0}));
  const Tensor big = makeTensor<std::int64_t>({2}, {(std::int64_t{1} << 40) + 1, -7});
  EXPECT_EQ(values<double>(castTo(big, DType::Float64)), (std::vector<double>{1099511627777.0, -7.0}));
  EXPECT_EQ(values<std::int32_t>(castTo(big, DType::Int32)), (std::vector<std::int32_t>{1, -7}));

  const Tensor like = makeTensor<std::int32_t>({}, {0});
  EXPECT_EQ(values<std::int32_t>(run1("CastLike", {&f, &like})), (std::vector<std::int32_t>{1, -2, 0, 300, -1}));
  Attributes bad;
  bad.set("to", std::int64_t{8});  // string
  EXPECT_THROW(run1("Cast", {&f}, bad), Error);
}

TEST(ElementwiseOpsTest, ClipWithOptionalBounds) {
  const Tensor x = makeTensor<float>({5}, {-3.0f, -1.0f, 0.0f, 2.0f, 9.0f});
  const Tensor lo = makeTensor<float>({}, {-1.5f});
  const Tensor hi = makeTensor<float>({}, {1.0f});
  EXPECT_EQ(values<float>(run1("Clip", {&x, &lo, &hi})), (std::vector<float>{-1.5f, -1.0f, 0.0f, 1.0f, 1.0f}));
  EXPECT_EQ(values<float>(run1("Clip", {&x, &lo})), (std::vector<float>{-1.5f, -1.0f, 0.0f, 2.0f, 9.0f}));
  EXPECT_EQ(values<float>(run1("Clip", {&x, nullptr, &hi})), (std::vector<float>{-3.0f, -1.0f, 0.0f, 1.0f, 1.0f}));
  EXPECT_EQ(values<float>(run1("Clip", {&x})), values<float>(x));
  // min > max: everything becomes max.
  EXPECT_EQ(values<float>(run1("Clip", {&x, &hi, &lo})), std::vector<float>(5, -1.5f));
  const Tensor xi = makeTensor<std::int32_t>({3}, {-5, 0, 5});
  const Tensor li = makeTensor<std::int32_t>({}, {-2});
  EXPECT_EQ(values<std::int32_t>(run1("Clip", {&xi, &li})), (std::vector<std::int32_t>{-2, 0, 5}));
  EXPECT_THROW(run1("Clip", {&xi, &lo}), Error);  // bound dtype mismatch
}

TEST(ElementwiseOpsTest, VariadicMinMaxSumMean) {
  const Tensor a = makeTensor<float>({2, 1}, {1.0f, 6.0f});
  const Tensor b = makeTensor<float>({3}, {2.0f, 5.0f, 9.0f});
  const Tensor c = makeTensor<float>({}, {4.0f});
  EXPECT_EQ(values<float>(run1("Max", {&a, &b, &c})), (std::vector<float>{4.0f, 5.0f, 9.0f, 6.0f, 6.0f, 9.0f}));
  EXPECT_EQ(values<float>(run1("Min", {&a, &b, &c})), (std::vector<float>{1.0f, 1.0f, 1.0f, 2.0f, 4.0f, 4.0f}));
  EXPECT_EQ(values<float>(run1("Sum", {&a, &b, &c})), (std::vector<float>{7.0f, 10.0f, 14.0f, 12.0f, 15.0f, 19.0f}));
  const Tensor mean = run1("Mean", {&a, &b, &c});
  EXPECT_EQ(mean.shape(), (Shape{2, 3}));
  EXPECT_FLOAT_EQ(mean.data<float>()[0], 7.0f / 3.0f);
  EXPECT_FLOAT_EQ(mean.data<float>()[5], 19.0f / 3.0f);
  EXPECT_EQ(values<float>(run1("Sum", {&b})), values<float>(b));  // single input: a copy
  const Tensor i = makeTensor<std::int64_t>({2}, {3, -8});
  const Tensor j = makeTensor<std::int64_t>({2}, {-1, 4});
  EXPECT_EQ(values<std::int64_t>(run1("Max", {&i, &j})), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(values<std::int64_t>(run1("Sum", {&i, &j, &i})), (std::vector<std::int64_t>{5, -12}));
  const Tensor d = makeTensor<float>({2}, {1.0f, 2.0f});
  EXPECT_THROW(run1("Max", {&b, &d}), Error);
}

TEST(ElementwiseOpsTest, DropoutInferenceAndTraining) {
  const Tensor x = iota<float>({100, 100}, 1.0, 0.001);
  // Inference: identity, all-true mask.
  auto outs = runOpEagerly("Dropout", {&x}, {}, 2, /*training=*/false);
  EXPECT_EQ(values<float>(outs[0]), values<float>(x));
  EXPECT_EQ(outs[1].dtype(), DType::Bool);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_TRUE(outs[1].data<bool>()[i]);
  }
  // training_mode input false wins over executor training.
  const Tensor ratio = makeTensor<float>({}, {0.25f});
  const Tensor off = makeTensor<bool>({}, {false});
  outs = runOpEagerly("Dropout", {&x, &ratio, &off}, {}, 2, /*training=*/true);
  EXPECT_EQ(values<float>(outs[0]), values<float>(x));

  // Training: kept values are scaled by 1 / (1 - ratio), deterministic for a seed and step.
  const Tensor on = makeTensor<bool>({}, {true});
  const auto first = runOpEagerly("Dropout", {&x, &ratio, &on}, {}, 2);
  const auto second = runOpEagerly("Dropout", {&x, &ratio, &on}, {}, 2);
  EXPECT_EQ(values<float>(first[0]), values<float>(second[0]));
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = first[1].data<bool>()[i];
    kept += keep ? 1 : 0;
    ASSERT_FLOAT_EQ(first[0].data<float>()[i], keep ? x.data<float>()[i] / 0.75f : 0.0f);
  }
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(x.numel()), 0.75, 0.02);
  Attributes seeded;
  seeded.set("seed", std::int64_t{42});
  const auto other = runOpEagerly("Dropout", {&x, &ratio, &on}, seeded, 1);
  EXPECT_NE(values<float>(other[0]), values<float>(first[0]));
  EXPECT_FALSE(OpRegistry::instance().schema("Dropout")->foldable);
  // Single output requested.
  EXPECT_EQ(runOpEagerly("Dropout", {&x}, {}, 1).size(), 1u);
}

TEST(ElementwiseOpsTest, IdentityCopiesAnyDType) {
  const Tensor i = makeTensor<std::int64_t>({2, 2}, {1, 2, 3, 4});
  const Tensor out = run1("Identity", {&i});
  EXPECT_EQ(out.shape(), i.shape());
  EXPECT_EQ(values<std::int64_t>(out), values<std::int64_t>(i));
  EXPECT_NE(out.rawData(), i.rawData());
}

}  // namespace
}  // namespace strata
