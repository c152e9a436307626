#include "strata/graphs/batch_norm_folding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graphs/graph_test_helpers.h"
#include "strata/graphs/relu_fusion.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

using testing::countOps;
using testing::forwardOutput;

enum class Variant { Folds, TrainingMode, ConvOutputAlsoRead, StatisticsFromInput };

// x [2, 3, 6, 6] -> Conv (bias) -> BatchNormalization -> Relu -> Conv (no bias) -> BatchNormalization -> y: statistics
// away from 0 and 1, epsilon 1e-3. The variants keep the first pair apart (training mode, a second reader of the
// Conv's output, a scale that is a graph input).
Graph convBatchNormModel(const testing::TempDir& dir, Variant variant) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 6, 6});
  if (variant == Variant::StatisticsFromInput)
    setTensorType(model.mutable_graph()->add_input(), "scale1", onnx::TensorProto::FLOAT, {4});
  else
    addInitializer(model, "scale1", {4}, {1.5f, 0.5f, -0.8f, 1.1f});
  addInitializer(model, "w1", {4, 3, 3, 3}, randomValues(108, 11, 0.5f));
  addInitializer(model, "b1", {4}, randomValues(4, 12, 0.3f));
  addInitializer(model, "shift1", {4}, {0.1f, -0.3f, 0.2f, 0.0f});
  addInitializer(model, "mean1", {4}, {0.2f, -0.1f, 0.05f, 0.4f});
  addInitializer(model, "var1", {4}, {0.5f, 2.0f, 1.3f, 0.9f});
  addInitializer(model, "w2", {5, 4, 1, 1}, randomValues(20, 13, 0.6f));
  addInitializer(model, "scale2", {5}, {1.0f, 0.7f, 1.2f, 0.9f, 2.0f});
  addInitializer(model, "shift2", {5}, {0.0f, 0.1f, -0.1f, 0.2f, 0.3f});
  addInitializer(model, "mean2", {5}, {0.3f, 0.0f, -0.2f, 0.1f, 0.5f});
  addInitializer(model, "var2", {5}, {1.5f, 0.8f, 0.6f, 2.5f, 1.0f});
  setInts(addNode(model, "Conv", {"x", "w1", "b1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  auto* bn1 = addNode(model, "BatchNormalization", {"c1", "scale1", "shift1", "mean1", "var1"}, {"n1"}, "bn1");
  auto* epsilon = bn1->add_attribute();
  epsilon->set_name("epsilon");
  epsilon->set_type(onnx::AttributeProto::FLOAT);
  epsilon->set_f(1e-3f);
  if (variant == Variant::TrainingMode)
    setInt(bn1, "training_mode", 1);
  addNode(model, "Relu", {"n1"}, {"r1"}, "relu1");
  addNode(model, "Conv", {"r1", "w2"}, {"c2"}, "conv2");
  addNode(model, "BatchNormalization", {"c2", "scale2", "shift2", "mean2", "var2"}, {"y"}, "bn2");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 5, 6, 6});
  if (variant == Variant::ConvOutputAlsoRead)
    setTensorType(model.mutable_graph()->add_output(), "c1", onnx::TensorProto::FLOAT, {2, 4, 6, 6});
  return specialize(importOnnx(save(model, dir / "conv_bn.onnx")), SpecializeOptions{});
}

constexpr SpecializeOptions kFolding{.foldParameters = true};

TEST(BatchNormFoldingTest, ConvolutionsTakeTheirBatchNormsAndComputeTheSame) {
  testing::TempDir dir;
  const Graph graph = convBatchNormModel(dir, Variant::Folds);
  int folded = 0;
  const Graph rewritten = specialize(foldBatchNormIntoConv(graph, &folded), kFolding);
  EXPECT_EQ(folded, 2);
  EXPECT_EQ(countOps(rewritten, "BatchNormalization"), 0);
  // The folding arithmetic ran when the plan was specialised: only the Convs and the Relu remain.
  EXPECT_EQ(rewritten.nodes.size(), 3U);
  EXPECT_EQ(countOps(rewritten, "Conv"), 2);

  const Tensor x = testing::randomTensor({2, 3, 6, 6}, 21, 1.0f);
  const Tensor want = forwardOutput(graph, x);
  const Tensor got = forwardOutput(rewritten, x);
  ASSERT_EQ(got.shape(), want.shape());
  double scale = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, static_cast<double>(std::abs(want.data<float>()[i])));
  ASSERT_GT(scale, 0.5);
  for (std::int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5 * scale) << "element " << i;

  // The Relu between the pairs now follows a Conv, and fuses into it (Note [Fused ReLU]).
  int fusedRelus = 0;
  const Graph fusedGraph = specialize(fuseRelu(rewritten, &fusedRelus), kFolding);
  EXPECT_EQ(fusedRelus, 1);
  const Tensor fusedOut = forwardOutput(fusedGraph, x);
  for (std::int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(fusedOut.data<float>()[i], got.data<float>()[i]) << "element " << i;
}

TEST(BatchNormFoldingTest, PairsThatCannotFoldStay) {
  testing::TempDir dir;
  for (const Variant variant : {Variant::TrainingMode, Variant::ConvOutputAlsoRead, Variant::StatisticsFromInput}) {
    SCOPED_TRACE(static_cast<int>(variant));
    const Graph graph = convBatchNormModel(dir, variant);
    int folded = 0;
    const Graph rewritten = specialize(foldBatchNormIntoConv(graph, &folded), kFolding);
    EXPECT_EQ(folded, 1);  // the second pair only
    EXPECT_EQ(countOps(rewritten, "BatchNormalization"), 1);
    const Node& kept = rewritten.nodes[static_cast<std::size_t>(
        rewritten.values[static_cast<std::size_t>(rewritten.findValue("n1"))].producer)];
    EXPECT_EQ(kept.name, "bn1");
  }
}

}  // namespace
}  // namespace strata
