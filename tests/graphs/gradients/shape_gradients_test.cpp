// Gradient rules of the shape and data-movement family (graphs/src/gradients/shape_gradients.cpp) checked against
// finite differences, plus unit tests of their kernels (SliceGrad, GatherGrad, PadGrad) and of paths the
// finite-difference harness cannot reach (outputs without a gradient, inputs that need none).

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "graphs/gradient_check.h"
#include "strata/graphs/gradient_registry.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

using testing::expectGradientsMatchFiniteDifferences;
using testing::GradientCheckOptions;
using testing::randomTensor;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

Tensor ints(const std::vector<std::int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<std::int64_t>(values.size())});
  if (!values.empty())
    std::memcpy(t.rawData(), values.data(), values.size() * sizeof(std::int64_t));
  return t;
}

Tensor intsShaped(const std::vector<std::int64_t>& values, const Shape& shape) {
  return ints(values).reshape(shape);
}

template <typename T>
Tensor values(const std::vector<T>& data, const Shape& shape) {
  Tensor t = Tensor::empty(dtypeOf<T>(), shape);
  std::memcpy(t.rawData(), data.data(), data.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> toVector(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

Tensor random64(const Shape& shape, unsigned seed) {
  return randomTensor(DType::Float64, shape, seed);
}

Attributes makeAttrs(std::initializer_list<std::pair<const std::string, AttributeValue>> list) {
  Attributes a;
  for (const auto& [name, value] : list)
    a.set(name, value);
  return a;
}

// ---------------------------------------------------------------------------------------------------------------
// Finite-difference checks, one or more per rule.

TEST(ShapeGradientsTest, Reshape) {
  expectGradientsMatchFiniteDifferences("Reshape", {random64({2, 3, 4}, 1), ints({4, -1})});
  expectGradientsMatchFiniteDifferences("Reshape", {random64({2, 3, 4}, 2), ints({0, -1})});
}

TEST(ShapeGradientsTest, Flatten) {
  expectGradientsMatchFiniteDifferences("Flatten", {random64({2, 3, 4}, 3)}, makeAttrs({{"axis", std::int64_t{2}}}));
  expectGradientsMatchFiniteDifferences("Flatten", {random64({2, 3, 4}, 4)}, makeAttrs({{"axis", std::int64_t{-1}}}));
  expectGradientsMatchFiniteDifferences("Flatten", {random64({2, 3}, 5)}, makeAttrs({{"axis", std::int64_t{0}}}));
}

TEST(ShapeGradientsTest, Squeeze) {
  expectGradientsMatchFiniteDifferences("Squeeze", {random64({2, 1, 3, 1}, 6), ints({-1, 1})});
  expectGradientsMatchFiniteDifferences("Squeeze", {random64({1, 3, 1}, 7)});
}

TEST(ShapeGradientsTest, Unsqueeze) {
  expectGradientsMatchFiniteDifferences("Unsqueeze", {random64({2, 3}, 8), ints({0, -1})});
  expectGradientsMatchFiniteDifferences("Unsqueeze", {random64({}, 9), ints({0})});
}

TEST(ShapeGradientsTest, Transpose) {
  expectGradientsMatchFiniteDifferences("Transpose", {random64({2, 3, 4}, 10)},
                                        makeAttrs({{"perm", std::vector<std::int64_t>{2, 0, 1}}}));
  expectGradientsMatchFiniteDifferences("Transpose", {random64({2, 3, 4}, 11)});  // default: reversed axes
  expectGradientsMatchFiniteDifferences("Transpose", {random64({2, 3, 4, 5}, 12)},
                                        makeAttrs({{"perm", std::vector<std::int64_t>{0, 3, 1, 2}}}));
}

TEST(ShapeGradientsTest, ConcatAlongSeveralAxes) {
  expectGradientsMatchFiniteDifferences("Concat", {random64({1, 3}, 13), random64({2, 3}, 14), random64({3, 3}, 15)},
                                        makeAttrs({{"axis", std::int64_t{0}}}));
  expectGradientsMatchFiniteDifferences("Concat", {random64({2, 1, 4}, 16), random64({2, 3, 4}, 17)},
                                        makeAttrs({{"axis", std::int64_t{1}}}));
  expectGradientsMatchFiniteDifferences("Concat", {random64({2, 3, 1}, 18), random64({2, 3, 2}, 19)},
                                        makeAttrs({{"axis", std::int64_t{-1}}}));
}

TEST(ShapeGradientsTest, ConcatWithSomeInputsConstant) {
  GradientCheckOptions options;
  options.wrt = {1};  // inputs 0 and 2 are constants: input 1's part is sliced out alone
  expectGradientsMatchFiniteDifferences("Concat", {random64({2, 2}, 20), random64({2, 3}, 21), random64({2, 1}, 22)},
                                        makeAttrs({{"axis", std::int64_t{-1}}}), options);
}

TEST(ShapeGradientsTest, SplitUneven) {
  GradientCheckOptions options;
  options.outputCount = 3;
  expectGradientsMatchFiniteDifferences("Split", {random64({6, 2}, 23), ints({1, 3, 2})},
                                        makeAttrs({{"axis", std::int64_t{0}}}), options);
  expectGradientsMatchFiniteDifferences("Split", {random64({2, 5}, 24), ints({3, 0, 2})},
                                        makeAttrs({{"axis", std::int64_t{-1}}}), options);
  // num_outputs (opset 18): a smaller last part.
  expectGradientsMatchFiniteDifferences("Split", {random64({2, 7}, 25)},
                                        makeAttrs({{"axis", std::int64_t{1}}, {"num_outputs", std::int64_t{3}}}),
                                        options);
}

TEST(ShapeGradientsTest, Slice) {
  expectGradientsMatchFiniteDifferences("Slice", {random64({4, 5}, 26), ints({1, 0}), ints({3, 4})});
  expectGradientsMatchFiniteDifferences("Slice", {random64({4, 5, 3}, 27), ints({1}), ints({kInt64Max}), ints({-2})});
}

TEST(ShapeGradientsTest, SliceNegativeAndStrided) {
  // Negative starts/ends, negative axes, strides of 2 and -1 / -2.
  expectGradientsMatchFiniteDifferences(
      "Slice", {random64({6, 5}, 28), ints({-1, 0}), ints({-7, 5}), ints({0, 1}), ints({-2, 2})});
  expectGradientsMatchFiniteDifferences("Slice", {random64({3, 7}, 29), ints({-2}), ints({1}), ints({-1}), ints({-1})});
  expectGradientsMatchFiniteDifferences(
      "Slice", {random64({3, 8}, 30), ints({1, -8}), ints({kInt64Max, -1}), ints({-2, -1}), ints({1, 3})});
}

TEST(ShapeGradientsTest, Expand) {
  expectGradientsMatchFiniteDifferences("Expand", {random64({3, 1}, 31), ints({2, 3, 4})});
  expectGradientsMatchFiniteDifferences("Expand", {random64({1, 4}, 32), ints({3, 1})});
}

TEST(ShapeGradientsTest, Tile) {
  expectGradientsMatchFiniteDifferences("Tile", {random64({2, 3, 2}, 33), ints({2, 1, 3})});
  expectGradientsMatchFiniteDifferences("Tile", {random64({3}, 34), ints({4})});
}

TEST(ShapeGradientsTest, GatherRepeatedIndices) {
  expectGradientsMatchFiniteDifferences("Gather", {random64({4, 3}, 35), ints({0, 2, 0, 0})});
  // 2-D indices with negative entries, along a negative axis.
  expectGradientsMatchFiniteDifferences("Gather", {random64({2, 5, 3}, 36), intsShaped({1, -1, 1, 0, 4, -4}, {2, 3})},
                                        makeAttrs({{"axis", std::int64_t{-2}}}));
  // A scalar index drops the axis.
  expectGradientsMatchFiniteDifferences("Gather", {random64({3, 4}, 37), intsShaped({2}, {})},
                                        makeAttrs({{"axis", std::int64_t{1}}}));
}

TEST(ShapeGradientsTest, GatherElementsRepeatedIndices) {
  expectGradientsMatchFiniteDifferences("GatherElements",
                                        {random64({3, 4}, 38), intsShaped({0, 0, 3, 1, 2, 2}, {3, 2})},
                                        makeAttrs({{"axis", std::int64_t{1}}}));
  expectGradientsMatchFiniteDifferences("GatherElements", {random64({3, 2}, 39), intsShaped({2, -1, 0, 0}, {2, 2})},
                                        makeAttrs({{"axis", std::int64_t{-2}}}));
}

TEST(ShapeGradientsTest, PadConstant) {
  expectGradientsMatchFiniteDifferences("Pad", {random64({2, 3}, 40), ints({1, 0, 2, 3})});
  // With a constant value (not differentiated) and axes (opset 18), negative axis.
  expectGradientsMatchFiniteDifferences("Pad",
                                        {random64({2, 3, 2}, 41), ints({2, 1}), values<double>({0.5}, {}), ints({-2})});
  // Negative pads crop.
  expectGradientsMatchFiniteDifferences("Pad", {random64({4, 5}, 42), ints({-1, 2, 0, -2})});
}

TEST(ShapeGradientsTest, PadReflect) {
  const Attributes reflect = makeAttrs({{"mode", std::string("reflect")}});
  expectGradientsMatchFiniteDifferences("Pad", {random64({3, 4}, 43), ints({2, 1, 1, 3})}, reflect);
  expectGradientsMatchFiniteDifferences("Pad", {random64({2, 3, 4}, 44), ints({0, 2, 3, 0, 2, 1})}, reflect);
}

TEST(ShapeGradientsTest, PadEdge) {
  const Attributes edge = makeAttrs({{"mode", std::string("edge")}});
  expectGradientsMatchFiniteDifferences("Pad", {random64({3, 2}, 45), ints({2, 0, 1, 3})}, edge);
  expectGradientsMatchFiniteDifferences("Pad", {random64({2, 3}, 46), ints({-1, 2, 0, 0})}, edge);
}

TEST(ShapeGradientsTest, PadWrap) {
  expectGradientsMatchFiniteDifferences("Pad", {random64({2, 3}, 47), ints({1, 4, 2, 2})},
                                        makeAttrs({{"mode", std::string("wrap")}}));
}

TEST(ShapeGradientsTest, DepthToSpace) {
  expectGradientsMatchFiniteDifferences("DepthToSpace", {random64({1, 8, 2, 3}, 48)},
                                        makeAttrs({{"blocksize", std::int64_t{2}}}));
  expectGradientsMatchFiniteDifferences("DepthToSpace", {random64({2, 8, 2, 1}, 49)},
                                        makeAttrs({{"blocksize", std::int64_t{2}}, {"mode", std::string("CRD")}}));
}

TEST(ShapeGradientsTest, SpaceToDepth) {
  expectGradientsMatchFiniteDifferences("SpaceToDepth", {random64({2, 2, 4, 6}, 50)},
                                        makeAttrs({{"blocksize", std::int64_t{2}}}));
}

TEST(ShapeGradientsTest, NoOpsPassTheGradientThrough) {
  // Rules that return dY itself: the engine must accept a gradient that is another node's gradient.
  expectGradientsMatchFiniteDifferences("Transpose", {random64({2, 3}, 54)},
                                        makeAttrs({{"perm", std::vector<std::int64_t>{0, 1}}}));
  expectGradientsMatchFiniteDifferences("Tile", {random64({2, 3}, 55), ints({1, 1})});
  expectGradientsMatchFiniteDifferences("Pad", {random64({2, 3}, 56), ints({0, 0, 0, 0})},
                                        makeAttrs({{"mode", std::string("edge")}}));
  expectGradientsMatchFiniteDifferences("Concat", {random64({2, 3}, 57)}, makeAttrs({{"axis", std::int64_t{1}}}));
}

TEST(ShapeGradientsTest, Float32) {
  // The same rules on float32 (harness tolerances for float32).
  expectGradientsMatchFiniteDifferences("Gather", {randomTensor(DType::Float32, {5, 4}, 51), ints({4, 1, 4})});
  expectGradientsMatchFiniteDifferences("Pad", {randomTensor(DType::Float32, {3, 4}, 52), ints({1, 2, 2, 1})},
                                        makeAttrs({{"mode", std::string("reflect")}}));
  expectGradientsMatchFiniteDifferences(
      "Slice", {randomTensor(DType::Float32, {6}, 53), ints({5}), ints({0}), ints({0}), ints({-2})});
}

// ---------------------------------------------------------------------------------------------------------------
// Rules driven directly: a GradientBuilder that runs every emitted node eagerly, so paths the harness never takes
// (outputs without gradients, inputs that need none) are checked without the autodiff engine.

class EagerBuilder : public GradientBuilder {
 public:
  EagerBuilder(Node node, std::vector<Tensor> inputs, std::vector<Tensor> outputs, std::vector<bool> constantInput)
      : node_(std::move(node)) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      node_.inputs.push_back(add(std::move(inputs[i]), constantInput[i]));
    }
    for (Tensor& t : outputs)
      node_.outputs.push_back(add(std::move(t), false));
  }

  const Node& node() const override { return node_; }
  const TensorMeta& meta(int value) const override { return tensor(value).meta(); }
  const Tensor* constantOf(int value) const override {
    return constant_[static_cast<std::size_t>(value)] ? &values_[static_cast<std::size_t>(value)] : nullptr;
  }
  int outputGrad(std::size_t i) const override {
    const auto it = outputGrads_.find(i);
    return it == outputGrads_.end() ? kNoValue : it->second;
  }
  bool needsInputGrad(std::size_t i) const override { return needs_.count(i) != 0; }
  std::vector<int> emit(const std::string& opType, const std::vector<int>& inputs, Attributes attrs,
                        std::size_t outputCount) override {
    ops_.push_back(opType);
    std::vector<const Tensor*> ptrs;
    for (int v : inputs)
      ptrs.push_back(v == kNoValue ? nullptr : &tensor(v));
    std::vector<int> ids;
    for (Tensor& t : runOpEagerly(opType, ptrs, attrs, outputCount))
      ids.push_back(add(std::move(t), false));
    return ids;
  }
  int constant(Tensor value) override { return add(std::move(value), true); }

  void setOutputGrad(std::size_t i, Tensor grad) { outputGrads_[i] = add(std::move(grad), false); }
  void setNeeds(std::size_t i) { needs_[i] = true; }
  const Tensor& tensor(int value) const { return values_.at(static_cast<std::size_t>(value)); }
  const std::vector<std::string>& ops() const { return ops_; }

 private:
  int add(Tensor t, bool isConstant) {
    values_.push_back(std::move(t));
    constant_.push_back(isConstant);
    return static_cast<int>(values_.size()) - 1;
  }

  Node node_;
  std::vector<Tensor> values_;
  std::vector<bool> constant_;
  std::map<std::size_t, int> outputGrads_;
  std::map<std::size_t, bool> needs_;
  std::vector<std::string> ops_;
};

std::vector<int> runRule(EagerBuilder& builder) {
  const GradientRuleInfo* info = GradientRegistry::instance().find(builder.node().opType);
  EXPECT_NE(info, nullptr);
  return info == nullptr ? std::vector<int>{} : info->rule(builder);
}

TEST(ShapeGradientsTest, SplitOutputsWithoutGradientContributeZeros) {
  Node node;
  node.name = "split";
  node.opType = "Split";
  node.attrs.set("axis", std::int64_t{1});
  const Tensor x = values<double>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  const Tensor split = ints({1, 2, 1});
  const auto outs = runOpEagerly("Split", {&x, &split}, node.attrs, 3);
  EagerBuilder b(node, {x, split}, outs, {false, true});
  b.setNeeds(0);
  b.setOutputGrad(0, values<double>({10, 20}, {2, 1}));
  b.setOutputGrad(2, values<double>({30, 40}, {2, 1}));
  const auto grads = runRule(b);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[1], kNoValue);
  ASSERT_NE(grads[0], kNoValue);
  EXPECT_EQ(toVector<double>(b.tensor(grads[0])), (std::vector<double>{10, 0, 0, 30, 20, 0, 0, 40}));
}

TEST(ShapeGradientsTest, ConcatSkipsInputsThatNeedNoGradient) {
  Node node;
  node.name = "concat";
  node.opType = "Concat";
  node.attrs.set("axis", std::int64_t{0});
  const Tensor a = values<double>({1, 2}, {1, 2});
  const Tensor c = values<double>({3, 4, 5, 6}, {2, 2});
  const auto outs = runOpEagerly("Concat", {&a, &c}, node.attrs);
  EagerBuilder b(node, {a, c}, outs, {false, false});
  b.setNeeds(1);
  b.setOutputGrad(0, values<double>({1, 2, 3, 4, 5, 6}, {3, 2}));
  const auto grads = runRule(b);
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0], kNoValue);
  ASSERT_NE(grads[1], kNoValue);
  EXPECT_EQ(toVector<double>(b.tensor(grads[1])), (std::vector<double>{3, 4, 5, 6}));
}

TEST(ShapeGradientsTest, TileWithAZeroRepeatHasAZeroGradient) {
  Node node;
  node.name = "tile";
  node.opType = "Tile";
  const Tensor x = values<double>({1, 2, 3}, {1, 3});
  const Tensor repeats = ints({0, 2});
  const auto outs = runOpEagerly("Tile", {&x, &repeats}, node.attrs);
  EagerBuilder b(node, {x, repeats}, outs, {false, true});
  b.setNeeds(0);
  b.setOutputGrad(0, Tensor::zeros(DType::Float64, {0, 6}));
  const auto grads = runRule(b);
  ASSERT_EQ(grads.size(), 2u);
  ASSERT_NE(grads[0], kNoValue);
  EXPECT_EQ(b.tensor(grads[0]).shape(), (Shape{1, 3}));
  EXPECT_EQ(toVector<double>(b.tensor(grads[0])), (std::vector<double>{0, 0, 0}));
}

TEST(ShapeGradientsTest, RulesDeclareNonDifferentiableInputs) {
  const auto& registry = GradientRegistry::instance();
  const std::map<std::string, std::vector<std::size_t>> expected = {
      {"Reshape", {1}}, {"Squeeze", {1}}, {"Unsqueeze", {1}}, {"Split", {1}},          {"Slice", {1, 2, 3, 4}},
      {"Expand", {1}},  {"Tile", {1}},    {"Gather", {1}},    {"GatherElements", {1}}, {"Pad", {1, 2, 3}}};
  for (const auto& [op, inputs] : expected) {
    const GradientRuleInfo* info = registry.find(op);
    ASSERT_NE(info, nullptr) << op;
    EXPECT_EQ(info->nonDifferentiableInputs, inputs) << op;
  }
  for (const char* op : {"Flatten", "Transpose", "Concat", "DepthToSpace", "SpaceToDepth"}) {
    EXPECT_NE(registry.find(op), nullptr) << op;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Gradient kernels.

TEST(ShapeGradientsTest, SliceGradKernelScattersIntoZeros) {
  // Forward: x[4] sliced with start -1, end -5 (clamped), step -2 reads x[3], x[1].
  const Tensor dy = values<float>({1.5F, 2.5F}, {2});
  const auto out = runOpEagerly("SliceGrad", {&dy},
                                makeAttrs({{"starts", std::vector<std::int64_t>{-1}},
                                           {"ends", std::vector<std::int64_t>{-5}},
                                           {"axes", std::vector<std::int64_t>{0}},
                                           {"steps", std::vector<std::int64_t>{-2}},
                                           {"shape", std::vector<std::int64_t>{4}}}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{4}));
  EXPECT_EQ(toVector<float>(out[0]), (std::vector<float>{0, 2.5F, 0, 1.5F}));
}

TEST(ShapeGradientsTest, SliceGradKernelTakesInputsAndAnyDtype) {
  // Operands as inputs (Slice opset 10 style); int64 data moves by element size.
  const Tensor dy = values<std::int64_t>({7, 8, 9, 10}, {2, 2});
  const Tensor starts = ints({1, 0});
  const Tensor ends = ints({3, 3});
  const Tensor axes = ints({0, 1});
  const Tensor steps = ints({1, 2});
  const auto out = runOpEagerly("SliceGrad", {&dy, &starts, &ends, &axes, &steps},
                                makeAttrs({{"shape", std::vector<std::int64_t>{3, 3}}}));
  EXPECT_EQ(toVector<std::int64_t>(out[0]), (std::vector<std::int64_t>{0, 0, 0, 7, 0, 8, 9, 0, 10}));
}

// A channel slice (ShuffleNetV2's split) of a tensor large enough for the threaded paths: each image's slice is one
// contiguous run, merged from the channel and spatial axes; and a strided spatial slice of the same tensor.
TEST(ShapeGradientsTest, SliceGradKernelMovesMergedRunsOfLargeTensors) {
  const std::int64_t n = 3, c = 64, h = 20, w = 20;
  struct Case {
    std::vector<std::int64_t> starts, ends, axes, steps;
    Shape dyShape;
  };
  const std::vector<Case> cases = {{{16}, {48}, {1}, {1}, {n, 32, h, w}},
                                   {{1, 0}, {20, 20}, {2, 3}, {2, 3}, {n, c, 10, 7}}};
  for (const Case& k : cases) {
    const Tensor dy = randomTensor(DType::Float32, k.dyShape, 61);
    const auto out = runOpEagerly("SliceGrad", {&dy},
                                  makeAttrs({{"starts", k.starts},
                                             {"ends", k.ends},
                                             {"axes", k.axes},
                                             {"steps", k.steps},
                                             {"shape", std::vector<std::int64_t>{n, c, h, w}}}));
    ASSERT_EQ(out[0].shape(), (Shape{n, c, h, w}));
    const std::vector<float> got = toVector<float>(out[0]);
    const std::vector<float> from = toVector<float>(dy);
    std::vector<float> expected(got.size(), 0.0F);
    const Shape& d = k.dyShape;
    const bool channels = k.axes.size() == 1;
    for (std::int64_t i = 0; i < numElements(d); ++i) {
      const std::int64_t x = i % d[3], y = i / d[3] % d[2], ch = i / (d[3] * d[2]) % d[1], b = i / (d[3] * d[2] * d[1]);
      const std::int64_t to =
          channels ? ((b * c + ch + 16) * h + y) * w + x : ((b * c + ch) * h + 1 + 2 * y) * w + 3 * x;
      expected[static_cast<std::size_t>(to)] = from[static_cast<std::size_t>(i)];
    }
    EXPECT_EQ(got, expected) << (channels ? "channel slice" : "strided spatial slice");
  }
}

TEST(ShapeGradientsTest, SliceGradKernelRejectsAMismatchedGradient) {
  const Tensor dy = values<float>({1, 2, 3}, {3});
  EXPECT_THROW(runOpEagerly("SliceGrad", {&dy},
                            makeAttrs({{"starts", std::vector<std::int64_t>{0}},
                                       {"ends", std::vector<std::int64_t>{2}},
                                       {"shape", std::vector<std::int64_t>{4}}})),
               Error);
}

TEST(ShapeGradientsTest, GatherGradKernelAccumulatesRepeatedIndices) {
  // data [3, 2], indices [0, 2, 0, -3] on axis 0: row 0 receives three rows of dY.
  const Tensor dy = values<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  const Tensor idx = ints({0, 2, 0, -3});
  const auto out = runOpEagerly("GatherGrad", {&dy, &idx},
                                makeAttrs({{"axis", std::int64_t{0}}, {"shape", std::vector<std::int64_t>{3, 2}}}));
  EXPECT_EQ(toVector<double>(out[0]), (std::vector<double>{1 + 5 + 7, 2 + 6 + 8, 0, 0, 3, 4}));
}

TEST(ShapeGradientsTest, GatherGradKernelInnerAxisFloat32) {
  // data [2, 3], int32 indices [[2, 2]] on axis 1: dY is [2, 1, 2].
  const Tensor dy = values<float>({1, 2, 3, 4}, {2, 1, 2});
  const Tensor idx = values<std::int32_t>({2, 2}, {1, 2});
  const auto out = runOpEagerly("GatherGrad", {&dy, &idx},
                                makeAttrs({{"axis", std::int64_t{1}}, {"shape", std::vector<std::int64_t>{2, 3}}}));
  EXPECT_EQ(toVector<float>(out[0]), (std::vector<float>{0, 0, 3, 0, 0, 7}));
}

TEST(ShapeGradientsTest, GatherGradKernelLargeTableMatchesSerialSum) {
  // Enough columns and rows to split over threads; every row of dY is 1, so dX row r counts r's occurrences.
  const std::int64_t rows = 50, cols = 3000, n = 400;
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  std::vector<double> counts(static_cast<std::size_t>(rows), 0.0);
  for (std::int64_t j = 0; j < n; ++j) {
    indices[static_cast<std::size_t>(j)] = (j * 7) % rows;
    counts[static_cast<std::size_t>((j * 7) % rows)] += 1.0;
  }
  Tensor dy = Tensor::empty(DType::Float64, {n, cols});
  for (std::int64_t i = 0; i < dy.numel(); ++i)
    dy.data<double>()[i] = 1.0;
  const Tensor idx = ints(indices);
  const auto out =
      runOpEagerly("GatherGrad", {&dy, &idx},
                   makeAttrs({{"axis", std::int64_t{0}}, {"shape", std::vector<std::int64_t>{rows, cols}}}));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; c += 997) {
      ASSERT_EQ(out[0].data<double>()[r * cols + c], counts[static_cast<std::size_t>(r)]) << r << ", " << c;
    }
  }
}

TEST(ShapeGradientsTest, GatherGradKernelRejectsOutOfRangeIndices) {
  const Tensor dy = values<double>({1, 2}, {1, 2});
  const Tensor idx = ints({3});
  EXPECT_THROW(runOpEagerly("GatherGrad", {&dy, &idx},
                            makeAttrs({{"axis", std::int64_t{0}}, {"shape", std::vector<std::int64_t>{3, 2}}})),
               Error);
}

TEST(ShapeGradientsTest, PadGradKernelFoldsReflectAndEdge) {
  // Forward reflect of [a, b, c] with pads (2, 1): [c, b, a, b, c, b].
  const Tensor dy = values<double>({1, 2, 3, 4, 5, 6}, {6});
  const auto reflect = runOpEagerly("PadGrad", {&dy},
                                    makeAttrs({{"mode", std::string("reflect")},
                                               {"pads", std::vector<std::int64_t>{2, 1}},
                                               {"shape", std::vector<std::int64_t>{3}}}));
  EXPECT_EQ(toVector<double>(reflect[0]), (std::vector<double>{3, 2 + 4 + 6, 1 + 5}));
  // Forward edge: [a, a, a, b, c, c].
  const auto edge = runOpEagerly("PadGrad", {&dy},
                                 makeAttrs({{"mode", std::string("edge")},
                                            {"pads", std::vector<std::int64_t>{2, 1}},
                                            {"shape", std::vector<std::int64_t>{3}}}));
  EXPECT_EQ(toVector<double>(edge[0]), (std::vector<double>{1 + 2 + 3, 4, 5 + 6}));
}

TEST(ShapeGradientsTest, PadGradKernelTwoAxesAndCropping) {
  // x [2, 2] padded by edge on axis 0 (1, 0) and cropped by -1 at the end of axis 1: y [3, 1] = x[(0, 0, 1), 0].
  const Tensor dy = values<float>({1, 2, 4}, {3, 1});
  const auto out = runOpEagerly("PadGrad", {&dy},
                                makeAttrs({{"mode", std::string("edge")},
                                           {"pads", std::vector<std::int64_t>{1, 0, 0, -1}},
                                           {"shape", std::vector<std::int64_t>{2, 2}}}));
  EXPECT_EQ(toVector<float>(out[0]), (std::vector<float>{3, 0, 4, 0}));
}

TEST(ShapeGradientsTest, PadGradKernelRejectsAMismatchedGradient) {
  const Tensor dy = values<double>({1, 2, 3}, {3});
  EXPECT_THROW(runOpEagerly("PadGrad", {&dy},
                            makeAttrs({{"mode", std::string("edge")},
                                       {"pads", std::vector<std::int64_t>{1, 1}},
                                       {"shape", std::vector<std::int64_t>{2}}})),
               Error);
}

}  // namespace
}  // namespace strata
