#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "strata/allocator.h"
#include "strata/attributes.h"
#include "strata/error.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"
#include "support/tensor_values.h"

namespace strata {
namespace {

// Deterministic pseudo-random values in [-2, 2).
template <typename T>
Tensor noise(Shape shape, std::uint32_t seed = 1) {
  Tensor t = Tensor::empty(dtypeOf<T>(), std::move(shape));
  std::uint32_t state = seed * 2654435761U + 1U;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    state = state * 1664525U + 1013904223U;
    t.data<T>()[i] = static_cast<T>(static_cast<double>(state >> 8) / static_cast<double>(1U << 24) * 4.0 - 2.0);
  }
  return t;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

Attributes axesAttr(std::vector<std::int64_t> axes, std::int64_t keepdims = 1) {
  Attributes attrs;
  attrs.set("axes", std::move(axes));
  attrs.set("keepdims", keepdims);
  return attrs;
}

// Naive reduction: for every output index, folds the input elements that map to it.
struct NaiveReduce {
  std::function<double(double)> map;
  std::function<double(double, double)> combine;
  double init;
  std::function<double(double, double)> finish;  // (acc, count)
};

std::vector<double> naiveReduce(const Tensor& in, const std::vector<bool>& reduced, const NaiveReduce& op) {
  const Shape& shape = in.shape();
  Shape outShape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    outShape.push_back(reduced[d] ? 1 : shape[d]);
  }
  const std::int64_t outCount = numElements(outShape);
  std::vector<double> acc(static_cast<std::size_t>(outCount), op.init);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(outCount), 0);
  for (std::int64_t i = 0; i < in.numel(); ++i) {
    std::int64_t rest = i;
    std::int64_t o = 0;
    std::int64_t stride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      const std::int64_t idx = rest % shape[d];
      rest /= shape[d];
      if (!reduced[d]) {
        o += idx * stride;
      }
      stride *= outShape[d];
    }
    const double x = in.dtype() == DType::Float32 ? in.data<float>()[i] : in.data<double>()[i];
    acc[static_cast<std::size_t>(o)] = op.combine(acc[static_cast<std::size_t>(o)], op.map(x));
    ++counts[static_cast<std::size_t>(o)];
  }
  for (std::size_t o = 0; o < acc.size(); ++o) {
    acc[o] = op.finish(acc[o], static_cast<double>(counts[o]));
  }
  return acc;
}

const auto kIdentity = [](double x) { return x; };
const auto kPlus = [](double a, double b) { return a + b; };
const auto kKeep = [](double a, double) { return a; };

std::vector<std::pair<std::string, NaiveReduce>> allReductions() {
  const double inf = std::numeric_limits<double>::infinity();
  return {
      {"ReduceSum", {kIdentity, kPlus, 0.0, kKeep}},
      {"ReduceMean", {kIdentity, kPlus, 0.0, [](double a, double n) { return a / n; }}},
      {"ReduceProd", {kIdentity, [](double a, double b) { return a * b; }, 1.0, kKeep}},
      {"ReduceMax", {kIdentity, [](double a, double b) { return std::max(a, b); }, -inf, kKeep}},
      {"ReduceMin", {kIdentity, [](double a, double b) { return std::min(a, b); }, inf, kKeep}},
      {"ReduceL1", {[](double x) { return std::fabs(x); }, kPlus, 0.0, kKeep}},
      {"ReduceL2", {[](double x) { return x * x; }, kPlus, 0.0, [](double a, double) { return std::sqrt(a); }}},
      {"ReduceSumSquare", {[](double x) { return x * x; }, kPlus, 0.0, kKeep}},
      {"ReduceLogSumExp",
       {[](double x) { return std::exp(x); }, kPlus, 0.0, [](double a, double) { return std::log(a); }}},
  };
}

TEST(ReductionOpsTest, AllReductionsMatchNaiveReferenceOverAxisSets) {
  const Shape shape{3, 4, 5, 6};
  const std::vector<std::vector<std::int64_t>> axisSets = {{0},    {1},    {3},          {-1},   {1, 2},
                                                           {0, 2}, {1, 3}, {0, 1, 2, 3}, {0, 3}, {2}};
  for (const DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor in = dtype == DType::Float32 ? noise<float>(shape) : noise<double>(shape);
    for (const auto& [type, op] : allReductions()) {
      for (const auto& axes : axisSets) {
        std::vector<bool> reduced(shape.size(), false);
        for (const std::int64_t a : axes) {
          reduced[static_cast<std::size_t>(a < 0 ? a + 4 : a)] = true;
        }
        const std::vector<double> expected = naiveReduce(in, reduced, op);
        for (const std::int64_t keepdims : {0, 1}) {
          const Tensor out = runOpEagerly(type, {&in}, axesAttr(axes, keepdims)).at(0);
          Shape expectedShape;
          for (std::size_t d = 0; d < shape.size(); ++d) {
            if (!reduced[d]) {
              expectedShape.push_back(shape[d]);
            } else if (keepdims != 0) {
              expectedShape.push_back(1);
            }
          }
          ASSERT_EQ(out.shape(), expectedShape) << type;
          ASSERT_EQ(out.numel(), static_cast<std::int64_t>(expected.size()));
          for (std::size_t i = 0; i < expected.size(); ++i) {
            const double got = dtype == DType::Float32 ? out.data<float>()[i] : out.data<double>()[i];
            ASSERT_NEAR(got, expected[i], 1e-4 * std::max(1.0, std::fabs(expected[i])))
                << type << " axes size " << axes.size() << " first " << axes[0] << " at " << i;
          }
        }
      }
    }
  }
}

TEST(ReductionOpsTest, ReduceSumTakesAxesAsInput) {
  const Tensor x = makeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor axes = makeTensor<std::int64_t>({1}, {1});
  Attributes noKeep;
  noKeep.set("keepdims", std::int64_t{0});
  Tensor out = runOpEagerly("ReduceSum", {&x, &axes}, noKeep).at(0);
  EXPECT_EQ(out.shape(), (Shape{2}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{6, 15}));
  // Absent or empty axes reduce everything (keepdims keeps rank).
  out = runOpEagerly("ReduceSum", {&x}, {}).at(0);
  EXPECT_EQ(out.shape(), (Shape{1, 1}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{21}));
  const Tensor empty = makeTensor<std::int64_t>({0}, {});
  out = runOpEagerly("ReduceSum", {&x, &empty}, noKeep).at(0);
  EXPECT_EQ(out.shape(), (Shape{}));
  EXPECT_EQ(values<float>(out), (std::vector<float>{21}));
  // noop_with_empty_axes: the input unchanged.
  Attributes noop;
  noop.set("noop_with_empty_axes", std::int64_t{1});
  out = runOpEagerly("ReduceSum", {&x, &empty}, noop).at(0);
  EXPECT_EQ(out.shape(), x.shape());
  EXPECT_EQ(values<float>(out), values<float>(x));
  out = runOpEagerly("ReduceSumSquare", {&x}, noop).at(0);
  EXPECT_EQ(values<float>(out), (std::vector<float>{1, 4, 9, 16, 25, 36}));
  // Opset 18 style axes input on the other reductions too.
  const Tensor axis0 = makeTensor<std::int64_t>({1}, {-2});
  EXPECT_EQ(values<float>(runOpEagerly("ReduceMax", {&x, &axis0}, {}).at(0)), (std::vector<float>{4, 5, 6}));
  const Tensor badAxis = makeTensor<std::int64_t>({1}, {2});
  EXPECT_THROW(runOpEagerly("ReduceSum", {&x, &badAxis}, {}), Error);
}

TEST(ReductionOpsTest, IntegerReductions) {
  const Tensor x = makeTensor<std::int32_t>({2, 3}, {1, -2, 3, 4, 5, -6});
  EXPECT_EQ(values<std::int32_t>(runOpEagerly("ReduceSum", {&x}, axesAttr({0})).at(0)),
            (std::vector<std::int32_t>{5, 3, -3}));
  EXPECT_EQ(values<std::int32_t>(runOpEagerly("ReduceMax", {&x}, axesAttr({1})).at(0)),
            (std::vector<std::int32_t>{3, 5}));
  EXPECT_EQ(values<std::int32_t>(runOpEagerly("ReduceProd", {&x}, axesAttr({1})).at(0)),
            (std::vector<std::int32_t>{-6, -120}));
  const Tensor y = makeTensor<std::int64_t>({3}, {std::int64_t{1} << 40, 3, -1});
  EXPECT_EQ(values<std::int64_t>(runOpEagerly("ReduceSum", {&y}, axesAttr({0}, 0)).at(0)),
            (std::vector<std::int64_t>{(std::int64_t{1} << 40) + 2}));
  EXPECT_EQ(values<std::int64_t>(runOpEagerly("ReduceMin", {&y}, axesAttr({0}, 0)).at(0)),
            (std::vector<std::int64_t>{-1}));
  EXPECT_EQ(values<std::int64_t>(runOpEagerly("ReduceMean", {&y}, axesAttr({0}, 0)).at(0)),
            (std::vector<std::int64_t>{((std::int64_t{1} << 40) + 2) / 3}));
}

TEST(ReductionOpsTest, LargeFullAndColumnReductions) {
  const Tensor big = noise<float>({1 << 20}, 7);
  double expected = 0.0;
  for (std::int64_t i = 0; i < big.numel(); ++i) {
    expected += big.data<float>()[i];
  }
  const Tensor sum = runOpEagerly("ReduceSum", {&big}, axesAttr({0}, 0)).at(0);
  EXPECT_NEAR(sum.data<float>()[0], expected, 1e-2);
  // Reduce the outer axis of a tall matrix (innermost kept, wide rows split in chunks).
  const Tensor tall = noise<float>({300, 2500}, 3);
  const Tensor cols = runOpEagerly("ReduceMean", {&tall}, axesAttr({0}, 0)).at(0);
  ASSERT_EQ(cols.shape(), (Shape{2500}));
  for (std::int64_t j = 0; j < 2500; j += 97) {
    double s = 0.0;
    for (std::int64_t i = 0; i < 300; ++i) {
      s += tall.data<float>()[i * 2500 + j];
    }
    ASSERT_NEAR(cols.data<float>()[j], s / 300.0, 1e-5);
  }
}

TEST(ReductionOpsTest, ArgMaxArgMin) {
  const Tensor x = makeTensor<float>({2, 3}, {1, 5, 5, 7, 2, 7});
  Attributes axis1;
  axis1.set("axis", std::int64_t{1});
  Tensor out = runOpEagerly("ArgMax", {&x}, axis1).at(0);
  EXPECT_EQ(out.dtype(), DType::Int64);
  EXPECT_EQ(out.shape(), (Shape{2, 1}));
  EXPECT_EQ(values<std::int64_t>(out), (std::vector<std::int64_t>{1, 0}));
  axis1.set("select_last_index", std::int64_t{1});
  EXPECT_EQ(values<std::int64_t>(runOpEagerly("ArgMax", {&x}, axis1).at(0)), (std::vector<std::int64_t>{2, 2}));
  Attributes axis0;
  axis0.set("keepdims", std::int64_t{0});
  out = runOpEagerly("ArgMin", {&x}, axis0).at(0);
  EXPECT_EQ(out.shape(), (Shape{3}));
  EXPECT_EQ(values<std::int64_t>(out), (std::vector<std::int64_t>{0, 1, 0}));
  const Tensor xi = makeTensor<std::int32_t>({4}, {3, -1, 8, -1});
  Attributes last;
  last.set("select_last_index", std::int64_t{1});
  EXPECT_EQ(values<std::int64_t>(runOpEagerly("ArgMin", {&xi}, last).at(0)), (std::vector<std::int64_t>{3}));
  Attributes bad;
  bad.set("axis", std::int64_t{2});
  EXPECT_THROW(runOpEagerly("ArgMax", {&x}, bad), Error);
}

std::vector<double> naiveSoftmax(const Tensor& x, std::int64_t axis, bool log) {
  const Shape& s = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < axis; ++d)
    outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d)
    inner *= s[d];
  const std::int64_t n = s[axis];
  std::vector<double> out(static_cast<std::size_t>(x.numel()));
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      double total = 0.0;
      for (std::int64_t a = 0; a < n; ++a)
        total += std::exp(x.data<float>()[(o * n + a) * inner + i]);
      for (std::int64_t a = 0; a < n; ++a) {
        const std::int64_t k = (o * n + a) * inner + i;
        const double v = x.data<float>()[k];
        out[static_cast<std::size_t>(k)] = log ? v - std::log(total) : std::exp(v) / total;
      }
    }
  }
  return out;
}

TEST(ReductionOpsTest, SoftmaxAndLogSoftmaxAlongAnyAxis) {
  const Tensor x = noise<float>({2, 5, 7}, 11);
  for (const bool log : {false, true}) {
    for (const std::int64_t axis : {-1, 0, 1, 2}) {
      Attributes attrs;
      if (axis != -1) {
        attrs.set("axis", axis);
      }
      const Tensor out = runOpEagerly(log ? "LogSoftmax" : "Softmax", {&x}, attrs).at(0);
      const std::vector<double> expected = naiveSoftmax(x, axis < 0 ? 2 : axis, log);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        ASSERT_NEAR(out.data<float>()[i], expected[i], 1e-5) << (log ? "LogSoftmax" : "Softmax") << " axis " << axis;
      }
    }
  }
  // Large values do not overflow.
  const Tensor big = makeTensor<float>({2}, {1000.0f, 1000.0f});
  EXPECT_EQ(values<float>(runOpEagerly("Softmax", {&big}, {}).at(0)), (std::vector<float>{0.5f, 0.5f}));
}

TEST(ReductionOpsTest, LayerNormalizationWithStatistics) {
  const Tensor x = noise<float>({2, 3, 4}, 5);
  const Tensor scale = noise<float>({3, 4}, 6);
  const Tensor bias = noise<float>({4}, 8);  // broadcasts to the normalised shape [3, 4]
  Attributes attrs;
  attrs.set("axis", std::int64_t{-2});
  attrs.set("epsilon", 1e-3f);
  const auto outs = runOpEagerly("LayerNormalization", {&x, &scale, &bias}, attrs, 3);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[1].shape(), (Shape{2, 1, 1}));
  EXPECT_EQ(outs[2].dtype(), DType::Float32);
  for (std::int64_t r = 0; r < 2; ++r) {
    double mean = 0.0;
    for (std::int64_t i = 0; i < 12; ++i)
      mean += x.data<float>()[r * 12 + i];
    mean /= 12.0;
    double var = 0.0;
    for (std::int64_t i = 0; i < 12; ++i)
      var += std::pow(x.data<float>()[r * 12 + i] - mean, 2);
    const double invStd = 1.0 / std::sqrt(var / 12.0 + 1e-3);
    EXPECT_NEAR(outs[1].data<float>()[r], mean, 1e-6);
    EXPECT_NEAR(outs[2].data<float>()[r], invStd, 1e-5);
    for (std::int64_t i = 0; i < 12; ++i) {
      const double expected =
          (x.data<float>()[r * 12 + i] - mean) * invStd * scale.data<float>()[i] + bias.data<float>()[i % 4];
      ASSERT_NEAR(outs[0].data<float>()[r * 12 + i], expected, 1e-5);
    }
  }
  // Without bias and with only Y requested.
  const auto y = runOpEagerly("LayerNormalization", {&x, &scale}, attrs, 1);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_NEAR(y[0].data<float>()[0], outs[0].data<float>()[0] - bias.data<float>()[0], 1e-5);
  const Tensor badScale = noise<float>({5}, 1);
  EXPECT_THROW(runOpEagerly("LayerNormalization", {&x, &badScale}, attrs, 1), Error);
}

TEST(ReductionOpsTest, SoftmaxCrossEntropyLoss) {
  const Tensor scores = noise<float>({3, 4, 2}, 9);  // N=3, C=4, d1=2
  const Tensor labels = makeTensor<std::int64_t>({3, 2}, {0, 3, 1, -1, 2, 2});
  const Tensor weights = makeTensor<float>({4}, {0.5f, 1.0f, 2.0f, 1.5f});
  Attributes attrs;
  attrs.set("ignore_index", std::int64_t{-1});
  const auto outs = runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &labels, &weights}, attrs, 2);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].shape(), (Shape{}));
  EXPECT_EQ(outs[1].shape(), scores.shape());
  const std::vector<double> logProb = naiveSoftmax(scores, 1, true);
  double total = 0.0;
  double weightSum = 0.0;
  for (std::int64_t n = 0; n < 3; ++n) {
    for (std::int64_t d = 0; d < 2; ++d) {
      const std::int64_t label = labels.data<std::int64_t>()[n * 2 + d];
      if (label == -1)
        continue;
      const double w = weights.data<float>()[label];
      total -= logProb[static_cast<std::size_t>((n * 4 + label) * 2 + d)] * w;
      weightSum += w;
    }
  }
  EXPECT_NEAR(outs[0].data<float>()[0], total / weightSum, 1e-5);
  for (std::size_t i = 0; i < logProb.size(); ++i) {
    ASSERT_NEAR(outs[1].data<float>()[i], logProb[i], 1e-5);
  }
  attrs.set("reduction", std::string("none"));
  const Tensor none = runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &labels}, attrs).at(0);
  EXPECT_EQ(none.shape(), (Shape{3, 2}));
  EXPECT_EQ(none.data<float>()[3], 0.0f);  // ignored
  EXPECT_NEAR(none.data<float>()[0], -logProb[0], 1e-5);
  const Tensor badLabels = makeTensor<std::int64_t>({3}, {0, 1, 2});
  EXPECT_THROW(runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &badLabels}, {}), Error);
}

// Runs `op` and checks that the workspace it allocated on top of what was already alive (the process's allocator is
// shared with every test before this one) stayed below `limit` bytes; returns the op's result.
template <typename Op>
Tensor expectLittleWorkspace(const Op& op, std::int64_t limit) {
  MemoryStats& stats = allocatorFor(Device::cpu()).stats();
  const auto workspace = static_cast<std::size_t>(MemoryCategory::Workspace);
  const std::int64_t before = stats.snapshot().current[workspace];
  stats.resetPeaks();
  Tensor result = op();
  EXPECT_LT(stats.snapshot().peak[workspace] - before, limit);
  return result;
}

// Note [Loss without log-probabilities]: without its log_prob output the loss takes only the labels' log-probabilities
// (the same arithmetic, so the same number as with the output), and neither it nor its gradient from the scores holds
// a scratch copy of the scores.
TEST(ReductionOpsTest, SoftmaxCrossEntropyLossWithoutLogProbKeepsNoCopyOfTheScores) {
  for (const Shape& shape : {Shape{64, 1000}, Shape{3, 5, 7}}) {  // contiguous rows, and a strided class axis
    SCOPED_TRACE(shapeToString(shape));
    const Tensor scores = noise<float>(shape, 4);
    Shape labelShape{shape[0]};
    labelShape.insert(labelShape.end(), shape.begin() + 2, shape.end());
    std::vector<std::int64_t> labelValues(static_cast<std::size_t>(numElements(labelShape)));
    for (std::size_t i = 0; i < labelValues.size(); ++i) {
      labelValues[i] = i % 4 == 3 ? -1 : static_cast<std::int64_t>((i * 7) % static_cast<std::size_t>(shape[1]));
    }
    const Tensor labels = makeTensor<std::int64_t>(labelShape, labelValues);
    for (const char* reduction : {"mean", "sum", "none"}) {
      SCOPED_TRACE(reduction);
      Attributes attrs;
      attrs.set("ignore_index", std::int64_t{-1});
      attrs.set("reduction", std::string(reduction));
      const Tensor withLogProb = runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &labels}, attrs, 2).at(0);
      const Tensor alone = expectLittleWorkspace(
          [&] {
            return runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &labels}, attrs).at(0);
          },
          static_cast<std::int64_t>(scores.bytes()) / 4);
      ASSERT_EQ(alone.shape(), withLogProb.shape());
      for (std::int64_t i = 0; i < alone.numel(); ++i) {
        ASSERT_EQ(alone.data<float>()[i], withLogProb.data<float>()[i]) << reduction << " at " << i;
      }
    }
    // The gradient from the scores writes the log-probabilities into its output and rewrites them in place.
    Attributes fromScores;
    fromScores.set("ignore_index", std::int64_t{-1});
    fromScores.set("from_scores", std::int64_t{1});
    const Tensor dLoss = makeTensor<float>({}, {1.0f});
    const Tensor grad = expectLittleWorkspace(
        [&] {
          return runOpEagerly("SoftmaxCrossEntropyLossGrad", {&dLoss, &scores, &labels}, fromScores).at(0);
        },
        static_cast<std::int64_t>(scores.bytes()) / 4);
    Attributes withLogProbAttrs;
    withLogProbAttrs.set("ignore_index", std::int64_t{-1});
    const auto forward = runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &labels}, withLogProbAttrs, 2);
    const Tensor expected =
        runOpEagerly("SoftmaxCrossEntropyLossGrad", {&dLoss, &forward.at(1), &labels}, withLogProbAttrs).at(0);
    for (std::int64_t i = 0; i < grad.numel(); ++i) {
      ASSERT_EQ(grad.data<float>()[i], expected.data<float>()[i]) << i;
    }
  }
  const Tensor scores = noise<float>({2, 3}, 1);
  const Tensor outOfRange = makeTensor<std::int64_t>({2}, {1, 3});
  EXPECT_THROW(runOpEagerly("SoftmaxCrossEntropyLoss", {&scores, &outOfRange}, {}), Error);
}

TEST(ReductionOpsTest, NegativeLogLikelihoodLoss) {
  const Tensor input = makeTensor<float>({2, 3}, {-1.0f, -2.0f, -3.0f, -0.5f, -1.5f, -2.5f});
  const Tensor target = makeTensor<std::int32_t>({2}, {2, 0});
  Attributes sum;
  sum.set("reduction", std::string("sum"));
  EXPECT_FLOAT_EQ(runOpEagerly("NegativeLogLikelihoodLoss", {&input, &target}, sum).at(0).data<float>()[0], 3.5f);
  EXPECT_FLOAT_EQ(runOpEagerly("NegativeLogLikelihoodLoss", {&input, &target}, {}).at(0).data<float>()[0], 1.75f);
  const Tensor weights = makeTensor<float>({3}, {2.0f, 1.0f, 0.5f});
  // mean with weights: (3 * 0.5 + 0.5 * 2) / (0.5 + 2)
  EXPECT_FLOAT_EQ(runOpEagerly("NegativeLogLikelihoodLoss", {&input, &target, &weights}, {}).at(0).data<float>()[0],
                  1.0f);
  const Tensor outOfRange = makeTensor<std::int32_t>({2}, {3, 0});
  EXPECT_THROW(runOpEagerly("NegativeLogLikelihoodLoss", {&input, &outOfRange}, {}), Error);
}

}  // namespace
}  // namespace strata
