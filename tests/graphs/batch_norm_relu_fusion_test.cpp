#include "strata/graphs/batch_norm_relu_fusion.h"

#include <gtest/gtest.h>

#include <string>

#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

int countOps(const Graph& graph, const std::string& type) {
  int count = 0;
  for (const Node& node : graph.nodes)
    count += node.opType == type ? 1 : 0;
  return count;
}

enum class Readers { ReluOnly, ReluAndAdd, ReluAndGraphOutput };

// x [2, 3, 4, 4] -> BatchNormalization -> n -> Relu -> y, with n also read by an Add or listed as an output.
Graph normThenRelu(const testing::TempDir& dir, Readers readers) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  addInitializer(model, "scale", {3}, {1.0f, 0.5f, 2.0f});
  addInitializer(model, "shift", {3}, {0.1f, -0.2f, 0.0f});
  addInitializer(model, "mean", {3}, {0.0f, 0.0f, 0.0f});
  addInitializer(model, "var", {3}, {1.0f, 1.0f, 1.0f});
  setInt(addNode(model, "BatchNormalization", {"x", "scale", "shift", "mean", "var"}, {"n"}, "bn"), "training_mode", 1);
  addNode(model, "Relu", {"n"}, {readers == Readers::ReluAndAdd ? "r" : "y"}, "relu");
  if (readers == Readers::ReluAndAdd)
    addNode(model, "Add", {"n", "r"}, {"y"}, "add");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  if (readers == Readers::ReluAndGraphOutput)
    setTensorType(model.mutable_graph()->add_output(), "n", onnx::TensorProto::FLOAT, {2, 3, 4, 4});
  return specialize(importOnnx(save(model, dir / "bn_relu.onnx")), SpecializeOptions{.training = true});
}

TEST(BatchNormReluFusionTest, ANormReadOnlyByAReluBecomesOneNode) {
  testing::TempDir dir;
  const Graph graph = normThenRelu(dir, Readers::ReluOnly);
  int fused = 0;
  const Graph rewritten = fuseBatchNormRelu(graph, &fused);
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(countOps(rewritten, "Relu"), 0);
  ASSERT_EQ(countOps(rewritten, "BatchNormalization"), 1);
  const Node& norm = rewritten.nodes.front();
  EXPECT_EQ(norm.attrs.getInt("fused_relu", 0), 1);
  EXPECT_EQ(norm.outputs.at(0), graph.findValue("y"));  // it writes the Relu's value, read as before
  EXPECT_EQ(rewritten.values[static_cast<std::size_t>(graph.findValue("y"))].producer, 0);
}

TEST(BatchNormReluFusionTest, ANormWithOtherReadersStays) {
  testing::TempDir dir;
  for (const Readers readers : {Readers::ReluAndAdd, Readers::ReluAndGraphOutput}) {
    const Graph graph = normThenRelu(dir, readers);
    int fused = -1;
    const Graph rewritten = fuseBatchNormRelu(graph, &fused);
    EXPECT_EQ(fused, 0) << static_cast<int>(readers);
    EXPECT_EQ(rewritten.nodes.size(), graph.nodes.size()) << static_cast<int>(readers);
    EXPECT_EQ(countOps(rewritten, "Relu"), 1) << static_cast<int>(readers);
  }
}

// The training plan fuses on the CPU, and a step is the unfused plan's to the bit: loss, every gradient, the
// running statistics, and the evaluation forward (batch norm in training and in inference mode).
TEST(BatchNormReluFusionTest, TheTrainingPlanFusesWithTheUnfusedResults) {
  testing::TempDir dir;
  for (const std::int64_t training : {1, 0}) {
    SCOPED_TRACE(::testing::Message() << "training_mode " << training);
    onnx::ModelProto model = testing::smallCnnModel();
    for (onnx::NodeProto& node : *model.mutable_graph()->mutable_node()) {
      if (node.op_type() == "BatchNormalization")
        testing::setInt(&node, "training_mode", training);
    }
    const std::filesystem::path file = testing::save(model, dir / "cnn.onnx");
    const Tensor x = testing::randomTensor({4, 3, 8, 8}, 71, 1.0f);
    Tensor labels = Tensor::empty(DType::Int64, {4});
    for (std::int64_t i = 0; i < 4; ++i)
      labels.data<std::int64_t>()[i] = (i * 3) % 10;
    TrainingPlanOptions options;
    options.inputMetas = {TensorMeta{DType::Float32, {4, 3, 8, 8}}};
    TrainingPlan fusedPlan(importOnnx(file), options);
    options.fuseBatchNormRelu = false;
    TrainingPlan plainPlan(importOnnx(file), options);
    EXPECT_EQ(countOps(fusedPlan.trainingGraph().graph, "Relu"), countOps(plainPlan.trainingGraph().graph, "Relu") - 1);
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
