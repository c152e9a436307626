#include "strata/graphs/matmul_bias_fusion.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graphs/graph_test_helpers.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

using testing::countOps;
using testing::forwardOutput;

enum class Bias { Vector, RowOfOnes, ThroughIdentity, Matrix, GraphInput };

// x [2, 3, 4] @ W [4, 5] + bias, as PyTorch exports nn.Linear on a rank-3 input.
Graph linearOnRank3(const testing::TempDir& dir, Bias bias, bool productIsOutput = false) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
  std::vector<float> w(20);
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = 0.1f * static_cast<float>(i) - 0.9f;
  addInitializer(model, "w", {4, 5}, w);
  switch (bias) {
    case Bias::Vector:
      addInitializer(model, "b", {5}, {0.5f, -1.0f, 2.0f, 0.25f, -0.75f});
      break;
    case Bias::RowOfOnes:
      addInitializer(model, "b", {1, 1, 5}, {0.5f, -1.0f, 2.0f, 0.25f, -0.75f});
      break;
    case Bias::ThroughIdentity:  // as PyTorch's exporter shares equal initializers
      addInitializer(model, "shared", {5}, {0.5f, -1.0f, 2.0f, 0.25f, -0.75f});
      addNode(model, "Identity", {"shared"}, {"b"}, "share");
      break;
    case Bias::Matrix:  // a different bias per row: not a matmul bias
      addInitializer(model, "b", {3, 5}, std::vector<float>(15, 0.5f));
      break;
    case Bias::GraphInput:
      setTensorType(model.mutable_graph()->add_input(), "b", onnx::TensorProto::FLOAT, {5});
      break;
  }
  addNode(model, "MatMul", {"x", "w"}, {"p"}, "linear");
  addNode(model, "Add", {"b", "p"}, {"y"}, "bias");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 5});
  if (productIsOutput)
    setTensorType(model.mutable_graph()->add_output(), "p", onnx::TensorProto::FLOAT, {2, 3, 5});
  return specialize(importOnnx(save(model, dir / "linear.onnx")), SpecializeOptions{});
}

TEST(MatMulBiasFusionTest, ALinearOnRank3TakesItsBias) {
  testing::TempDir dir;
  for (const Bias bias : {Bias::Vector, Bias::RowOfOnes, Bias::ThroughIdentity}) {
    SCOPED_TRACE(static_cast<int>(bias));
    const Graph graph = linearOnRank3(dir, bias);
    int fused = 0;
    const Graph rewritten = fuseBiasIntoMatMul(graph, &fused);
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(countOps(rewritten, "Add"), 0);
    const Node& matmul = rewritten.nodes.at(bias == Bias::ThroughIdentity ? 1 : 0);
    ASSERT_EQ(matmul.opType, "MatMul");
    ASSERT_EQ(matmul.inputs.size(), 3u);
    EXPECT_EQ(matmul.outputs[0], graph.findValue("y"));
    const Tensor x = testing::randomTensor({2, 3, 4}, 91, 2.0f);
    const Tensor want = forwardOutput(graph, x);
    const Tensor got = forwardOutput(specialize(rewritten, SpecializeOptions{}), x);
    ASSERT_EQ(got.shape(), want.shape());
    for (std::int64_t i = 0; i < want.numel(); ++i)
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-6f) << i;
  }
}

TEST(MatMulBiasFusionTest, OtherAddsStay) {
  testing::TempDir dir;
  for (const auto& [bias, productIsOutput, what] :
       {std::tuple{Bias::Matrix, false, "a bias per row"}, std::tuple{Bias::GraphInput, false, "a computed bias"},
        std::tuple{Bias::Vector, true, "the product is a graph output"}}) {
    SCOPED_TRACE(what);
    int fused = -1;
    const Graph rewritten = fuseBiasIntoMatMul(linearOnRank3(dir, bias, productIsOutput), &fused);
    EXPECT_EQ(fused, 0);
    EXPECT_EQ(countOps(rewritten, "Add"), 1);
  }
}

}  // namespace
}  // namespace strata
