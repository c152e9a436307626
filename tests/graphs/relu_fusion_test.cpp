#include "strata/graphs/relu_fusion.h"

#include <gtest/gtest.h>

#include <string>

#include "graphs/graph_test_helpers.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

using testing::countOps;
using testing::forwardOutput;

enum class Readers { ReluOnly, ReluAndAdd, ReluAndGraphOutput };

// x [2, 3, 4, 4] -> BatchNormalization (or Add of a [3, 1, 1] bias, or a 1x1 Conv) -> n -> Relu -> y, with n also read
// by an Add or listed as an output.
Graph firstThenRelu(const testing::TempDir& dir, const std::string& first, Readers readers) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  addInitializer(model, "scale", {3}, {1.0f, 0.5f, 2.0f});
  addInitializer(model, "shift", {3}, {0.1f, -0.2f, 0.0f});
  addInitializer(model, "mean", {3}, {0.0f, 0.0f, 0.0f});
  addInitializer(model, "var", {3}, {1.0f, 1.0f, 1.0f});
  addInitializer(model, "bias", {3, 1, 1}, {0.1f, -0.2f, 0.3f});
  addInitializer(model, "w", {3, 3, 1, 1}, {1.0f, -0.5f, 0.2f, 0.3f, 1.0f, -1.0f, 0.0f, 0.5f, 2.0f});
  if (first == "Add") {
    addNode(model, "Add", {"x", "bias"}, {"n"}, "add_bias");
  } else if (first == "Conv") {
    addNode(model, "Conv", {"x", "w"}, {"n"}, "conv");
  } else {
    setInt(addNode(model, "BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"n"}, "bn"), "training_mode",
           1);
  }
  addNode(model, "Relu", {"n"}, {readers == Readers::ReluAndAdd ? "r" : "y"}, "relu");
  if (readers == Readers::ReluAndAdd)
    addNode(model, "Add", {"n", "r"}, {"y"}, "add");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  if (readers == Readers::ReluAndGraphOutput)
    setTensorType(model.mutable_graph()->add_output(), "n", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  return specialize(importOnnx(save(model, dir / "bn_relu.onnx")), SpecializeOptions{.training = true});
}

TEST(ReluFusionTest, ANormOrAnAddReadOnlyByAReluBecomesOneNode) {
  testing::TempDir dir;
  for (const std::string first : {"BatchNormalization", "Add", "Conv"}) {
    SCOPED_TRACE(first);
    const Graph graph = firstThenRelu(dir, first, Readers::ReluOnly);
    int fused = 0;
    const Graph rewritten = fuseRelu(graph, &fused);
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(countOps(rewritten, "Relu"), 0);
    ASSERT_EQ(countOps(rewritten, first), 1);
    const auto y = static_cast<std::size_t>(graph.findValue("y"));
    const int producer = rewritten.values[y].producer;  // it writes the Relu's value, read as before
    ASSERT_NE(producer, kNoValue);
    EXPECT_EQ(rewritten.nodes[static_cast<std::size_t>(producer)].opType, first);
    EXPECT_EQ(rewritten.nodes[static_cast<std::size_t>(producer)].attrs.getInt("fused_relu", 0), 1);
  }
}

TEST(ReluFusionTest, AFirstNodeWithOtherReadersStays) {
  testing::TempDir dir;
  for (const std::string first : {"BatchNormalization", "Add", "Conv"}) {
    for (const Readers readers : {Readers::ReluAndAdd, Readers::ReluAndGraphOutput}) {
      SCOPED_TRACE(::testing::Message() << first << " readers " << static_cast<int>(readers));
      const Graph graph = firstThenRelu(dir, first, readers);
      int fused = -1;
      const Graph rewritten = fuseRelu(graph, &fused);
      EXPECT_EQ(fused, 0);
      EXPECT_EQ(rewritten.nodes.size(), graph.nodes.size());
      EXPECT_EQ(countOps(rewritten, "Relu"), 1);
    }
  }
}

// x -> Conv -> c -> Clip(0, 6) -> y, the bounds constants (MobileNetV2's ReLU6) or, with `boundFromInput`, the
// upper one a graph input.
Graph convThenClip(const testing::TempDir& dir, bool boundFromInput, float high = 6.0f) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  if (boundFromInput)
    setTensorType(model.mutable_graph()->add_input(), "six", onnx::TensorProto::FLOAT, {});
  else
    addInitializer(model, "six", {}, {high});
  addInitializer(model, "zero", {}, {0.0f});
  addInitializer(model, "w", {3, 3, 1, 1}, {1.0f, -0.5f, 0.2f, 0.3f, 1.0f, -1.0f, 0.0f, 0.5f, 2.0f});
  addNode(model, "Conv", {"x", "w"}, {"c"}, "conv");
  addNode(model, "Clip", {"c", "zero", "six"}, {"y"}, "relu6");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  return specialize(importOnnx(save(model, dir / "conv_clip.onnx")), SpecializeOptions{});
}

TEST(ReluFusionTest, AnInferencePlanClipsInTheConvolution) {
  testing::TempDir dir;
  const Graph graph = convThenClip(dir, false);
  int fused = 0;
  const Graph rewritten = fuseClipIntoConv(graph, &fused);
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(countOps(rewritten, "Clip"), 0);
  const Node& conv = rewritten.nodes.at(0);
  EXPECT_EQ(conv.attrs.getInt("fused_clip", 0), 1);
  EXPECT_EQ(conv.attrs.getFloat("clip_min", -1.0f), 0.0f);
  EXPECT_EQ(conv.attrs.getFloat("clip_max", -1.0f), 6.0f);
  EXPECT_EQ(conv.outputs[0], graph.findValue("y"));
  // Large inputs, so that both bounds clip somewhere: the same values as the two nodes.
  const Tensor x = testing::randomTensor({2, 3, 4, 4}, 81, 12.0f);
  const Tensor want = forwardOutput(graph, x);
  const Tensor got = forwardOutput(specialize(rewritten, SpecializeOptions{}), x);
  for (std::int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  // fuseRelu (training plans too) leaves the Clip alone.
  int relus = -1;
  EXPECT_EQ(countOps(fuseRelu(graph, &relus), "Clip"), 1);
  EXPECT_EQ(relus, 0);
}

TEST(ReluFusionTest, AClipWithAComputedBoundStays) {
  testing::TempDir dir;
  int fused = -1;
  const Graph rewritten = fuseClipIntoConv(convThenClip(dir, true), &fused);
  EXPECT_EQ(fused, 0);
  EXPECT_EQ(countOps(rewritten, "Clip"), 1);
}

TEST(ReluFusionTest, AClipWithMinAboveMaxStays) {
  testing::TempDir dir;
  int fused = -1;
  const Graph rewritten = fuseClipIntoConv(convThenClip(dir, false, -1.0f), &fused);
  EXPECT_EQ(fused, 0);
  EXPECT_EQ(countOps(rewritten, "Clip"), 1);
}

// The training plan fuses on the CPU, and a step is the unfused plan's to the bit: loss, every gradient, the
// running statistics, and the evaluation forward (batch norm in training and in inference mode).
TEST(ReluFusionTest, TheTrainingPlanFusesWithTheUnfusedResults) {
  testing::TempDir dir;
  for (const std::int64_t training : {1, 0}) {
    SCOPED_TRACE(::testing::Message() << "training_mode " << training);
    onnx::ModelProto model = testing::smallCnnModel();
    for (onnx::NodeProto& node : *model.mutable_graph()->mutable_node()) {
      if (node.op_type() == "BatchNormalization")
        testing::setInt(&node, "training_mode", training);
    }
    // A Relu after the residual Add (as in a ResNet block), moved up to its place in the node order.
    auto* nodes = model.mutable_graph()->mutable_node();
    int residual = 0;
    while (nodes->Get(residual).name() != "residual")
      ++residual;
    nodes->Mutable(residual)->set_output(0, "sum_pre");
    testing::addNode(model, "Relu", {"sum_pre"}, {"sum"}, "residual_relu");
    for (int n = nodes->size() - 1; n > residual + 1; --n)
      nodes->SwapElements(n, n - 1);
    const std::filesystem::path file = testing::save(model, dir / "cnn.onnx");
    const Tensor x = testing::randomTensor({4, 3, 8, 8}, 71, 1.0f);
    Tensor labels = Tensor::empty(DType::Int64, {4});
    for (std::int64_t i = 0; i < 4; ++i)
      labels.data<std::int64_t>()[i] = (i * 3) % 10;
    TrainingPlanOptions options;
    options.inputMetas = {TensorMeta{DType::Float32, {4, 3, 8, 8}}};
    TrainingPlan fusedPlan(importOnnx(file), options);
    options.fuseRelu = false;
    TrainingPlan plainPlan(importOnnx(file), options);
    // bn1 -> relu1, conv2 -> relu2 and residual -> residual_relu fuse. The Add and the Conv keep their ReluGrads.
    EXPECT_EQ(countOps(fusedPlan.trainingGraph().graph, "Relu"), countOps(plainPlan.trainingGraph().graph, "Relu") - 3);
    EXPECT_EQ(countOps(fusedPlan.trainingGraph().graph, "ReluGrad"),
              countOps(plainPlan.trainingGraph().graph, "ReluGrad") - 1);

    const StepResult fusedStep = fusedPlan.step({x}, labels);
    const StepResult plainStep = plainPlan.step({x}, labels);
    EXPECT_EQ(*fusedStep.loss.data<float>(), *plainStep.loss.data<float>());
    ASSERT_EQ(fusedPlan.parameters().size(), plainPlan.parameters().size());
    for (std::size_t p = 0; p < plainPlan.parameters().size(); ++p) {
      const Tensor got = fusedPlan.parameters().gradient(p);
      const Tensor want = plainPlan.parameters().gradient(p);
      for (std::int64_t i = 0; i < want.numel(); ++i)
        ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << fusedPlan.parameters().info(p).name << " " << i;
    }
    for (std::size_t b = 0; b < plainPlan.buffers().size(); ++b) {
      const Tensor& got = fusedPlan.buffers()[b].second;
      const Tensor& want = plainPlan.buffers()[b].second;
      for (std::int64_t i = 0; i < want.numel(); ++i)
        ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << plainPlan.buffers()[b].first << " " << i;
    }
    const Tensor fusedEval = fusedPlan.evaluate({x}).at(0);
    const Tensor plainEval = plainPlan.evaluate({x}).at(0);
    for (std::int64_t i = 0; i < plainEval.numel(); ++i)
      ASSERT_EQ(fusedEval.data<float>()[i], plainEval.data<float>()[i]) << i;
  }
}

}  // namespace
}  // namespace strata
