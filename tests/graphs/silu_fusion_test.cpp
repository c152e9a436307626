#include "strata/graphs/silu_fusion.h"

#include <gtest/gtest.h>

#include <string>

#include "graphs/graph_test_helpers.h"
#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

using testing::countOps;
using testing::forwardOutput;

const Shape kInput{4, 8};

enum class Spelling {
  PyTorch,          // Mul(h, Sigmoid(h)), as torch.onnx writes nn.SiLU()
  Swapped,          // Mul(Sigmoid(h), h)
  Gate,             // Mul(x2, Sigmoid(h)): a squeeze-excitation gate scales another tensor, not a SiLU
  SigmoidReadTwice  // the Sigmoid's output is also a graph output: the pair must stay
};

// x [4, 8] -> Gemm(w [6, 8], transB) -> h -> SiLU spelled out (or a gate) -> Gemm(w2 [3, 6], transB) -> y [4, 3].
onnx::ModelProto siluModel(Spelling spelling) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 8});
  addInitializer(model, "w", {6, 8}, randomValues(48, 51, 0.7f));
  addInitializer(model, "w1", {6, 8}, randomValues(48, 52, 0.7f));
  addInitializer(model, "w2", {3, 6}, randomValues(18, 53, 0.7f));
  setInt(addNode(model, "Gemm", {"x", "w"}, {"h"}, "fc1"), "transB", 1);
  addNode(model, "Sigmoid", {"h"}, {"s"}, "silu/sigmoid");
  if (spelling == Spelling::Gate) {
    setInt(addNode(model, "Gemm", {"x", "w1"}, {"other"}, "fc_other"), "transB", 1);
    addNode(model, "Mul", {"other", "s"}, {"g"}, "gate");
  } else {
    addNode(model, "Mul",
            spelling == Spelling::Swapped ? std::vector<std::string>{"s", "h"} : std::vector<std::string>{"h", "s"},
            {"g"}, "silu/mul");
  }
  setInt(addNode(model, "Gemm", {"g", "w2"}, {"y"}, "fc2"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 3});
  if (spelling == Spelling::SigmoidReadTwice)
    setTensorType(model.mutable_graph()->add_output(), "s", onnx::TensorProto::FLOAT, {-1, 6});
  return model;
}

Graph specialised(const Graph& graph) {
  return specialize(graph,
                    SpecializeOptions{.inputMetas = {TensorMeta{DType::Float32, kInput}}, .foldParameters = true});
}

TEST(SiluFusionTest, BothOperandOrdersBecomeOneSiluWithTheSameOutputs) {
  testing::TempDir dir;
  const Tensor x = testing::randomTensor(kInput, 54, 2.0f);
  for (const Spelling spelling : {Spelling::PyTorch, Spelling::Swapped}) {
    const Graph model = specialised(importOnnx(testing::save(siluModel(spelling), dir / "silu.onnx")));
    int fused = 0;
    const Graph rewritten = specialised(fuseSilu(model, &fused));
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(countOps(rewritten, "Silu"), 1);
    EXPECT_EQ(countOps(rewritten, "Sigmoid"), 0);
    EXPECT_EQ(countOps(rewritten, "Mul"), 0);
    const int g = model.findValue("g");
    const int producer = rewritten.values[static_cast<std::size_t>(g)].producer;
    ASSERT_NE(producer, kNoValue);
    EXPECT_EQ(rewritten.nodes[static_cast<std::size_t>(producer)].opType, "Silu");
    // x * sigmoid(x) in the same float32 arithmetic as the Mul of the Sigmoid's output: equal to the bit.
    const Tensor want = forwardOutput(model, x);
    const Tensor got = forwardOutput(rewritten, x);
    for (std::int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  }
}

TEST(SiluFusionTest, GatesAndSigmoidsReadElsewhereStay) {
  testing::TempDir dir;
  for (const Spelling spelling : {Spelling::Gate, Spelling::SigmoidReadTwice}) {
    const Graph model = specialised(importOnnx(testing::save(siluModel(spelling), dir / "not_silu.onnx")));
    int fused = -1;
    const Graph rewritten = fuseSilu(model, &fused);
    EXPECT_EQ(fused, 0) << static_cast<int>(spelling);
    EXPECT_EQ(countOps(rewritten, "Silu"), 0) << static_cast<int>(spelling);
    EXPECT_EQ(rewritten.nodes.size(), model.nodes.size()) << static_cast<int>(spelling);
  }
}

// The CPU training plan fuses it: its graph runs Silu and SiluGrad, its loss is the unfused forward's, and its
// evaluation plan gives the unfused outputs.
TEST(SiluFusionTest, TheTrainingPlanTrainsThroughOneSilu) {
  testing::TempDir dir;
  const std::filesystem::path file = testing::save(siluModel(Spelling::PyTorch), dir / "silu.onnx");
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, kInput}};
  options.loss = LossKind::Mse;
  TrainingPlan plan(importOnnx(file), options);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "Silu"), 1);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "SiluGrad"), 1);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "Sigmoid"), 0);

  const Tensor x = testing::randomTensor(kInput, 55, 2.0f);
  const Tensor target = testing::randomTensor({kInput[0], 3}, 56, 1.0f);
  const Tensor y = forwardOutput(specialised(importOnnx(file)), x);
  // The evaluation plan fuses too, with the unfused forward's outputs to the bit (before the step changes weights).
  const Tensor evaluated = plan.evaluate({x}).at(0);
  for (std::int64_t i = 0; i < y.numel(); ++i)
    ASSERT_EQ(evaluated.data<float>()[i], y.data<float>()[i]) << i;
  const StepResult step = plan.step({x}, target);
  const double mse = testing::meanSquaredError(y, target);
  EXPECT_NEAR(*step.loss.data<float>(), mse, 1e-5 * mse);
}

}  // namespace
}  // namespace strata
