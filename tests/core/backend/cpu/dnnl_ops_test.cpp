// Tests of the oneDNN-backed CPU ops (core/backend/cpu/dnnl_*.cpp) against direct reference loops.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata {
namespace {

using Ints = std::vector<std::int64_t>;

Tensor randomTensor(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = dist(rng);
  return t;
}

Tensor fromValues(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  EXPECT_EQ(static_cast<std::int64_t>(values.size()), t.numel());
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

template <typename T>
Tensor typedTensor(const Shape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-5, 5);
  Tensor t = Tensor::empty(dtypeOf<T>(), shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<T>()[i] = static_cast<T>(dist(rng));
  return t;
}

void expectClose(const Tensor& actual, const Shape& shape, const std::vector<float>& expected, float tol = 1e-4f) {
  ASSERT_EQ(actual.shape(), shape);
  ASSERT_EQ(actual.dtype(), DType::Float32);
  ASSERT_EQ(static_cast<std::int64_t>(expected.size()), actual.numel());
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    const float e = expected[static_cast<std::size_t>(i)];
    ASSERT_NEAR(actual.data<float>()[i], e, tol * std::max(1.0f, std::fabs(e))) << "at flat index " << i;
  }
}

Tensor run1(const std::string& type, const std::vector<const Tensor*>& inputs, const Attributes& attrs) {
  std::vector<Tensor> out = runOpEagerly(type, inputs, attrs, 1);
  EXPECT_EQ(out.size(), 1u);
  return out.at(0);
}

// Walks all multi-indices of `dims` (row-major order).
bool nextIndex(Ints& index, const Ints& dims) {
  for (std::size_t d = dims.size(); d-- > 0;) {
    if (++index[d] < dims[d])
      return true;
    index[d] = 0;
  }
  return false;
}

std::int64_t flatIndex(const Ints& index, const Ints& dims) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < dims.size(); ++d)
    flat = flat * dims[d] + index[d];
  return flat;
}

struct Window {
  Ints kernel, strides, dilations, padBegin, padEnd;
};

Ints outputSize(const Ints& in, const Window& w, bool ceilMode = false) {
  Ints out;
  for (std::size_t d = 0; d < in.size(); ++d) {
    const std::int64_t span = in[d] + w.padBegin[d] + w.padEnd[d] - (w.kernel[d] - 1) * w.dilations[d] - 1;
    std::int64_t o = (ceilMode ? (span + w.strides[d] - 1) / w.strides[d] : span / w.strides[d]) + 1;
    if (ceilMode && (o - 1) * w.strides[d] >= in[d] + w.padBegin[d])
      --o;
    out.push_back(o);
  }
  return out;
}

// Direct N-d convolution: x [N, C, in...], w [M, C/group, k...], optional bias [M], of element type T, computed in
// double.
template <typename T>
std::vector<double> referenceConvT(const Tensor& x, const Tensor& w, const Tensor* bias, std::int64_t group,
                                   const Window& win, const Ints& out) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const Ints in(xs.begin() + 2, xs.end());
  const Ints kernel(ws.begin() + 2, ws.end());
  const std::int64_t batch = xs[0], channels = xs[1], filters = ws[0], cPerG = ws[1], mPerG = filters / group;
  std::vector<double> y(static_cast<std::size_t>(batch * filters * numElements(out)), 0.0);
  Ints o(out.size(), 0);
  std::size_t yi = 0;
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t m = 0; m < filters; ++m) {
      std::fill(o.begin(), o.end(), 0);
      do {
        double acc = bias != nullptr ? static_cast<double>(bias->data<T>()[m]) : 0.0;
        const std::int64_t g = m / mPerG;
        for (std::int64_t c = 0; c < cPerG; ++c) {
          Ints k(kernel.size(), 0);
          do {
            Ints pos(kernel.size());
            bool valid = true;
            for (std::size_t d = 0; d < kernel.size(); ++d) {
              pos[d] = o[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
              valid = valid && pos[d] >= 0 && pos[d] < in[d];
            }
            if (!valid)
              continue;
            const std::int64_t xc = g * cPerG + c;
            const T xv = x.data<T>()[(n * channels + xc) * numElements(in) + flatIndex(pos, in)];
            const T wv = w.data<T>()[(m * cPerG + c) * numElements(kernel) + flatIndex(k, kernel)];
            acc += static_cast<double>(xv) * static_cast<double>(wv);
          } while (nextIndex(k, kernel));
        }
        y[yi++] = acc;
      } while (nextIndex(o, out));
    }
  }
  return y;
}

std::vector<float> referenceConv(const Tensor& x, const Tensor& w, const Tensor* bias, std::int64_t group,
                                 const Window& win, const Ints& out) {
  const std::vector<double> y = referenceConvT<float>(x, w, bias, group, win, out);
  return std::vector<float>(y.begin(), y.end());
}

Attributes convAttrs(const Window& w, std::int64_t group) {
  Attributes a;
  a.set("strides", w.strides);
  a.set("dilations", w.dilations);
  Ints pads = w.padBegin;
  pads.insert(pads.end(), w.padEnd.begin(), w.padEnd.end());
  a.set("pads", pads);
  a.set("group", group);
  return a;
}

void checkConv(const Shape& xShape, const Shape& wShape, std::int64_t group, const Window& win, bool withBias,
               unsigned seed) {
  Tensor x = randomTensor(xShape, seed);
  Tensor w = randomTensor(wShape, seed + 1);
  Tensor b = randomTensor({wShape[0]}, seed + 2);
  Attributes attrs = convAttrs(win, group);
  std::vector<const Tensor*> inputs{&x, &w};
  if (withBias)
    inputs.push_back(&b);
  Tensor y = run1("Conv", inputs, attrs);
  const Ints out = outputSize(Ints(xShape.begin() + 2, xShape.end()), win);
  Shape yShape{xShape[0], wShape[0]};
  yShape.insert(yShape.end(), out.begin(), out.end());
  expectClose(y, yShape, referenceConv(x, w, withBias ? &b : nullptr, group, win, out));
}

TEST(DnnlConvTest, Plain2DWithBiasAndPads) {
  checkConv({2, 3, 7, 6}, {4, 3, 3, 3}, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 0}, {2, 1}}, true, 1);
}

TEST(DnnlConvTest, StridesAndDilationsWithoutBias) {
  checkConv({1, 4, 11, 9}, {5, 4, 3, 2}, 1, {{3, 2}, {2, 3}, {2, 1}, {1, 2}, {0, 1}}, false, 2);
}

TEST(DnnlConvTest, Grouped) {
  checkConv({2, 6, 8, 8}, {9, 2, 3, 3}, 3, {{3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}}, true, 3);
}

TEST(DnnlConvTest, Depthwise) {
  checkConv({1, 8, 9, 9}, {8, 1, 3, 3}, 8, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, true, 4);
}

TEST(DnnlConvTest, OneByOneStrided) {
  checkConv({2, 16, 8, 8}, {32, 16, 1, 1}, 1, {{1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, true, 5);
}

TEST(DnnlConvTest, PointwiseStaysInPlainLayout) {
  checkConv({2, 16, 6, 5}, {8, 16, 1, 1}, 1, {{1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}, true, 15);
  checkConv({1, 4, 5, 5}, {6, 4, 1, 1}, 1, {{1, 1}, {1, 1}, {1, 1}, {1, 0}, {0, 1}}, false, 16);
}

TEST(DnnlConvTest, Conv1D) {
  checkConv({2, 3, 10}, {4, 3, 3}, 1, {{3}, {2}, {2}, {1}, {2}}, true, 6);
}

TEST(DnnlConvTest, Conv3D) {
  checkConv({1, 2, 5, 6, 4}, {3, 2, 3, 2, 2}, 1, {{3, 2, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {1, 1, 0}}, true, 7);
}

TEST(DnnlConvTest, AutoPadSameUpperLowerAndValid) {
  Tensor x = randomTensor({1, 2, 7, 8}, 8);
  Tensor w = randomTensor({3, 2, 4, 3}, 9);
  // in 7 x 8, kernel 4 x 3, strides 2: out = ceil(in / 2) = 4 x 4; total pads = (4-1)*2 + 4 - 7 = 3 and
  // (4-1)*2 + 3 - 8 = 1.
  struct Case {
    const char* autoPad;
    Window window;
    Ints out;
  };
  const std::vector<Case> cases{
      {"SAME_UPPER", {{4, 3}, {2, 2}, {1, 1}, {1, 0}, {2, 1}}, {4, 4}},
      {"SAME_LOWER", {{4, 3}, {2, 2}, {1, 1}, {2, 1}, {1, 0}}, {4, 4}},
      {"VALID", {{4, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, {2, 3}},
  };
  for (const Case& c : cases) {
    Attributes attrs;
    attrs.set("auto_pad", std::string(c.autoPad));
    attrs.set("strides", Ints{2, 2});
    attrs.set("kernel_shape", Ints{4, 3});
    Tensor y = run1("Conv", {&x, &w}, attrs);
    SCOPED_TRACE(c.autoPad);
    expectClose(y, {1, 3, c.out[0], c.out[1]}, referenceConv(x, w, nullptr, 1, c.window, c.out));
  }
}

TEST(DnnlConvTest, RejectsChannelMismatchNamingBothCounts) {
  Tensor x = randomTensor({1, 5, 4, 4}, 1);
  Tensor w = randomTensor({4, 2, 3, 3}, 2);
  Attributes attrs;
  attrs.set("group", std::int64_t{2});
  try {
    runOpEagerly("Conv", {&x, &w}, attrs);
    FAIL() << "expected strata::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find('5'), std::string::npos) << message;
    EXPECT_NE(message.find('4'), std::string::npos) << message;
  }
}

TEST(DnnlConvTest, RejectsBadAttributesAndTypes) {
  Tensor x = randomTensor({1, 2, 4, 4}, 1);
  Tensor w = randomTensor({3, 2, 3, 3}, 2);
  Attributes kernelMismatch;
  kernelMismatch.set("kernel_shape", Ints{2, 2});
  EXPECT_THROW(runOpEagerly("Conv", {&x, &w}, kernelMismatch), Error);
  Attributes badAutoPad;
  badAutoPad.set("auto_pad", std::string("SAME_MIDDLE"));
  EXPECT_THROW(runOpEagerly("Conv", {&x, &w}, badAutoPad), Error);
  Tensor bigW = randomTensor({3, 2, 5, 5}, 3);
  EXPECT_THROW(runOpEagerly("Conv", {&x, &bigW}, Attributes{}), Error);
  Tensor badBias = randomTensor({4}, 4);
  EXPECT_THROW(runOpEagerly("Conv", {&x, &w, &badBias}, Attributes{}), Error);
  Tensor xd = Tensor::zeros(DType::Float64, {1, 2, 4, 4});
  EXPECT_THROW(runOpEagerly("Conv", {&xd, &w}, Attributes{}), Error);
}

// The kernel caches reordered weights; a different weight tensor, or new values at the same address, must be seen.
// A Conv kernel whose weights are (planTimeWeights) or are not known when the plan is built, and a check of its
// result against the reference after each run.
struct ConvWithWeights {
  Tensor x = randomTensor({1, 16, 10, 10}, 11);
  Tensor w1 = randomTensor({32, 16, 3, 3}, 12);
  Tensor w2 = randomTensor({32, 16, 3, 3}, 13);
  Tensor y = Tensor::empty(DType::Float32, {1, 32, 10, 10});
  std::unique_ptr<OpKernel> kernel;

  explicit ConvWithWeights(bool planTimeWeights) {
    Attributes attrs;
    attrs.set("pads", Ints{1, 1, 1, 1});
    std::vector<InputInfo> infos(2);
    infos[0] = {true, x.meta(), nullptr};
    infos[1] = {true, w1.meta(), planTimeWeights ? &w1 : nullptr};
    const std::string name = "conv";
    const KernelFactory* factory = OpRegistry::instance().kernel("Conv", DeviceType::CPU);
    kernel = (*factory)(KernelInit{infos, {TensorMeta{DType::Float32, {1, 32, 10, 10}}}, attrs, name, false});
  }

  void runWith(const Tensor& w) {
    KernelContext ctx;
    ctx.inputs = {&x, &w};
    ctx.outputs = {&y};
    kernel->compute(ctx);
    const Window win{{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
    expectClose(y, {1, 32, 10, 10}, referenceConv(x, w, nullptr, 1, win, {10, 10}));
  }
};

TEST(DnnlConvTest, WeightCacheFollowsWeightChanges) {
  ConvWithWeights conv(true);
  conv.runWith(conv.w1);
  conv.runWith(conv.w2);
  conv.runWith(conv.w1);
  conv.w1.copyFrom(conv.w2);  // same address, new values: whoever writes weights in place bumps the storage version
  conv.w1.storage()->bumpVersion();
  conv.runWith(conv.w1);
}

// Weights the plan computes (a Transpose or Cast of a parameter) are rewritten at the same address each step with
// no version bump: they must not be served from the cache.
TEST(DnnlConvTest, ComputedWeightsAreNotCached) {
  ConvWithWeights conv(false);
  conv.runWith(conv.w1);
  conv.w1.copyFrom(conv.w2);
  conv.runWith(conv.w1);
}

// ---- ConvTranspose ----

std::vector<float> referenceConvTranspose(const Tensor& x, const Tensor& w, const Tensor* bias, std::int64_t group,
                                          const Window& win, const Ints& out) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const Ints in(xs.begin() + 2, xs.end());
  const Ints kernel(ws.begin() + 2, ws.end());
  const std::int64_t batch = xs[0], channels = xs[1], cPerG = channels / group, mPerG = ws[1];
  const std::int64_t filters = mPerG * group;
  std::vector<double> y(static_cast<std::size_t>(batch * filters * numElements(out)), 0.0);
  for (std::int64_t n = 0; n < batch; ++n) {
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t g = c / cPerG;
      Ints i(in.size(), 0);
      do {
        const float xv = x.data<float>()[(n * channels + c) * numElements(in) + flatIndex(i, in)];
        for (std::int64_t mm = 0; mm < mPerG; ++mm) {
          Ints k(kernel.size(), 0);
          do {
            Ints pos(kernel.size());
            bool valid = true;
            for (std::size_t d = 0; d < kernel.size(); ++d) {
              pos[d] = i[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
              valid = valid && pos[d] >= 0 && pos[d] < out[d];
            }
            if (!valid)
              continue;
            const float wv = w.data<float>()[(c * mPerG + mm) * numElements(kernel) + flatIndex(k, kernel)];
            const std::int64_t m = g * mPerG + mm;
            y[static_cast<std::size_t>((n * filters + m) * numElements(out) + flatIndex(pos, out))] +=
                static_cast<double>(xv) * wv;
          } while (nextIndex(k, kernel));
        }
      } while (nextIndex(i, in));
    }
  }
  std::vector<float> result(y.size());
  const std::int64_t plane = numElements(out);
  for (std::size_t j = 0; j < y.size(); ++j) {
    const std::int64_t m = (static_cast<std::int64_t>(j) / plane) % filters;
    result[j] = static_cast<float>(y[j] + (bias != nullptr ? bias->data<float>()[m] : 0.0));
  }
  return result;
}

TEST(DnnlConvTransposeTest, StridesPadsOutputPaddingGroups) {
  Tensor x = randomTensor({2, 4, 4, 5}, 21);
  Tensor w = randomTensor({4, 3, 3, 2}, 22);  // (C, M/group, k...) with group 2 -> M = 6
  Tensor b = randomTensor({6}, 23);
  Attributes attrs;
  attrs.set("group", std::int64_t{2});
  attrs.set("strides", Ints{2, 3});
  attrs.set("pads", Ints{1, 0, 0, 1});
  attrs.set("output_padding", Ints{1, 0});
  attrs.set("dilations", Ints{1, 2});
  Tensor y = run1("ConvTranspose", {&x, &w, &b}, attrs);
  // out = stride * (in - 1) + output_padding + (k - 1) * d + 1 - pads
  const Ints out{2 * 3 + 1 + 3 - 1, 3 * 4 + 0 + 3 - 1};
  const Window win{{3, 2}, {2, 3}, {1, 2}, {1, 0}, {0, 1}};
  expectClose(y, {2, 6, out[0], out[1]}, referenceConvTranspose(x, w, &b, 2, win, out));
}

TEST(DnnlConvTransposeTest, OnnxOutputShapeAndAutoPadExamples) {
  Tensor x = fromValues({1, 1, 3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8});
  Tensor w = fromValues({1, 2, 3, 3}, std::vector<float>(18, 1.0f));
  Attributes outputShape;
  outputShape.set("strides", Ints{3, 2});
  outputShape.set("output_shape", Ints{10, 8});
  Tensor y = run1("ConvTranspose", {&x, &w}, outputShape);
  const std::vector<float> plane{0, 0, 1, 1, 3,  2, 2,  0, 0, 0, 1, 1, 3,  2, 2,  0, 0, 0, 1, 1, 3, 2, 2, 0,  3, 3,  7,
                                 4, 9, 5, 5, 0,  3, 3,  7, 4, 9, 5, 5, 0,  3, 3,  7, 4, 9, 5, 5, 0, 6, 6, 13, 7, 15, 8,
                                 8, 0, 6, 6, 13, 7, 15, 8, 8, 0, 6, 6, 13, 7, 15, 8, 8, 0, 0, 0, 0, 0, 0, 0,  0, 0};
  std::vector<float> expected = plane;
  expected.insert(expected.end(), plane.begin(), plane.end());
  expectClose(y, {1, 2, 10, 8}, expected);

  Attributes same;
  same.set("auto_pad", std::string("SAME_UPPER"));
  same.set("strides", Ints{2, 2});
  Tensor ys = run1("ConvTranspose", {&x, &w}, same);
  const std::vector<float> samePlane{0, 0, 1, 1, 3, 2, 0, 0, 1,  1,  3,  2,  3, 3, 8,  5, 12, 7,
                                     3, 3, 7, 4, 9, 5, 9, 9, 20, 11, 24, 13, 6, 6, 13, 7, 15, 8};
  std::vector<float> sameExpected = samePlane;
  sameExpected.insert(sameExpected.end(), samePlane.begin(), samePlane.end());
  expectClose(ys, {1, 2, 6, 6}, sameExpected);
}

// ---- Pooling ----

// Direct N-d pooling. The average's divisor counts positions inside the input (count_include_pad 0) or inside the
// explicitly padded input (1).
template <typename T>
std::vector<double> referencePoolT(const Tensor& x, bool isMax, bool countIncludePad, const Window& win,
                                   const Ints& out, std::vector<std::int64_t>* indices = nullptr) {
  const Shape& xs = x.shape();
  const Ints in(xs.begin() + 2, xs.end());
  std::vector<double> y;
  for (std::int64_t plane = 0; plane < xs[0] * xs[1]; ++plane) {
    Ints o(out.size(), 0);
    do {
      double sum = 0;
      double best = -std::numeric_limits<double>::infinity();
      std::int64_t bestIndex = -1, count = 0, padded = 0;
      Ints k(win.kernel.size(), 0);
      do {
        Ints pos(k.size());
        bool valid = true, inPadded = true;
        for (std::size_t d = 0; d < k.size(); ++d) {
          pos[d] = o[d] * win.strides[d] - win.padBegin[d] + k[d] * win.dilations[d];
          valid = valid && pos[d] >= 0 && pos[d] < in[d];
          inPadded = inPadded && pos[d] < in[d] + win.padEnd[d];
        }
        if (inPadded)
          ++padded;
        if (!valid)
          continue;
        const std::int64_t flat = plane * numElements(in) + flatIndex(pos, in);
        const double v = static_cast<double>(x.data<T>()[flat]);
        sum += v;
        ++count;
        if (v > best) {
          best = v;
          bestIndex = flat;
        }
      } while (nextIndex(k, win.kernel));
      if (isMax) {
        y.push_back(best);
        if (indices != nullptr)
          indices->push_back(bestIndex);
      } else {
        y.push_back(sum / static_cast<double>(countIncludePad ? padded : count));
      }
    } while (nextIndex(o, out));
  }
  return y;
}

std::vector<float> referencePool(const Tensor& x, bool isMax, bool countIncludePad, const Window& win, const Ints& out,
                                 std::vector<std::int64_t>* indices = nullptr) {
  const std::vector<double> y = referencePoolT<float>(x, isMax, countIncludePad, win, out, indices);
  return std::vector<float>(y.begin(), y.end());
}

struct PoolCase {
  std::string type;
  Shape xShape;
  Window window;
  bool ceilMode = false;
  bool countIncludePad = false;
};

void checkPool(const PoolCase& c, unsigned seed) {
  Tensor x = randomTensor(c.xShape, seed);
  Attributes attrs;
  attrs.set("kernel_shape", c.window.kernel);
  attrs.set("strides", c.window.strides);
  Ints pads = c.window.padBegin;
  pads.insert(pads.end(), c.window.padEnd.begin(), c.window.padEnd.end());
  attrs.set("pads", pads);
  if (c.type == "MaxPool")
    attrs.set("dilations", c.window.dilations);
  attrs.set("ceil_mode", std::int64_t{c.ceilMode});
  if (c.type == "AveragePool")
    attrs.set("count_include_pad", std::int64_t{c.countIncludePad});
  Tensor y = run1(c.type, {&x}, attrs);
  const Ints out = outputSize(Ints(c.xShape.begin() + 2, c.xShape.end()), c.window, c.ceilMode);
  Shape yShape{c.xShape[0], c.xShape[1]};
  yShape.insert(yShape.end(), out.begin(), out.end());
  expectClose(y, yShape, referencePool(x, c.type == "MaxPool", c.countIncludePad, c.window, out));
}

TEST(DnnlPoolTest, MaxPoolVariants) {
  checkPool({"MaxPool", {2, 3, 8, 8}, {{2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}}, 31);
  checkPool({"MaxPool", {1, 4, 9, 7}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}}, 32);        // ResNet stem style
  checkPool({"MaxPool", {1, 2, 9, 9}, {{2, 3}, {1, 2}, {2, 2}, {1, 0}, {0, 1}}}, 33);        // dilations
  checkPool({"MaxPool", {1, 2, 8, 7}, {{3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, true}, 34);  // ceil_mode
  checkPool({"MaxPool", {2, 3, 10}, {{3}, {2}, {1}, {1}, {0}}}, 35);                         // 1-D
  checkPool({"MaxPool", {1, 2, 5, 6, 4}, {{2, 2, 2}, {2, 2, 1}, {1, 1, 1}, {0, 1, 0}, {1, 0, 1}}}, 36);  // 3-D
}

// Channel counts that fill 8- and 16-channel blocks and ones that pad them (Note [Layout detours]).
TEST(DnnlPoolTest, EveryBlockFill) {
  for (std::int64_t channels : {5, 8, 16, 24, 32}) {
    SCOPED_TRACE(channels);
    checkPool({"MaxPool", {2, channels, 8, 8}, {{2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}}, 51);
    checkPool({"MaxPool", {2, channels, 9, 9}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}}, 52);
    checkPool({"AveragePool", {2, channels, 8, 8}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false, false}, 53);
    checkPool({"MaxPool", {1, channels, 6, 5, 4}, {{2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 1, 0}}}, 54);
  }
}

TEST(DnnlPoolTest, AveragePoolVariants) {
  checkPool({"AveragePool", {2, 3, 8, 8}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false, false}, 41);
  checkPool({"AveragePool", {2, 3, 8, 8}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false, true}, 42);
  checkPool({"AveragePool", {1, 2, 9, 8}, {{3, 2}, {2, 3}, {1, 1}, {0, 1}, {2, 0}}, false, true}, 43);
  checkPool({"AveragePool", {1, 2, 8, 7}, {{3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, true, false}, 44);
  // ceil_mode with count_include_pad: the extra ceil positions are not counted (direct loop).
  checkPool({"AveragePool", {1, 2, 8, 7}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, true, true}, 45);
  checkPool({"AveragePool", {2, 3, 10}, {{4}, {3}, {1}, {2}, {1}}, false, true}, 46);
  checkPool({"AveragePool", {1, 2, 4, 5, 6}, {{2, 3, 2}, {1, 2, 2}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1}}, false, false},
            47);
}

TEST(DnnlPoolTest, AutoPadSame) {
  Tensor x = randomTensor({1, 2, 7, 6}, 51);
  for (const char* type : {"MaxPool", "AveragePool"}) {
    for (const char* autoPad : {"SAME_UPPER", "SAME_LOWER"}) {
      Attributes attrs;
      attrs.set("kernel_shape", Ints{3, 2});
      attrs.set("strides", Ints{2, 2});
      attrs.set("auto_pad", std::string(autoPad));
      Tensor y = run1(type, {&x}, attrs);
      // out = ceil(in / 2) = 4 x 3; total pads = (4-1)*2 + 3 - 7 = 2 and (3-1)*2 + 2 - 6 = 0.
      const bool upper = std::string(autoPad) == "SAME_UPPER";
      const Window win{{3, 2}, {2, 2}, {1, 1}, {1, 0}, {1, 0}};
      (void)upper;  // total pads are even here, so both modes split them alike
      SCOPED_TRACE(std::string(type) + " " + autoPad);
      expectClose(y, {1, 2, 4, 3}, referencePool(x, std::string(type) == "MaxPool", false, win, {4, 3}));
    }
  }
  // Odd total padding: SAME_UPPER puts the extra one at the end, SAME_LOWER at the beginning.
  Tensor x2 = randomTensor({1, 1, 6, 6}, 52);
  for (const char* autoPad : {"SAME_UPPER", "SAME_LOWER"}) {
    Attributes attrs;
    attrs.set("kernel_shape", Ints{2, 2});
    attrs.set("auto_pad", std::string(autoPad));
    Tensor y = run1("AveragePool", {&x2}, attrs);
    const bool upper = std::string(autoPad) == "SAME_UPPER";
    const Window win{{2, 2}, {1, 1}, {1, 1}, upper ? Ints{0, 0} : Ints{1, 1}, upper ? Ints{1, 1} : Ints{0, 0}};
    SCOPED_TRACE(autoPad);
    expectClose(y, {1, 1, 6, 6}, referencePool(x2, false, false, win, {6, 6}));
  }
}

TEST(DnnlPoolTest, GlobalPools) {
  Tensor x = randomTensor({2, 3, 5, 7}, 61);
  Tensor avg = run1("GlobalAveragePool", {&x}, Attributes{});
  Tensor mx = run1("GlobalMaxPool", {&x}, Attributes{});
  const Window win{{5, 7}, {1, 1}, {1, 1}, {0, 0}, {0, 0}};
  expectClose(avg, {2, 3, 1, 1}, referencePool(x, false, false, win, {1, 1}));
  expectClose(mx, {2, 3, 1, 1}, referencePool(x, true, false, win, {1, 1}));
  Tensor x3 = randomTensor({2, 4, 9}, 62);
  expectClose(run1("GlobalAveragePool", {&x3}, Attributes{}), {2, 4, 1},
              referencePool(x3, false, false, {{9}, {1}, {1}, {0}, {0}}, {1}));
  // Note [Global mean loop]: large planes (ResNet's stem at 224), many small ones (a squeeze-excitation block).
  for (const Shape& shape : {Shape{1, 3, 56, 57}, Shape{4, 96, 2, 2}, Shape{3, 5, 1, 1}}) {
    SCOPED_TRACE(shapeToString(shape));
    Tensor big = randomTensor(shape, 63);
    const Ints in(shape.begin() + 2, shape.end());
    expectClose(run1("GlobalAveragePool", {&big}, Attributes{}), {shape[0], shape[1], 1, 1},
                referencePool(big, false, false, {in, {1, 1}, {1, 1}, {0, 0}, {0, 0}}, {1, 1}));
  }
}

TEST(DnnlPoolTest, MaxPoolIndicesLikeOnnxExamples) {
  std::vector<float> v(25);
  for (int i = 0; i < 25; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  Tensor x = fromValues({1, 1, 5, 5}, v);
  Attributes padded;
  padded.set("kernel_shape", Ints{5, 5});
  padded.set("pads", Ints{2, 2, 2, 2});
  std::vector<Tensor> out = runOpEagerly("MaxPool", {&x}, padded, 2);
  ASSERT_EQ(out.size(), 2u);
  expectClose(out[0], {1, 1, 5, 5},
              {13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25});
  ASSERT_EQ(out[1].dtype(), DType::Int64);
  const std::vector<std::int64_t> expectedIdx{12, 13, 14, 14, 14, 17, 18, 19, 19, 19, 22, 23, 24,
                                              24, 24, 22, 23, 24, 24, 24, 22, 23, 24, 24, 24};
  EXPECT_EQ(std::vector<std::int64_t>(out[1].data<std::int64_t>(), out[1].data<std::int64_t>() + 25), expectedIdx);

  Attributes colMajor;
  colMajor.set("kernel_shape", Ints{2, 2});
  colMajor.set("strides", Ints{2, 2});
  colMajor.set("storage_order", std::int64_t{1});
  out = runOpEagerly("MaxPool", {&x}, colMajor, 2);
  expectClose(out[0], {1, 1, 2, 2}, {7, 9, 17, 19});
  EXPECT_EQ(std::vector<std::int64_t>(out[1].data<std::int64_t>(), out[1].data<std::int64_t>() + 4),
            (std::vector<std::int64_t>{6, 16, 8, 18}));

  // Random input, several planes: indices count from the start of the whole tensor.
  Tensor xr = randomTensor({2, 3, 6, 5}, 71);
  Attributes attrs;
  attrs.set("kernel_shape", Ints{3, 2});
  attrs.set("strides", Ints{2, 1});
  attrs.set("pads", Ints{1, 0, 1, 1});
  out = runOpEagerly("MaxPool", {&xr}, attrs, 2);
  std::vector<std::int64_t> refIdx;
  const Window win{{3, 2}, {2, 1}, {1, 1}, {1, 0}, {1, 1}};
  const Ints o = outputSize({6, 5}, win);
  expectClose(out[0], {2, 3, o[0], o[1]}, referencePool(xr, true, false, win, o, &refIdx));
  EXPECT_EQ(std::vector<std::int64_t>(out[1].data<std::int64_t>(), out[1].data<std::int64_t>() + out[1].numel()),
            refIdx);
}

TEST(DnnlPoolTest, MaxPoolUint8) {
  Tensor x = Tensor::empty(DType::UInt8, {1, 1, 4, 4});
  for (int i = 0; i < 16; ++i)
    x.data<std::uint8_t>()[i] = static_cast<std::uint8_t>((i * 37) % 251);
  Attributes attrs;
  attrs.set("kernel_shape", Ints{2, 2});
  attrs.set("strides", Ints{2, 2});
  Tensor y = run1("MaxPool", {&x}, attrs);
  ASSERT_EQ(y.dtype(), DType::UInt8);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  const std::uint8_t* p = x.data<std::uint8_t>();
  for (int oh = 0; oh < 2; ++oh) {
    for (int ow = 0; ow < 2; ++ow) {
      const std::uint8_t expected =
          std::max({p[oh * 8 + ow * 2], p[oh * 8 + ow * 2 + 1], p[oh * 8 + 4 + ow * 2], p[oh * 8 + 4 + ow * 2 + 1]});
      EXPECT_EQ(y.data<std::uint8_t>()[oh * 2 + ow], expected);
    }
  }
}

TEST(DnnlPoolTest, RejectsBadInput) {
  Tensor x = randomTensor({1, 2, 4, 4}, 1);
  EXPECT_THROW(runOpEagerly("MaxPool", {&x}, Attributes{}), Error);  // no kernel_shape
  Attributes tooBig;
  tooBig.set("kernel_shape", Ints{5, 5});
  EXPECT_THROW(runOpEagerly("AveragePool", {&x}, tooBig), Error);
  Attributes wrongRank;
  wrongRank.set("kernel_shape", Ints{2});
  EXPECT_THROW(runOpEagerly("MaxPool", {&x}, wrongRank), Error);
  Tensor flat = randomTensor({4, 4}, 2);
  EXPECT_THROW(runOpEagerly("GlobalAveragePool", {&flat}, Attributes{}), Error);
  Tensor xi = Tensor::zeros(DType::Int64, {1, 1, 4, 4});
  Attributes k;
  k.set("kernel_shape", Ints{2, 2});
  EXPECT_THROW(runOpEagerly("AveragePool", {&xi}, k), Error);
}

// ---- BatchNormalization / InstanceNormalization ----

TEST(DnnlBatchNormTest, InferenceMatchesFormula) {
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{4, 3}, Shape{2, 3, 7}, Shape{1, 3, 2, 3, 4}}) {
    Tensor x = randomTensor(shape, 81);
    Tensor scale = randomTensor({3}, 82);
    Tensor bias = randomTensor({3}, 83);
    Tensor mean = randomTensor({3}, 84);
    Tensor var = randomTensor({3}, 85);
    for (std::int64_t c = 0; c < 3; ++c)
      var.data<float>()[c] = std::fabs(var.data<float>()[c]) + 0.1f;
    Attributes attrs;
    attrs.set("epsilon", 1e-3f);
    Tensor y = run1("BatchNormalization", {&x, &scale, &bias, &mean, &var}, attrs);
    const std::int64_t inner = shape.size() > 2 ? numElements(Shape(shape.begin() + 2, shape.end())) : 1;
    std::vector<float> expected(static_cast<std::size_t>(x.numel()));
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const std::int64_t c = (i / inner) % 3;
      expected[static_cast<std::size_t>(i)] = scale.data<float>()[c] * (x.data<float>()[i] - mean.data<float>()[c]) /
                                                  std::sqrt(var.data<float>()[c] + 1e-3f) +
                                              bias.data<float>()[c];
    }
    SCOPED_TRACE(shapeToString(shape));
    expectClose(y, shape, expected);
  }
}

void checkBatchNormTraining(const Shape& shape) {
  SCOPED_TRACE(shapeToString(shape));
  const std::int64_t channels = shape[1];
  const auto c64 = static_cast<std::size_t>(channels);
  Tensor x = randomTensor(shape, 91);
  Tensor scale = randomTensor({channels}, 92);
  Tensor bias = randomTensor({channels}, 93);
  Tensor mean = randomTensor({channels}, 94);
  Tensor var = randomTensor({channels}, 95);
  for (std::int64_t c = 0; c < channels; ++c)
    var.data<float>()[c] = std::fabs(var.data<float>()[c]) + 0.1f;
  Attributes attrs;
  attrs.set("training_mode", std::int64_t{1});
  attrs.set("momentum", 0.8f);
  attrs.set("epsilon", 1e-2f);
  std::vector<Tensor> out = runOpEagerly("BatchNormalization", {&x, &scale, &bias, &mean, &var}, attrs, 3, true);
  ASSERT_EQ(out.size(), 3u);
  const std::int64_t inner = numElements(Shape(shape.begin() + 2, shape.end()));
  const auto count = static_cast<double>(shape[0] * inner);
  std::vector<double> bmean(c64, 0.0), bvar(c64, 0.0);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    bmean[static_cast<std::size_t>((i / inner) % channels)] += x.data<float>()[i];
  for (double& m : bmean)
    m /= count;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>((i / inner) % channels);
    bvar[c] += (x.data<float>()[i] - bmean[c]) * (x.data<float>()[i] - bmean[c]);
  }
  for (double& v : bvar)
    v /= count;  // biased, as ONNX's reference (numpy var)
  std::vector<float> expectedY(static_cast<std::size_t>(x.numel()));
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>((i / inner) % channels);
    expectedY[static_cast<std::size_t>(i)] = static_cast<float>(
        scale.data<float>()[c] * (x.data<float>()[i] - bmean[c]) / std::sqrt(bvar[c] + 1e-2) + bias.data<float>()[c]);
  }
  expectClose(out[0], shape, expectedY);
  std::vector<float> runningMean(c64), runningVar(c64);
  for (std::size_t c = 0; c < c64; ++c) {
    runningMean[c] = static_cast<float>(mean.data<float>()[c] * 0.8 + bmean[c] * 0.2);
    runningVar[c] = static_cast<float>(var.data<float>()[c] * 0.8 + bvar[c] * 0.2);
  }
  expectClose(out[1], {channels}, runningMean);
  expectClose(out[2], {channels}, runningVar);
}

TEST(DnnlBatchNormTest, TrainingModeUsesBatchStatisticsAndUpdatesRunningOnes) {
  checkBatchNormTraining({2, 3, 4, 5});
}

// Channel counts that fill 8- and 16-channel blocks and ones that pad them: a kernel that runs on a blocked layout
// (Note [Layout detours]) must give the same numbers.
TEST(DnnlBatchNormTest, TrainingModeOnEveryBlockFill) {
  for (const Shape& shape : {Shape{2, 8, 3, 3}, Shape{2, 20, 4, 5}, Shape{3, 32, 3, 3}, Shape{2, 17, 2, 3, 2}})
    checkBatchNormTraining(shape);
}

TEST(DnnlBatchNormTest, RejectsMismatchedParameters) {
  Tensor x = randomTensor({2, 3, 4, 4}, 1);
  Tensor good = randomTensor({3}, 2);
  Tensor bad = randomTensor({4}, 3);
  EXPECT_THROW(runOpEagerly("BatchNormalization", {&x, &good, &good, &bad, &good}, Attributes{}), Error);
  EXPECT_THROW(runOpEagerly("BatchNormalization", {&x, &good, &good, &good}, Attributes{}), Error);
  Tensor xd = Tensor::zeros(DType::Float64, {2, 3});
  EXPECT_THROW(runOpEagerly("BatchNormalization", {&xd, &good, &good, &good, &good}, Attributes{}), Error);
}

TEST(DnnlInstanceNormTest, MatchesFormula) {
  Tensor x = randomTensor({2, 3, 4, 5}, 101);
  Tensor scale = randomTensor({3}, 102);
  Tensor bias = randomTensor({3}, 103);
  Attributes attrs;
  attrs.set("epsilon", 1e-3f);
  Tensor y = run1("InstanceNormalization", {&x, &scale, &bias}, attrs);
  std::vector<float> expected(static_cast<std::size_t>(x.numel()));
  for (std::int64_t p = 0; p < 6; ++p) {
    double mean = 0, var = 0;
    for (std::int64_t i = 0; i < 20; ++i)
      mean += x.data<float>()[p * 20 + i];
    mean /= 20;
    for (std::int64_t i = 0; i < 20; ++i)
      var += std::pow(x.data<float>()[p * 20 + i] - mean, 2);
    var /= 20;
    for (std::int64_t i = 0; i < 20; ++i) {
      expected[static_cast<std::size_t>(p * 20 + i)] =
          static_cast<float>(scale.data<float>()[p % 3] * (x.data<float>()[p * 20 + i] - mean) / std::sqrt(var + 1e-3) +
                             bias.data<float>()[p % 3]);
    }
  }
  expectClose(y, {2, 3, 4, 5}, expected);
}

// ---- Gemm / MatMul ----

template <typename T>
std::vector<double> referenceGemm(const Tensor& a, const Tensor& b, const Tensor* c, bool transA, bool transB,
                                  double alpha, double beta, std::int64_t m, std::int64_t n, std::int64_t k) {
  std::vector<double> y(static_cast<std::size_t>(m * n));
  Shape c2d;
  if (c != nullptr) {
    c2d = c->shape();
    while (c2d.size() < 2)
      c2d.insert(c2d.begin(), 1);
  }
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const double av = static_cast<double>(transA ? a.data<T>()[kk * m + i] : a.data<T>()[i * k + kk]);
        const double bv = static_cast<double>(transB ? b.data<T>()[j * k + kk] : b.data<T>()[kk * n + j]);
        acc += av * bv;
      }
      double cv = 0;
      if (c != nullptr) {
        const std::int64_t ci = c2d[0] == 1 ? 0 : i;
        const std::int64_t cj = c2d[1] == 1 ? 0 : j;
        cv = static_cast<double>(c->data<T>()[ci * c2d[1] + cj]);
      }
      y[static_cast<std::size_t>(i * n + j)] = alpha * acc + beta * cv;
    }
  }
  return y;
}

TEST(DnnlGemmTest, TransposesScalesAndBroadcastC) {
  const std::int64_t m = 5, n = 7, k = 6;
  unsigned seed = 200;
  const std::vector<Shape> cShapes{{}, {1}, {n}, {1, n}, {m, 1}, {m, n}};
  for (int transA = 0; transA < 2; ++transA) {
    for (int transB = 0; transB < 2; ++transB) {
      for (const auto& [alpha, beta] : std::vector<std::pair<float, float>>{{1, 1}, {0.5f, 2}, {2, 0}, {1, -1}}) {
        for (int withC = 0; withC <= static_cast<int>(cShapes.size()); ++withC) {
          Tensor a = randomTensor(transA ? Shape{k, m} : Shape{m, k}, ++seed);
          Tensor b = randomTensor(transB ? Shape{n, k} : Shape{k, n}, ++seed);
          Tensor c = withC > 0 ? randomTensor(cShapes[static_cast<std::size_t>(withC - 1)], ++seed) : Tensor();
          Attributes attrs;
          attrs.set("transA", std::int64_t{transA});
          attrs.set("transB", std::int64_t{transB});
          attrs.set("alpha", alpha);
          attrs.set("beta", beta);
          std::vector<const Tensor*> inputs{&a, &b};
          if (withC > 0)
            inputs.push_back(&c);
          Tensor y = run1("Gemm", inputs, attrs);
          const std::vector<double> ref =
              referenceGemm<float>(a, b, withC > 0 ? &c : nullptr, transA, transB, alpha, beta, m, n, k);
          SCOPED_TRACE(::testing::Message() << "transA " << transA << " transB " << transB << " alpha " << alpha
                                            << " beta " << beta << " C " << withC);
          expectClose(y, {m, n}, std::vector<float>(ref.begin(), ref.end()));
        }
      }
    }
  }
}

TEST(DnnlGemmTest, LinearLayerShape) {
  // torch.nn.Linear exports Gemm(transB=1) with C = bias [N].
  Tensor a = randomTensor({4, 64}, 301);
  Tensor b = randomTensor({10, 64}, 302);
  Tensor c = randomTensor({10}, 303);
  Attributes attrs;
  attrs.set("transB", std::int64_t{1});
  Tensor y = run1("Gemm", {&a, &b, &c}, attrs);
  const std::vector<double> ref = referenceGemm<float>(a, b, &c, false, true, 1, 1, 4, 10, 64);
  expectClose(y, {4, 10}, std::vector<float>(ref.begin(), ref.end()));
}

TEST(DnnlGemmTest, Float64AndInt64UseTheLoop) {
  Tensor a = typedTensor<double>({3, 4}, 311);
  Tensor b = typedTensor<double>({4, 2}, 312);
  Tensor c = typedTensor<double>({2}, 313);
  Attributes attrs;
  attrs.set("alpha", 2.0f);
  attrs.set("beta", 0.5f);
  Tensor y = run1("Gemm", {&a, &b, &c}, attrs);
  ASSERT_EQ(y.dtype(), DType::Float64);
  const std::vector<double> ref = referenceGemm<double>(a, b, &c, false, false, 2.0, 0.5, 3, 2, 4);
  for (std::size_t i = 0; i < ref.size(); ++i)
    EXPECT_DOUBLE_EQ(y.data<double>()[i], ref[i]);

  Tensor ai = typedTensor<std::int64_t>({4, 3}, 314);
  Tensor bi = typedTensor<std::int64_t>({2, 4}, 315);
  Attributes trans;
  trans.set("transA", std::int64_t{1});
  trans.set("transB", std::int64_t{1});
  Tensor yi = run1("Gemm", {&ai, &bi}, trans);
  ASSERT_EQ(yi.dtype(), DType::Int64);
  const std::vector<double> refi = referenceGemm<std::int64_t>(ai, bi, nullptr, true, true, 1, 1, 3, 2, 4);
  for (std::size_t i = 0; i < refi.size(); ++i)
    EXPECT_EQ(yi.data<std::int64_t>()[i], refi[i]);
}

TEST(DnnlGemmTest, RejectsBadShapes) {
  Tensor a = randomTensor({3, 4}, 1);
  Tensor b = randomTensor({5, 2}, 2);
  try {
    runOpEagerly("Gemm", {&a, &b}, Attributes{});
    FAIL() << "expected strata::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find('4'), std::string::npos) << message;
    EXPECT_NE(message.find('5'), std::string::npos) << message;
  }
  Tensor b2 = randomTensor({4, 2}, 3);
  Tensor badC = randomTensor({3, 3}, 4);
  EXPECT_THROW(runOpEagerly("Gemm", {&a, &b2, &badC}, Attributes{}), Error);
  Tensor a3 = randomTensor({2, 3, 4}, 5);
  EXPECT_THROW(runOpEagerly("Gemm", {&a3, &b2}, Attributes{}), Error);
}

// numpy matmul on float32 or integer tensors, computed with doubles.
template <typename T>
std::vector<double> referenceMatmul(const Tensor& a, const Tensor& b, Shape& outShape) {
  Shape as = a.shape(), bs = b.shape();
  const bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec)
    as.insert(as.begin(), 1);
  if (bVec)
    bs.push_back(1);
  const std::int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const std::size_t r = std::max(ba.size(), bb.size());
  while (ba.size() < r)
    ba.insert(ba.begin(), 1);
  while (bb.size() < r)
    bb.insert(bb.begin(), 1);
  Shape batch(r);
  for (std::size_t d = 0; d < r; ++d)
    batch[d] = std::max(ba[d], bb[d]);
  outShape = batch;
  if (!aVec)
    outShape.push_back(m);
  if (!bVec)
    outShape.push_back(n);
  std::vector<double> y;
  Ints idx(r, 0);
  do {
    Ints ia(r), ib(r);
    for (std::size_t d = 0; d < r; ++d) {
      ia[d] = ba[d] == 1 ? 0 : idx[d];
      ib[d] = bb[d] == 1 ? 0 : idx[d];
    }
    const std::int64_t offA = (r ? flatIndex(ia, ba) : 0) * m * k;
    const std::int64_t offB = (r ? flatIndex(ib, bb) : 0) * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t kk = 0; kk < k; ++kk) {
          acc +=
              static_cast<double>(a.data<T>()[offA + i * k + kk]) * static_cast<double>(b.data<T>()[offB + kk * n + j]);
        }
        y.push_back(acc);
      }
    }
  } while (r > 0 && nextIndex(idx, batch));
  return y;
}

TEST(DnnlMatMulTest, NumpySemantics) {
  const std::vector<std::pair<Shape, Shape>> cases{
      {{3, 4}, {4, 5}},              // plain
      {{4}, {4, 5}},                 // 1-D A
      {{3, 4}, {4}},                 // 1-D B
      {{4}, {4}},                    // dot product
      {{2, 3, 4}, {2, 4, 5}},        // batched
      {{2, 3, 3, 4}, {4, 5}},        // B shared by every batch (folded into rows)
      {{3, 4}, {2, 4, 5}},           // A shared
      {{1, 3, 4}, {2, 4, 5}},        // A broadcast in batch
      {{2, 1, 3, 4}, {1, 3, 4, 5}},  // both broadcast
      {{2, 3, 4}, {4}},              // batched with 1-D B
      {{4}, {2, 4, 5}},              // 1-D A with batched B
      {{5, 1, 2, 3, 4}, {3, 1, 4, 2}},
  };
  unsigned seed = 400;
  for (const auto& [as, bs] : cases) {
    Tensor a = randomTensor(as, ++seed);
    Tensor b = randomTensor(bs, ++seed);
    Tensor y = run1("MatMul", {&a, &b}, Attributes{});
    Shape expectedShape;
    const std::vector<double> ref = referenceMatmul<float>(a, b, expectedShape);
    SCOPED_TRACE(shapeToString(as) + " x " + shapeToString(bs));
    expectClose(y, expectedShape, std::vector<float>(ref.begin(), ref.end()));
  }
}

TEST(DnnlMatMulTest, IntegerAndDoubleTypes) {
  Tensor a = typedTensor<std::int32_t>({2, 3, 4}, 501);
  Tensor b = typedTensor<std::int32_t>({4, 2}, 502);
  Tensor y = run1("MatMul", {&a, &b}, Attributes{});
  ASSERT_EQ(y.dtype(), DType::Int32);
  Shape shape;
  std::vector<double> ref = referenceMatmul<std::int32_t>(a, b, shape);
  ASSERT_EQ(y.shape(), shape);
  for (std::size_t i = 0; i < ref.size(); ++i)
    EXPECT_EQ(y.data<std::int32_t>()[i], ref[i]);

  Tensor ad = typedTensor<double>({3, 1, 2, 3}, 503);
  Tensor bd = typedTensor<double>({2, 3, 2}, 504);
  Tensor yd = run1("MatMul", {&ad, &bd}, Attributes{});
  ref = referenceMatmul<double>(ad, bd, shape);
  ASSERT_EQ(yd.shape(), shape);
  for (std::size_t i = 0; i < ref.size(); ++i)
    EXPECT_DOUBLE_EQ(yd.data<double>()[i], ref[i]);
}

TEST(DnnlMatMulTest, RejectsBadShapes) {
  Tensor a = randomTensor({3, 4}, 1);
  Tensor b = randomTensor({5, 2}, 2);
  EXPECT_THROW(runOpEagerly("MatMul", {&a, &b}, Attributes{}), Error);
  Tensor a3 = randomTensor({2, 3, 4}, 3);
  Tensor b3 = randomTensor({3, 4, 2}, 4);
  EXPECT_THROW(runOpEagerly("MatMul", {&a3, &b3}, Attributes{}), Error);  // batch 2 vs 3
  Tensor ai = Tensor::zeros(DType::Int32, {3, 4});
  Tensor bf = randomTensor({4, 2}, 5);
  EXPECT_THROW(runOpEagerly("MatMul", {&ai, &bf}, Attributes{}), Error);  // mixed types
}

// ---- Float64: plain loops (oneDNN has no f64), checked against the reference loops computed in double ----

Tensor toDouble(const Tensor& t) {
  Tensor d = Tensor::empty(DType::Float64, t.shape());
  for (std::int64_t i = 0; i < t.numel(); ++i)
    d.data<double>()[i] = t.data<float>()[i];
  return d;
}

Tensor randomDouble(const Shape& shape, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(DType::Float64, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<double>()[i] = dist(rng);
  return t;
}

void expectCloseF64(const Tensor& actual, const Shape& shape, const std::vector<double>& expected, double tol = 1e-12) {
  ASSERT_EQ(actual.shape(), shape);
  ASSERT_EQ(actual.dtype(), DType::Float64);
  ASSERT_EQ(static_cast<std::int64_t>(expected.size()), actual.numel());
  for (std::int64_t i = 0; i < actual.numel(); ++i) {
    const double e = expected[static_cast<std::size_t>(i)];
    ASSERT_NEAR(actual.data<double>()[i], e, tol * std::max(1.0, std::fabs(e))) << "at flat index " << i;
  }
}

// The float64 Conv against the reference loop, and against the float32 (oneDNN) path on the same values.
void checkConvF64(const Shape& xShape, const Shape& wShape, std::int64_t group, const Window& win, bool withBias,
                  unsigned seed) {
  Tensor x = randomDouble(xShape, seed);
  Tensor w = randomDouble(wShape, seed + 1);
  Tensor b = randomDouble({wShape[0]}, seed + 2);
  Attributes attrs = convAttrs(win, group);
  std::vector<const Tensor*> inputs{&x, &w};
  if (withBias)
    inputs.push_back(&b);
  Tensor y = run1("Conv", inputs, attrs);
  const Ints out = outputSize(Ints(xShape.begin() + 2, xShape.end()), win);
  Shape yShape{xShape[0], wShape[0]};
  yShape.insert(yShape.end(), out.begin(), out.end());
  expectCloseF64(y, yShape, referenceConvT<double>(x, w, withBias ? &b : nullptr, group, win, out));

  // float32 on the values rounded to float: agrees to float32 accuracy.
  Tensor xf = Tensor::empty(DType::Float32, xShape), wf = Tensor::empty(DType::Float32, wShape),
         bf = Tensor::empty(DType::Float32, {wShape[0]});
  for (std::int64_t i = 0; i < x.numel(); ++i)
    xf.data<float>()[i] = static_cast<float>(x.data<double>()[i]);
  for (std::int64_t i = 0; i < w.numel(); ++i)
    wf.data<float>()[i] = static_cast<float>(w.data<double>()[i]);
  for (std::int64_t i = 0; i < b.numel(); ++i)
    bf.data<float>()[i] = static_cast<float>(b.data<double>()[i]);
  std::vector<const Tensor*> inputsF{&xf, &wf};
  if (withBias)
    inputsF.push_back(&bf);
  Tensor yf = run1("Conv", inputsF, attrs);
  ASSERT_EQ(yf.shape(), y.shape());
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    ASSERT_NEAR(yf.data<float>()[i], y.data<double>()[i], 1e-5 * std::max(1.0, std::fabs(y.data<double>()[i])))
        << "float32 vs float64 at " << i;
  }
}

TEST(DnnlFloat64ConvTest, PlainPaddedStridedDilated) {
  checkConvF64({2, 3, 7, 6}, {4, 3, 3, 3}, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 0}, {2, 1}}, true, 1001);
  checkConvF64({1, 4, 11, 9}, {5, 4, 3, 2}, 1, {{3, 2}, {2, 3}, {2, 1}, {1, 2}, {0, 1}}, false, 1002);
  checkConvF64({2, 3, 16, 16}, {8, 3, 7, 7}, 1, {{7, 7}, {2, 2}, {1, 1}, {3, 3}, {3, 3}}, false, 1003);  // stem
  // Large enough for several row, column and reduction blocks (M 40 > 32, P 400 > 256, K 144 > 128).
  checkConvF64({2, 16, 20, 20}, {40, 16, 3, 3}, 1, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, true, 1004);
}

TEST(DnnlFloat64ConvTest, GroupedAndDepthwise) {
  checkConvF64({2, 6, 8, 8}, {9, 2, 3, 3}, 3, {{3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}}, true, 1011);
  checkConvF64({1, 8, 9, 9}, {8, 1, 3, 3}, 8, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, true, 1012);
  checkConvF64({2, 12, 7, 7}, {12, 1, 5, 5}, 12, {{5, 5}, {1, 1}, {2, 2}, {4, 4}, {4, 4}}, false, 1013);  // dilated
  checkConvF64({2, 8, 6, 6}, {16, 1, 3, 3}, 8, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, true, 1014);  // multiplier 2
}

TEST(DnnlFloat64ConvTest, PointwiseAndOneByOneStrided) {
  checkConvF64({2, 16, 6, 5}, {8, 16, 1, 1}, 1, {{1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}, true, 1021);
  checkConvF64({1, 4, 5, 5}, {6, 4, 1, 1}, 1, {{1, 1}, {1, 1}, {1, 1}, {1, 0}, {0, 1}}, false, 1022);  // padded
  checkConvF64({2, 16, 8, 8}, {32, 16, 1, 1}, 1, {{1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, true, 1023);
  checkConvF64({2, 8, 4, 4}, {6, 4, 1, 1}, 2, {{1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}, true, 1024);  // grouped
}

TEST(DnnlFloat64ConvTest, OneAndThreeSpatialDims) {
  checkConvF64({2, 3, 10}, {4, 3, 3}, 1, {{3}, {2}, {2}, {1}, {2}}, true, 1031);
  checkConvF64({1, 2, 5, 6, 4}, {3, 2, 3, 2, 2}, 1, {{3, 2, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {1, 1, 0}}, true,
               1032);
}

TEST(DnnlFloat64ConvTest, AutoPad) {
  Tensor x = randomDouble({1, 2, 7, 8}, 1041);
  Tensor w = randomDouble({3, 2, 4, 3}, 1042);
  struct Case {
    const char* autoPad;
    Window window;
    Ints out;
  };
  const std::vector<Case> cases{
      {"SAME_UPPER", {{4, 3}, {2, 2}, {1, 1}, {1, 0}, {2, 1}}, {4, 4}},
      {"SAME_LOWER", {{4, 3}, {2, 2}, {1, 1}, {2, 1}, {1, 0}}, {4, 4}},
      {"VALID", {{4, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, {2, 3}},
  };
  for (const Case& c : cases) {
    Attributes attrs;
    attrs.set("auto_pad", std::string(c.autoPad));
    attrs.set("strides", Ints{2, 2});
    Tensor y = run1("Conv", {&x, &w}, attrs);
    SCOPED_TRACE(c.autoPad);
    expectCloseF64(y, {1, 3, c.out[0], c.out[1]}, referenceConvT<double>(x, w, nullptr, 1, c.window, c.out));
  }
}

TEST(DnnlFloat64ConvTest, RejectsMixedTypes) {
  Tensor x = randomDouble({1, 2, 4, 4}, 1);
  Tensor w = randomDouble({3, 2, 3, 3}, 2);
  Tensor wf = randomTensor({3, 2, 3, 3}, 3);
  Tensor bf = randomTensor({3}, 4);
  EXPECT_THROW(runOpEagerly("Conv", {&x, &wf}, Attributes{}), Error);
  EXPECT_THROW(runOpEagerly("Conv", {&x, &w, &bf}, Attributes{}), Error);
  Tensor xi = Tensor::zeros(DType::Int64, {1, 2, 4, 4});
  Tensor wi = Tensor::zeros(DType::Int64, {3, 2, 3, 3});
  EXPECT_THROW(runOpEagerly("Conv", {&xi, &wi}, Attributes{}), Error);
}

// y = scale * (x - mean) / sqrt(var + epsilon) + B, per channel, in double.
std::vector<double> batchNormFormula(const Tensor& x, const std::vector<double>& scale, const std::vector<double>& bias,
                                     const std::vector<double>& mean, const std::vector<double>& var, double epsilon) {
  const std::int64_t channels = x.dim(1);
  const std::int64_t inner = x.rank() > 2 ? numElements(Shape(x.shape().begin() + 2, x.shape().end())) : 1;
  std::vector<double> y(static_cast<std::size_t>(x.numel()));
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto c = static_cast<std::size_t>((i / inner) % channels);
    y[static_cast<std::size_t>(i)] = scale[c] * (x.data<double>()[i] - mean[c]) / std::sqrt(var[c] + epsilon) + bias[c];
  }
  return y;
}

std::vector<double> valuesOf(const Tensor& t) {
  return {t.data<double>(), t.data<double>() + t.numel()};
}

TEST(DnnlFloat64BatchNormTest, InferenceMatchesFormula) {
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{4, 3}, Shape{2, 3, 7}, Shape{1, 3, 2, 3, 4}}) {
    Tensor x = randomDouble(shape, 1081);
    Tensor scale = randomDouble({3}, 1082);
    Tensor bias = randomDouble({3}, 1083);
    Tensor mean = randomDouble({3}, 1084);
    Tensor var = randomDouble({3}, 1085);
    for (std::int64_t c = 0; c < 3; ++c)
      var.data<double>()[c] = std::fabs(var.data<double>()[c]) + 0.1;
    Attributes attrs;
    attrs.set("epsilon", 1e-3f);
    Tensor y = run1("BatchNormalization", {&x, &scale, &bias, &mean, &var}, attrs);
    SCOPED_TRACE(shapeToString(shape));
    // The float epsilon attribute stands for the decimal 1e-3.
    expectCloseF64(y, shape, batchNormFormula(x, valuesOf(scale), valuesOf(bias), valuesOf(mean), valuesOf(var), 1e-3));
  }
}

TEST(DnnlFloat64BatchNormTest, TrainingModeUsesTwoPassBatchStatistics) {
  // Batch 2 at 1x1 (two values per channel, as in the last stages of a ResNet at 32x32), and a larger case whose
  // values sit on a large offset, where a one-pass E[x^2] - E[x]^2 variance would lose digits.
  for (const Shape& shape : {Shape{2, 4, 1, 1}, Shape{3, 4, 5, 6}, Shape{6, 4}}) {
    Tensor x = randomDouble(shape, 1091);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      x.data<double>()[i] = 1000.0 + 1e-3 * x.data<double>()[i];
    Tensor scale = randomDouble({4}, 1092);
    Tensor bias = randomDouble({4}, 1093);
    Tensor mean = randomDouble({4}, 1094);
    Tensor var = randomDouble({4}, 1095);
    for (std::int64_t c = 0; c < 4; ++c)
      var.data<double>()[c] = std::fabs(var.data<double>()[c]) + 0.1;
    Attributes attrs;
    attrs.set("training_mode", std::int64_t{1});
    attrs.set("momentum", 0.9f);
    attrs.set("epsilon", 1e-5f);
    std::vector<Tensor> out = runOpEagerly("BatchNormalization", {&x, &scale, &bias, &mean, &var}, attrs, 3, true);
    ASSERT_EQ(out.size(), 3u);
    const std::int64_t inner = shape.size() > 2 ? shape[2] * shape[3] : 1;
    const double count = static_cast<double>(shape[0] * inner);
    std::vector<double> bmean(4, 0.0), bvar(4, 0.0);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      bmean[static_cast<std::size_t>((i / inner) % 4)] += x.data<double>()[i];
    for (double& m : bmean)
      m /= count;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const auto c = static_cast<std::size_t>((i / inner) % 4);
      bvar[c] += (x.data<double>()[i] - bmean[c]) * (x.data<double>()[i] - bmean[c]);
    }
    for (double& v : bvar)
      v /= count;  // biased, as ONNX's reference (numpy var)
    SCOPED_TRACE(shapeToString(shape));
    expectCloseF64(out[0], shape, batchNormFormula(x, valuesOf(scale), valuesOf(bias), bmean, bvar, 1e-5), 1e-9);
    std::vector<double> runningMean(4), runningVar(4);
    for (std::size_t c = 0; c < 4; ++c) {
      runningMean[c] = mean.data<double>()[c] * 0.9 + bmean[c] * 0.1;
      runningVar[c] = var.data<double>()[c] * 0.9 + bvar[c] * 0.1;
    }
    expectCloseF64(out[1], {4}, runningMean);
    expectCloseF64(out[2], {4}, runningVar, 1e-9);
  }
}

TEST(DnnlFloat64BatchNormTest, AgreesWithFloat32Path) {
  const Shape shape{2, 5, 6, 7};
  Tensor x = randomTensor(shape, 1101);
  Tensor scale = randomTensor({5}, 1102);
  Tensor bias = randomTensor({5}, 1103);
  Tensor mean = randomTensor({5}, 1104);
  Tensor var = randomTensor({5}, 1105);
  for (std::int64_t c = 0; c < 5; ++c)
    var.data<float>()[c] = std::fabs(var.data<float>()[c]) + 0.1f;
  for (int training = 0; training < 2; ++training) {
    Attributes attrs;
    attrs.set("training_mode", std::int64_t{training});
    std::vector<Tensor> f32 = runOpEagerly("BatchNormalization", {&x, &scale, &bias, &mean, &var}, attrs, 3, true);
    Tensor xd = toDouble(x), sd = toDouble(scale), bd = toDouble(bias), md = toDouble(mean), vd = toDouble(var);
    std::vector<Tensor> f64 = runOpEagerly("BatchNormalization", {&xd, &sd, &bd, &md, &vd}, attrs, 3, true);
    for (std::size_t o = 0; o < 3; ++o) {
      ASSERT_EQ(f64[o].dtype(), DType::Float64);
      SCOPED_TRACE(::testing::Message() << "training " << training << " output " << o);
      const std::vector<double> d = valuesOf(f64[o]);
      expectClose(f32[o], f64[o].shape(), std::vector<float>(d.begin(), d.end()), 1e-5f);
    }
  }
}

TEST(DnnlFloat64BatchNormTest, RejectsMixedTypes) {
  Tensor x = randomDouble({2, 3, 4, 4}, 1);
  Tensor good = randomDouble({3}, 2);
  Tensor f32 = randomTensor({3}, 3);
  EXPECT_THROW(runOpEagerly("BatchNormalization", {&x, &good, &good, &good, &f32}, Attributes{}), Error);
}

void checkPoolF64(const PoolCase& c, unsigned seed) {
  Tensor x = randomDouble(c.xShape, seed);
  Attributes attrs;
  attrs.set("kernel_shape", c.window.kernel);
  attrs.set("strides", c.window.strides);
  Ints pads = c.window.padBegin;
  pads.insert(pads.end(), c.window.padEnd.begin(), c.window.padEnd.end());
  attrs.set("pads", pads);
  if (c.type == "MaxPool")
    attrs.set("dilations", c.window.dilations);
  attrs.set("ceil_mode", std::int64_t{c.ceilMode});
  if (c.type == "AveragePool")
    attrs.set("count_include_pad", std::int64_t{c.countIncludePad});
  Tensor y = run1(c.type, {&x}, attrs);
  const Ints out = outputSize(Ints(c.xShape.begin() + 2, c.xShape.end()), c.window, c.ceilMode);
  Shape yShape{c.xShape[0], c.xShape[1]};
  yShape.insert(yShape.end(), out.begin(), out.end());
  expectCloseF64(y, yShape, referencePoolT<double>(x, c.type == "MaxPool", c.countIncludePad, c.window, out));
}

TEST(DnnlFloat64PoolTest, AveragePoolCeilModeAndCountIncludePad) {
  checkPoolF64({"AveragePool", {2, 3, 8, 8}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false, false}, 1141);
  checkPoolF64({"AveragePool", {2, 3, 8, 8}, {{3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, false, true}, 1142);
  checkPoolF64({"AveragePool", {1, 2, 9, 8}, {{3, 2}, {2, 3}, {1, 1}, {0, 1}, {2, 0}}, false, true}, 1143);
  checkPoolF64({"AveragePool", {1, 2, 8, 7}, {{3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, true, false}, 1144);
  checkPoolF64({"AveragePool", {1, 2, 8, 7}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, true, true}, 1145);
  checkPoolF64({"AveragePool", {2, 4, 8, 8}, {{2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, false, false},
               1146);  // DenseNet
  checkPoolF64({"AveragePool", {2, 3, 10}, {{4}, {3}, {1}, {2}, {1}}, false, true}, 1147);
  checkPoolF64({"AveragePool", {1, 2, 4, 5, 6}, {{2, 3, 2}, {1, 2, 2}, {1, 1, 1}, {1, 0, 1}, {0, 1, 1}}, true, true},
               1148);
}

TEST(DnnlFloat64PoolTest, MaxPool) {
  checkPoolF64({"MaxPool", {2, 4, 16, 16}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}}, 1151);  // ResNet stem
  checkPoolF64({"MaxPool", {1, 2, 8, 7}, {{3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}, true}, 1152);
  checkPoolF64({"MaxPool", {1, 2, 9, 9}, {{2, 3}, {1, 2}, {2, 2}, {1, 0}, {0, 1}}}, 1153);
}

TEST(DnnlFloat64PoolTest, GlobalPools) {
  for (const Shape& shape : {Shape{2, 3, 5, 7}, Shape{2, 4, 9}, Shape{2, 3, 1, 1}, Shape{1, 2, 3, 4, 2}}) {
    Tensor x = randomDouble(shape, 1161);
    const Ints in(shape.begin() + 2, shape.end());
    const Window win{in, Ints(in.size(), 1), Ints(in.size(), 1), Ints(in.size(), 0), Ints(in.size(), 0)};
    const Ints ones(in.size(), 1);
    Shape yShape{shape[0], shape[1]};
    yShape.insert(yShape.end(), ones.begin(), ones.end());
    SCOPED_TRACE(shapeToString(shape));
    expectCloseF64(run1("GlobalAveragePool", {&x}, Attributes{}), yShape,
                   referencePoolT<double>(x, false, false, win, ones));
    expectCloseF64(run1("GlobalMaxPool", {&x}, Attributes{}), yShape,
                   referencePoolT<double>(x, true, false, win, ones));
  }
}

TEST(DnnlFloat64GemmTest, LinearLayerAndTransposes) {
  // The classifier of a ResNet: [2, 300] x [1000, 300]^T + [1000], and the other transposes with more columns than
  // one task's block.
  for (int transA = 0; transA < 2; ++transA) {
    for (int transB = 0; transB < 2; ++transB) {
      const std::int64_t m = 3, n = 150, k = 70;
      Tensor a = randomDouble(transA ? Shape{k, m} : Shape{m, k}, 1171);
      Tensor b = randomDouble(transB ? Shape{n, k} : Shape{k, n}, 1172);
      Tensor c = randomDouble({n}, 1173);
      Attributes attrs;
      attrs.set("transA", std::int64_t{transA});
      attrs.set("transB", std::int64_t{transB});
      attrs.set("alpha", 0.5f);
      Tensor y = run1("Gemm", {&a, &b, &c}, attrs);
      SCOPED_TRACE(::testing::Message() << "transA " << transA << " transB " << transB);
      expectCloseF64(y, {m, n}, referenceGemm<double>(a, b, &c, transA, transB, 0.5, 1.0, m, n, k));
    }
  }
  Tensor a = randomDouble({2, 300}, 1174);
  Tensor b = randomDouble({1000, 300}, 1175);
  Tensor c = randomDouble({1000}, 1176);
  Attributes linear;
  linear.set("transB", std::int64_t{1});
  expectCloseF64(run1("Gemm", {&a, &b, &c}, linear), {2, 1000},
                 referenceGemm<double>(a, b, &c, false, true, 1.0, 1.0, 2, 1000, 300));
}

TEST(DnnlFloat64MatMulTest, BatchedAndBroadcast) {
  const std::vector<std::pair<Shape, Shape>> cases{
      {{3, 70}, {70, 150}}, {{2, 3, 4}, {4, 130}}, {{1, 3, 4}, {2, 4, 65}}, {{70}, {70, 5}}, {{2, 5, 7}, {7}}};
  unsigned seed = 1180;
  for (const auto& [as, bs] : cases) {
    Tensor a = randomDouble(as, ++seed);
    Tensor b = randomDouble(bs, ++seed);
    Tensor y = run1("MatMul", {&a, &b}, Attributes{});
    Shape shape;
    const std::vector<double> ref = referenceMatmul<double>(a, b, shape);
    SCOPED_TRACE(shapeToString(as) + " x " + shapeToString(bs));
    expectCloseF64(y, shape, ref);
  }
}

}  // namespace
}  // namespace strata
