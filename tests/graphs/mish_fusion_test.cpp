#include "strata/graphs/mish_fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

const Shape kMishInput{4, 8};

enum class MishSpelling {
  Downgraded,        // Mul(h, Tanh(Softplus(h))), as Strata's opset downgrade writes Mish-18
  Swapped,           // Mul(Tanh(Softplus(h)), h)
  OtherOperand,      // Mul(other, Tanh(Softplus(h))): not a Mish
  SoftplusReadTwice  // the Softplus output is also a graph output: the chain must stay
};

// x [4, 8] -> Gemm(w [6, 8], transB) -> h -> Mish spelled out (or not) -> Gemm(w2 [3, 6], transB) -> y [4, 3].
onnx::ModelProto mishModel(MishSpelling spelling) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 8});
  addInitializer(model, "w", {6, 8}, randomValues(48, 61, 0.7f));
  addInitializer(model, "w1", {6, 8}, randomValues(48, 62, 0.7f));
  addInitializer(model, "w2", {3, 6}, randomValues(18, 63, 0.7f));
  setInt(addNode(model, "Gemm", {"x", "w"}, {"h"}, "fc1"), "transB", 1);
  addNode(model, "Softplus", {"h"}, {"sp"}, "mish/softplus");
  addNode(model, "Tanh", {"sp"}, {"t"}, "mish/tanh");
  if (spelling == MishSpelling::OtherOperand) {
    setInt(addNode(model, "Gemm", {"x", "w1"}, {"other"}, "fc_other"), "transB", 1);
    addNode(model, "Mul", {"other", "t"}, {"g"}, "scale");
  } else {
    addNode(model, "Mul",
            spelling == MishSpelling::Swapped ? std::vector<std::string>{"t", "h"} : std::vector<std::string>{"h", "t"},
            {"g"}, "mish/mul");
  }
  setInt(addNode(model, "Gemm", {"g", "w2"}, {"y"}, "fc2"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 3});
  if (spelling == MishSpelling::SoftplusReadTwice)
    setTensorType(model.mutable_graph()->add_output(), "sp", onnx::TensorProto::FLOAT, {-1, 6});
  return model;
}

Graph specialisedForMish(const Graph& graph) {
  return specialize(graph,
                    SpecializeOptions{.inputMetas = {TensorMeta{DType::Float32, kMishInput}}, .foldParameters = true});
}

void expectCloseToMish(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel());
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const float w = want.data<float>()[i];
    ASSERT_NEAR(got.data<float>()[i], w, 2e-6F * std::max(1.0F, std::fabs(w))) << i;
  }
}

TEST(MishFusionTest, BothOperandOrdersBecomeOneMishWithTheSameOutputs) {
  testing::TempDir dir;
  const Tensor x = testing::randomTensor(kMishInput, 64, 3.0f);
  for (const MishSpelling spelling : {MishSpelling::Downgraded, MishSpelling::Swapped}) {
    const Graph model = specialisedForMish(importOnnx(testing::save(mishModel(spelling), dir / "mish.onnx")));
    int fused = 0;
    const Graph rewritten = specialisedForMish(fuseMish(model, &fused));
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(countOps(rewritten, "Mish"), 1);
    EXPECT_EQ(countOps(rewritten, "Softplus"), 0);
    EXPECT_EQ(countOps(rewritten, "Tanh"), 0);
    EXPECT_EQ(countOps(rewritten, "Mul"), 0);
    const int g = model.findValue("g");
    const int producer = rewritten.values[static_cast<std::size_t>(g)].producer;
    ASSERT_NE(producer, kNoValue);
    EXPECT_EQ(rewritten.nodes[static_cast<std::size_t>(producer)].opType, "Mish");
    // Mish's kernel takes tanh(softplus(x)) in one exponential (tanhSoftplusFloat), the three kernels in two
    // approximations: each within 3e-7 of the exact value, so the outputs after the last Gemm agree to about 1e-6.
    expectCloseToMish(forwardOutput(rewritten, x), forwardOutput(model, x));
  }
}

TEST(MishFusionTest, OtherProductsAndSharedIntermediatesStay) {
  testing::TempDir dir;
  for (const MishSpelling spelling : {MishSpelling::OtherOperand, MishSpelling::SoftplusReadTwice}) {
    const Graph model = specialisedForMish(importOnnx(testing::save(mishModel(spelling), dir / "not_mish.onnx")));
    int fused = -1;
    const Graph rewritten = fuseMish(model, &fused);
    EXPECT_EQ(fused, 0) << static_cast<int>(spelling);
    EXPECT_EQ(countOps(rewritten, "Mish"), 0) << static_cast<int>(spelling);
    EXPECT_EQ(rewritten.nodes.size(), model.nodes.size()) << static_cast<int>(spelling);
  }
}

// The CPU training plan fuses it: its graph runs Mish and MishGrad, its loss is the unfused forward's, and its
// evaluation plan gives the unfused outputs.
TEST(MishFusionTest, TheTrainingPlanTrainsThroughOneMish) {
  testing::TempDir dir;
  const std::filesystem::path file = testing::save(mishModel(MishSpelling::Downgraded), dir / "mish.onnx");
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, kMishInput}};
  options.loss = LossKind::Mse;
  TrainingPlan plan(importOnnx(file), options);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "Mish"), 1);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "MishGrad"), 1);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "Softplus"), 0);

  const Tensor x = testing::randomTensor(kMishInput, 65, 3.0f);
  const Tensor target = testing::randomTensor({kMishInput[0], 3}, 66, 1.0f);
  const Tensor y = forwardOutput(specialisedForMish(importOnnx(file)), x);
  expectCloseToMish(plan.evaluate({x}).at(0), y);
  const StepResult step = plan.step({x}, target);
  const double mse = testing::meanSquaredError(y, target);
  EXPECT_NEAR(*step.loss.data<float>(), mse, 1e-5 * mse);
}

}  // namespace
}  // namespace strata
