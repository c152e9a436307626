// Unit tests for the Resize and ResizeGrad CPU kernels (resize_ops.cpp, resize_plan.cpp, resize_passes.cpp):
// every mode against a port of ONNX's reference implementation (onnx/backend/test/case/node/resize.py), values
// worked out by hand for a few, ResizeGrad as the exact adjoint of Resize, determinism across thread counts, and
// the errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "strata/thread_pool.h"

namespace strata {
namespace resize_ops_test {

using I64 = std::vector<std::int64_t>;

Tensor doubles(const Shape& shape, const std::vector<double>& values) {
  Tensor t = Tensor::empty(DType::Float64, shape);
  EXPECT_EQ(static_cast<std::size_t>(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.data<double>());
  return t;
}

Tensor floats(const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::Float32, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor ints(const I64& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<std::int64_t>());
  return t;
}

Tensor randomDoubles(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(DType::Float64, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = dist(rng);
  return t;
}

Tensor toFloat(const Tensor& t) {
  Tensor out = Tensor::empty(DType::Float32, t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i)
    out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
  return out;
}

struct Case {
  std::string mode = "nearest";
  std::string coordinates = "half_pixel";
  std::string nearest = "round_prefer_floor";
  double cubicA = -0.75;
  bool excludeOutside = false;
  double extrapolation = 0.0;
  std::vector<float> scales;  // empty: sizes
  I64 sizes;
  std::vector<float> roi;

  Attributes attrs() const {
    Attributes a;
    a.set("mode", mode);
    a.set("coordinate_transformation_mode", coordinates);
    a.set("nearest_mode", nearest);
    a.set("cubic_coeff_a", static_cast<float>(cubicA));
    a.set("exclude_outside", std::int64_t{excludeOutside ? 1 : 0});
    a.set("extrapolation_value", static_cast<float>(extrapolation));
    return a;
  }
  std::string name() const {
    return mode + "/" + coordinates + (mode == "nearest" ? "/" + nearest : "") +
           (excludeOutside ? "/exclude_outside" : "");
  }
};

// The node's inputs: X, roi, scales, sizes (absent ones as undefined tensors).
std::vector<Tensor> operands(const Case& c) {
  return {Tensor(), c.roi.empty() ? Tensor() : floats(c.roi), c.scales.empty() ? Tensor() : floats(c.scales),
          c.sizes.empty() ? Tensor() : ints(c.sizes)};
}

std::vector<const Tensor*> pointers(const Tensor& first, const std::vector<Tensor>& rest) {
  std::vector<const Tensor*> p{&first};
  for (std::size_t i = 1; i < rest.size(); ++i)
    p.push_back(rest[i].defined() ? &rest[i] : nullptr);
  while (p.back() == nullptr)
    p.pop_back();
  return p;
}

Tensor resize(const Tensor& x, const Case& c, Attributes attrs = {}) {
  Attributes a = c.attrs();
  for (const auto& [name, value] : attrs.all())
    a.set(name, value);
  const std::vector<Tensor> ops = operands(c);
  return runOpEagerly("Resize", pointers(x, ops), a).at(0);
}

Tensor resizeGrad(const Tensor& dy, const Shape& xShape, const Case& c) {
  Attributes a = c.attrs();
  a.set("input_shape", xShape);
  const std::vector<Tensor> ops = operands(c);
  return runOpEagerly("ResizeGrad", pointers(dy, ops), a).at(0);
}

// ---- A port of ONNX's reference implementation (interpolate_nd), element by element ----

std::vector<double> referenceCoeffs(const Case& c, double ratio) {
  if (c.mode == "nearest") {
    if (ratio == 1.0)
      return {0, 1};
    if (c.nearest == "round_prefer_floor")
      return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (c.nearest == "round_prefer_ceil")
      return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (c.nearest == "floor")
      return {1, 0};
    return {0, 1};
  }
  if (c.mode == "linear")
    return {1 - ratio, ratio};
  const double a = c.cubicA;
  return {((a * (ratio + 1) - 5 * a) * (ratio + 1) + 8 * a) * (ratio + 1) - 4 * a,
          ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
          ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1,
          ((a * ((1 - ratio) + 1) - 5 * a) * ((1 - ratio) + 1) + 8 * a) * ((1 - ratio) + 1) - 4 * a};
}

double interpolate1d(const std::vector<double>& data, double scale, std::int64_t x, const Case& c, double roiStart,
                     double roiEnd, std::int64_t outSize) {
  const auto inputWidth = static_cast<double>(data.size());
  const double outputWidth = scale * inputWidth;
  const auto xr = static_cast<double>(x);
  double xOri = 0;
  if (c.coordinates == "align_corners") {
    xOri = outputWidth == 1 ? 0.0 : xr * (inputWidth - 1) / (outputWidth - 1);
  } else if (c.coordinates == "asymmetric") {
    xOri = xr / scale;
  } else if (c.coordinates == "tf_crop_and_resize") {
    xOri = outputWidth == 1 ? (roiEnd - roiStart) * (inputWidth - 1) / 2
                            : xr * (roiEnd - roiStart) * (inputWidth - 1) / (outputWidth - 1);
    xOri += roiStart * (inputWidth - 1);
    if (xOri < 0 || xOri > inputWidth - 1)
      return c.extrapolation;
  } else if (c.coordinates == "pytorch_half_pixel") {
    xOri = outputWidth == 1 ? -0.5 : (xr + 0.5) / scale - 0.5;
  } else if (c.coordinates == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(outSize) / outputWidth;
    xOri = inputWidth / 2 * (1 - adjustment) + (xr + 0.5) / scale - 0.5;
  } else if (c.coordinates == "tf_half_pixel_for_nn") {
    xOri = (xr + 0.5) / scale;
  } else {
    xOri = (xr + 0.5) / scale - 0.5;
  }
  const double xInt = std::floor(xOri);
  const double ratio = xOri == xInt ? 1.0 : xOri - xInt;
  std::vector<double> coeffs = referenceCoeffs(c, ratio);
  const auto n = static_cast<std::int64_t>(coeffs.size());
  const std::int64_t pad = (n + 1) / 2;
  std::vector<double> padded;
  for (std::int64_t i = -pad; i < static_cast<std::int64_t>(data.size()) + pad; ++i)
    padded.push_back(
        data[static_cast<std::size_t>(std::clamp<std::int64_t>(i, 0, static_cast<std::int64_t>(data.size()) - 1))]);
  // The reference measures distances in padded coordinates (x + pad), which can round x = 1 + 2^-52 to 2 while its
  // ratio stays 2^-52: the distances are taken from x itself here, the answer the formulas mean.
  std::vector<std::int64_t> order(padded.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return std::abs(xOri - static_cast<double>(a - pad)) < std::abs(xOri - static_cast<double>(b - pad));
  });
  std::vector<std::int64_t> idx(order.begin(), order.begin() + n);
  std::sort(idx.begin(), idx.end());
  if (c.excludeOutside) {
    double sum = 0;
    for (std::int64_t k = 0; k < n; ++k) {
      const std::int64_t i = idx[static_cast<std::size_t>(k)] - pad;
      if (i < 0 || i >= static_cast<std::int64_t>(data.size()))
        coeffs[static_cast<std::size_t>(k)] = 0;
      sum += coeffs[static_cast<std::size_t>(k)];
    }
    for (double& w : coeffs)
      w /= sum;
  }
  double value = 0;
  for (std::int64_t k = 0; k < n; ++k)
    value += coeffs[static_cast<std::size_t>(k)] * padded[static_cast<std::size_t>(idx[static_cast<std::size_t>(k)])];
  return value;
}

double interpolateNd(const double* data, const Shape& shape, std::size_t axis, const std::vector<double>& scales,
                     const I64& x, const Case& c, const Shape& outShape) {
  const std::int64_t stride = std::accumulate(shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, shape.end(),
                                              std::int64_t{1}, std::multiplies<>());
  std::vector<double> values(static_cast<std::size_t>(shape[axis]));
  for (std::int64_t i = 0; i < shape[axis]; ++i) {
    values[static_cast<std::size_t>(i)] =
        axis + 1 == shape.size() ? data[i] : interpolateNd(data + i * stride, shape, axis + 1, scales, x, c, outShape);
  }
  const std::size_t rank = shape.size();
  const double roiStart = c.roi.empty() ? 0.0 : c.roi[axis];
  const double roiEnd = c.roi.empty() ? 1.0 : c.roi[axis + rank];
  return interpolate1d(values, scales[axis], x[axis], c, roiStart, roiEnd, outShape[axis]);
}

Tensor reference(const Tensor& x, const Case& c) {
  const Shape& shape = x.shape();
  Shape outShape;
  std::vector<double> scales;
  for (std::size_t a = 0; a < shape.size(); ++a) {
    if (c.scales.empty()) {
      outShape.push_back(c.sizes[a]);
      scales.push_back(static_cast<double>(c.sizes[a]) / static_cast<double>(shape[a]));
    } else {
      scales.push_back(static_cast<double>(c.scales[a]));
      outShape.push_back(static_cast<std::int64_t>(std::floor(scales[a] * static_cast<double>(shape[a]))));
    }
  }
  Tensor out = Tensor::empty(DType::Float64, outShape);
  I64 index(shape.size(), 0);
  for (std::int64_t flat = 0; flat < out.numel(); ++flat) {
    std::int64_t rest = flat;
    for (std::size_t a = shape.size(); a-- > 0;) {
      index[a] = rest % outShape[a];
      rest /= outShape[a];
    }
    out.data<double>()[flat] = interpolateNd(x.data<double>(), shape, 0, scales, index, c, outShape);
  }
  return out;
}

void expectNear(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.dtype() == DType::Float64 ? actual.data<double>()[i] : actual.data<float>()[i];
    ASSERT_NEAR(a, expected.data<double>()[i], tol) << what << " at flat index " << i;
  }
}

double dot(const Tensor& a, const Tensor& b) {
  double sum = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i)
    sum += a.data<double>()[i] * b.data<double>()[i];
  return sum;
}

// The kernel against the reference (float64 tightly, float32 loosely), and ResizeGrad against the adjoint identity
// <Resize(x), y> = <x, ResizeGrad(y)>.
void expectMatchesReference(const Case& c, const Shape& shape, unsigned seed) {
  SCOPED_TRACE(c.name());
  const Tensor x = randomDoubles(shape, seed);
  const Tensor want = reference(x, c);
  const Tensor got = resize(x, c);
  expectNear(got, want, 1e-12, "float64 " + c.name());
  expectNear(resize(toFloat(x), c), want, 2e-5, "float32 " + c.name());
  const Tensor y = randomDoubles(got.shape(), seed + 100);
  const Tensor dx = resizeGrad(y, shape, c);
  ASSERT_EQ(dx.shape(), shape);
  // Resize is affine (tf_crop_and_resize's extrapolation value is the constant part): its linear part is adjoint.
  const double linear = dot(got, y) - dot(resize(Tensor::zeros(DType::Float64, shape), c), y);
  EXPECT_NEAR(linear, dot(x, dx), 1e-10 * (1 + std::abs(linear))) << "adjoint " << c.name();
}

const char* const kCoordinateModes[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                        "asymmetric", "tf_half_pixel_for_nn", "half_pixel_symmetric"};

TEST(ResizeOpsTest, EveryModeMatchesOnnxReference) {
  unsigned seed = 1;
  for (const char* coordinates : kCoordinateModes) {
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      const std::vector<std::string> roundings =
          std::string(mode) == "nearest"
              ? std::vector<std::string>{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}
              : std::vector<std::string>{"round_prefer_floor"};
      for (const std::string& nearest : roundings) {
        Case c;
        c.mode = mode;
        c.coordinates = coordinates;
        c.nearest = nearest;
        c.scales = {1.0F, 1.0F, 2.0F, 2.0F};  // upsampling x2 (bilinear's common case)
        expectMatchesReference(c, {2, 3, 4, 5}, seed++);
        c.scales = {1.0F, 1.0F, 0.6F, 0.5F};  // downsampling, outputs whose real length has a fraction
        expectMatchesReference(c, {1, 2, 5, 7}, seed++);
        c.scales.clear();
        c.sizes = {1, 2, 9, 4};  // odd sizes: up on one axis, down on the other
        expectMatchesReference(c, {1, 2, 5, 7}, seed++);
        c.sizes = {2, 1, 1, 3};  // to one element along an axis
        expectMatchesReference(c, {2, 1, 4, 6}, seed++);
      }
    }
  }
}

TEST(ResizeOpsTest, CubicCoefficientAndExcludeOutside) {
  for (bool exclude : {false, true}) {
    for (double a : {-0.5, -0.75}) {
      Case c;
      c.mode = "cubic";
      c.cubicA = a;
      c.excludeOutside = exclude;
      c.scales = {1.0F, 1.0F, 2.0F, 2.0F};
      expectMatchesReference(c, {1, 2, 4, 4}, 51);
      c.scales = {1.0F, 1.0F, 0.8F, 0.8F};
      expectMatchesReference(c, {1, 1, 4, 4}, 52);
      c.coordinates = "align_corners";
      expectMatchesReference(c, {1, 1, 5, 3}, 53);
    }
  }
}

TEST(ResizeOpsTest, NonSpatialAndSingleAxes) {
  Case c;
  c.mode = "linear";
  c.scales = {2.0F, 1.0F, 1.5F};  // rank 3, batch axis resized too
  expectMatchesReference(c, {2, 3, 4}, 61);
  c.scales = {3.0F};  // rank 1
  expectMatchesReference(c, {5}, 62);
  c.scales = {1.0F, 0.5F, 1.0F, 1.0F, 2.0F};  // rank 5, a channel axis
  c.mode = "cubic";
  expectMatchesReference(c, {1, 4, 2, 3, 3}, 63);
  c.scales = {1.0F, 1.0F, 2.0F, 1.0F, 0.5F};  // two axes with one between them (Note [Fused resize passes])
  expectMatchesReference(c, {2, 2, 3, 3, 4}, 64);
  c.mode = "linear";
  c.scales = {1.0F, 20.0F};  // 40 output positions read each input one: the adjoint's compressed lists
  expectMatchesReference(c, {3, 2}, 65);
  c.scales = {1.0F, 20.0F, 1.0F};
  expectMatchesReference(c, {2, 2, 3}, 66);
}

TEST(ResizeOpsTest, CropAndResizeExtrapolates) {
  Case c;
  c.mode = "linear";
  c.coordinates = "tf_crop_and_resize";
  c.extrapolation = 10.0;
  c.roi = {0, 0, 0.4F, 0.6F, 1, 1, 1.2F, 1.7F};  // ONNX's test_resize_tf_crop_and_resize_extrapolation_value
  c.sizes = {1, 1, 3, 3};
  expectMatchesReference(c, {1, 1, 4, 4}, 71);
  c.roi = {0, 0, 0.4F, 0.6F, 1, 1, 0.6F, 0.8F};
  c.mode = "cubic";
  c.sizes = {2, 1, 5, 4};
  expectMatchesReference(c, {2, 1, 4, 4}, 72);
}

// Values worked out by hand (ONNX's operator documentation has the same ones).
TEST(ResizeOpsTest, HandWorkedValues) {
  const Tensor x = doubles({1, 1, 2, 2}, {1, 2, 3, 4});
  Case bilinear;
  bilinear.mode = "linear";
  bilinear.scales = {1, 1, 2, 2};
  expectNear(resize(x, bilinear),
             doubles({1, 1, 4, 4}, {1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}),
             1e-15, "bilinear x2, half_pixel");
  bilinear.coordinates = "align_corners";
  expectNear(resize(x, bilinear),
             doubles({1, 1, 4, 4}, {1, 4.0 / 3, 5.0 / 3, 2, 5.0 / 3, 2, 7.0 / 3, 8.0 / 3, 7.0 / 3, 8.0 / 3, 3, 10.0 / 3,
                                    3, 10.0 / 3, 11.0 / 3, 4}),
             1e-15, "bilinear x2, align_corners");
  Case nearest;
  nearest.scales = {1, 1, 2, 3};
  expectNear(resize(x, nearest),
             doubles({1, 1, 4, 6}, {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}), 0,
             "nearest x2 x3");
  // Downsampling by 0.6 from 4: the output has 2 positions, sampled at 1/0.6 - 0.5 = 1.1667 and 2.8333 (half_pixel).
  const Tensor row = doubles({1, 4}, {1, 2, 3, 4});
  Case down;
  down.mode = "linear";
  down.scales = {1, 0.6F};
  const double s = static_cast<double>(0.6F);
  expectNear(resize(row, down), doubles({1, 2}, {1 + (0.5 / s - 0.5), 1 + (1.5 / s - 0.5)}), 1e-12, "downsample");
}

TEST(ResizeOpsTest, ScaleOneCopiesAndTakesNoPass) {
  const Tensor x = randomDoubles({2, 3, 5, 4}, 81);
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    Case c;
    c.mode = mode;
    c.scales = {1, 1, 1, 1};
    const Tensor y = resize(x, c);
    expectNear(y, x, 0, mode);
  }
  // Only the axes that change take a pass.
  Case c;
  c.mode = "linear";
  c.scales = {1, 1, 2, 1};
  const Tensor s = floats(c.scales);
  std::vector<InputInfo> infos{InputInfo{true, x.meta(), &x}, InputInfo{}, InputInfo{true, s.meta(), &s}};
  const std::string node = "node";
  const Attributes attrs = c.attrs();
  const std::vector<TensorMeta> out =
      OpRegistry::instance().schema("Resize")->inferShapes(ShapeContext{infos, attrs, 1, node, "Resize"});
  const auto kernel = (*OpRegistry::instance().kernel("Resize", DeviceType::CPU))(KernelInit{infos, out, attrs, node});
  EXPECT_EQ(kernel->implementation(), "1 separable pass");
}

TEST(ResizeOpsTest, BilinearFloat32LargeMapsMatchFloat64) {
  Case c;
  c.mode = "linear";
  c.scales = {1, 1, 2, 2};
  const Tensor x = randomDoubles({2, 8, 33, 40}, 91);
  const Tensor want = resize(x, c);
  expectNear(resize(toFloat(x), c), want, 1e-6, "float32 x2");
  c.scales = {1, 1, 0.5F, 0.5F};
  expectNear(resize(toFloat(x), c), resize(x, c), 1e-6, "float32 x0.5");
  const Tensor dy = randomDoubles({2, 8, 66, 80}, 92);
  c.scales = {1, 1, 2, 2};
  expectNear(resizeGrad(toFloat(dy), x.shape(), c), resizeGrad(dy, x.shape(), c), 1e-5, "float32 gradient");
}

// Note [Separable resize]: each element of the gradient is summed by one task in a fixed order.
TEST(ResizeOpsTest, GradientDoesNotDependOnThreadCount) {
  const int threads = ThreadPool::instance().threads();
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    Case c;
    c.mode = mode;
    c.scales = {1, 1, 2.5F, 1.75F};
    const Tensor dy = toFloat(randomDoubles({4, 16, 50, 35}, 101));
    ThreadPool::instance().setThreads(1);
    const Tensor one = resizeGrad(dy, {4, 16, 20, 20}, c);
    ThreadPool::instance().setThreads(4);
    const Tensor four = resizeGrad(dy, {4, 16, 20, 20}, c);
    ThreadPool::instance().setThreads(threads);
    ASSERT_EQ(one.bytes(), four.bytes());
    EXPECT_EQ(std::memcmp(one.rawData(), four.rawData(), one.bytes()), 0) << mode;
  }
}

TEST(ResizeOpsTest, EmptyScalesWithSizesAndEmptyOutputs) {
  const Tensor x = randomDoubles({1, 1, 3, 3}, 111);
  const Tensor emptyScales = floats({});
  const Tensor sizes = ints({1, 1, 6, 2});
  Attributes a;
  a.set("mode", std::string("linear"));
  const Tensor y = runOpEagerly("Resize", {&x, nullptr, &emptyScales, &sizes}, a).at(0);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 6, 2}));
  const Tensor zero = ints({1, 1, 0, 2});
  EXPECT_EQ(runOpEagerly("Resize", {&x, nullptr, nullptr, &zero}, a).at(0).shape(), (Shape{1, 1, 0, 2}));
}

void expectError(const std::vector<const Tensor*>& inputs, const Attributes& attrs,
                 const std::vector<std::string>& fragments) {
  try {
    runOpEagerly("Resize", inputs, attrs);
    FAIL() << "expected an error containing " << fragments.front();
  } catch (const Error& e) {
    for (const std::string& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(ResizeOpsTest, ErrorsNameTheNodeAndTheReason) {
  const Tensor x = randomDoubles({1, 1, 3, 3}, 121);
  const Tensor scales = floats({1, 1, 2, 2});
  const Tensor sizes = ints({1, 1, 6, 6});
  Attributes a;
  expectError({&x, nullptr, &scales, &sizes}, a, {"eager Resize", "scales and sizes are both given"});
  expectError({&x}, a, {"eager Resize", "needs scales or sizes"});
  Attributes antialias;
  antialias.set("antialias", std::int64_t{1});
  expectError({&x, nullptr, &scales}, antialias, {"(Resize)", "antialias = 1 is not supported"});
  Attributes policy;
  policy.set("keep_aspect_ratio_policy", std::string("not_larger"));
  expectError({&x, nullptr, &scales}, policy, {"keep_aspect_ratio_policy 'not_larger' is not supported"});
  Attributes badMode;
  badMode.set("mode", std::string("area"));
  expectError({&x, nullptr, &scales}, badMode, {"mode 'area'"});
  const Tensor shortScales = floats({2, 2});
  expectError({&x, nullptr, &shortScales}, a, {"scales has 2 values but the input [1, 1, 3, 3] has rank 4"});
  const Tensor negative = floats({1, 1, -2, 2});
  expectError({&x, nullptr, &negative}, a, {"scale -2 of axis 2 is not a positive number"});
  Attributes crop;
  crop.set("coordinate_transformation_mode", std::string("tf_crop_and_resize"));
  expectError({&x, nullptr, &scales}, crop, {"'tf_crop_and_resize' needs roi"});
  const Tensor ix = Tensor::zeros(DType::Int64, {1, 1, 2, 2});
  expectError({&ix, nullptr, &scales}, a, {"X of type int64 is not supported"});
}

// Scales known only at run time cannot plan the tables: shape inference says so, naming the node and the operand.
TEST(ResizeOpsTest, RunTimeScalesAreAClearError) {
  const Tensor x = randomDoubles({1, 1, 3, 3}, 131);
  const Tensor scales = floats({1, 1, 2, 2});
  std::vector<InputInfo> infos{InputInfo{true, x.meta(), &x}, InputInfo{}, InputInfo{true, scales.meta(), nullptr}};
  const std::string node = "up1";
  const Attributes attrs;
  try {
    OpRegistry::instance().schema("Resize")->inferShapes(ShapeContext{infos, attrs, 1, node, "Resize"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node 'up1' (Resize): scales (input 2) must be known when the plan is built"),
              std::string::npos)
        << what;
  }
}

}  // namespace resize_ops_test
}  // namespace strata
