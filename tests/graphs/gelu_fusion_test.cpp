#include "strata/graphs/gelu_fusion.h"

#include <gtest/gtest.h>

#include <cmath>
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

void addScalarConstant(onnx::ModelProto& model, const std::string& name, float value) {
  onnx::NodeProto* node = testing::addNode(model, "Constant", {}, {name}, name);
  onnx::AttributeProto* attr = node->add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  attr->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  attr->mutable_t()->add_float_data(value);
}

enum class Spelling {
  PyTorch,        // Mul(Mul(h, Add(Erf(Div(h, sqrt 2)), 1)), 0.5), as torch.onnx writes nn.GELU()
  Swapped,        // Mul(0.5, Mul(Add(1, Erf(Mul(1 / sqrt 2, h))), h)): every commutative operand the other way
  WrongHalf,      // 0.6 instead of 0.5: not a GELU
  ErfReadTwice,   // the Erf's output is also a graph output: the chain must stay
  TrainableHalf,  // the 0.5 is an initializer (a trainable parameter), not a constant
};

// x [4, 8] -> Gemm(w [6, 8], transB) -> GELU spelled out -> Gemm(w2 [3, 6], transB) -> y [4, 3].
onnx::ModelProto geluModel(Spelling spelling) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 8});
  addInitializer(model, "w", {6, 8}, randomValues(48, 41, 0.7f));
  addInitializer(model, "w2", {3, 6}, randomValues(18, 42, 0.7f));
  setInt(addNode(model, "Gemm", {"x", "w"}, {"h"}, "fc1"), "transB", 1);
  const bool swapped = spelling == Spelling::Swapped;
  if (swapped) {
    addScalarConstant(model, "inv_sqrt2", static_cast<float>(M_SQRT1_2));
    addNode(model, "Mul", {"inv_sqrt2", "h"}, {"scaled"}, "gelu/scale");
  } else {
    addScalarConstant(model, "sqrt2", static_cast<float>(M_SQRT2));
    addNode(model, "Div", {"h", "sqrt2"}, {"scaled"}, "gelu/scale");
  }
  addNode(model, "Erf", {"scaled"}, {"erf"}, "gelu/erf");
  addScalarConstant(model, "one", 1.0f);
  addNode(model, "Add", swapped ? std::vector<std::string>{"one", "erf"} : std::vector<std::string>{"erf", "one"},
          {"plus_one"}, "gelu/add");
  addNode(model, "Mul", swapped ? std::vector<std::string>{"plus_one", "h"} : std::vector<std::string>{"h", "plus_one"},
          {"times"}, "gelu/mul");
  if (spelling == Spelling::TrainableHalf) {
    addInitializer(model, "half", {}, {0.5f});
  } else {
    addScalarConstant(model, "half", spelling == Spelling::WrongHalf ? 0.6f : 0.5f);
  }
  addNode(model, "Mul", swapped ? std::vector<std::string>{"half", "times"} : std::vector<std::string>{"times", "half"},
          {"g"}, "gelu/half");
  setInt(addNode(model, "Gemm", {"g", "w2"}, {"y"}, "fc2"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 3});
  if (spelling == Spelling::ErfReadTwice) {
    setTensorType(model.mutable_graph()->add_output(), "erf", onnx::TensorProto::FLOAT, {-1, 6});
  }
  return model;
}

Graph specialised(const Graph& graph) {
  return specialize(graph,
                    SpecializeOptions{.inputMetas = {TensorMeta{DType::Float32, kInput}}, .foldParameters = true});
}

TEST(GeluFusionTest, BothSpellingsBecomeOneGeluWithTheSameOutputs) {
  testing::TempDir dir;
  const Tensor x = testing::randomTensor(kInput, 43, 2.0f);
  for (const Spelling spelling : {Spelling::PyTorch, Spelling::Swapped}) {
    const Graph model = specialised(importOnnx(testing::save(geluModel(spelling), dir / "gelu.onnx")));
    int fused = 0;
    const Graph rewritten = specialised(fuseGelu(model, &fused));
    EXPECT_EQ(fused, 1);
    EXPECT_EQ(countOps(rewritten, "Gelu"), 1);
    for (const char* op : {"Erf", "Div", "Add", "Mul"})
      EXPECT_EQ(countOps(rewritten, op), 0) << op;
    // The Gelu writes the chain's output value, read by fc2 as before.
    const int g = model.findValue("g");
    ASSERT_NE(rewritten.values[static_cast<std::size_t>(g)].producer, kNoValue);
    EXPECT_EQ(rewritten.nodes[static_cast<std::size_t>(rewritten.values[static_cast<std::size_t>(g)].producer)].opType,
              "Gelu");
    const Tensor want = forwardOutput(model, x);
    const Tensor got = forwardOutput(rewritten, x);
    for (std::int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f * (1.0f + std::abs(want.data<float>()[i]))) << i;
  }
}

TEST(GeluFusionTest, ChainsThatAreNotExactlyGeluStay) {
  testing::TempDir dir;
  for (const Spelling spelling : {Spelling::WrongHalf, Spelling::ErfReadTwice, Spelling::TrainableHalf}) {
    const Graph model = specialised(importOnnx(testing::save(geluModel(spelling), dir / "not_gelu.onnx")));
    int fused = -1;
    const Graph rewritten = fuseGelu(model, &fused);
    EXPECT_EQ(fused, 0) << static_cast<int>(spelling);
    EXPECT_EQ(countOps(rewritten, "Gelu"), 0) << static_cast<int>(spelling);
    EXPECT_EQ(rewritten.nodes.size(), model.nodes.size()) << static_cast<int>(spelling);
  }
}

// Strata's downgrade of Gelu-20 (Note [Opsets above 17]) spells it with CastLike constants: fused all the same.
TEST(GeluFusionTest, TheDowngradedGelu20IsFusedBack) {
  using namespace testing;
  testing::TempDir dir;
  onnx::ModelProto model = emptyModel(20);
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 8});
  addNode(model, "Gelu", {"x"}, {"y"}, "gelu");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 8});
  const Graph imported = specialised(importOnnx(testing::save(model, dir / "gelu20.onnx")));
  EXPECT_EQ(countOps(imported, "Gelu"), 0);  // the importer spelled it in opset-17 ops
  int fused = 0;
  const Graph rewritten = specialised(fuseGelu(imported, &fused));
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(countOps(rewritten, "Erf"), 0);
  const Tensor x = testing::randomTensor(kInput, 46, 2.0f);
  const Tensor want = forwardOutput(imported, x);
  const Tensor got = forwardOutput(rewritten, x);
  for (std::int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f * (1.0f + std::abs(want.data<float>()[i]))) << i;
}

// The training plan fuses it: its graph runs Gelu and GeluGrad, and its loss is the unfused forward's.
TEST(GeluFusionTest, TheTrainingPlanTrainsThroughOneGelu) {
  testing::TempDir dir;
  const std::filesystem::path file = testing::save(geluModel(Spelling::PyTorch), dir / "gelu.onnx");
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, kInput}};
  options.loss = LossKind::Mse;
  TrainingPlan plan(importOnnx(file), options);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "Gelu"), 1);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "GeluGrad"), 1);
  EXPECT_EQ(countOps(plan.trainingGraph().graph, "Erf"), 0);

  const Tensor x = testing::randomTensor(kInput, 44, 2.0f);
  const Tensor target = testing::randomTensor({kInput[0], 3}, 45, 1.0f);
  const StepResult step = plan.step({x}, target);
  const Tensor y = forwardOutput(specialised(importOnnx(file)), x);
  const double mse = testing::meanSquaredError(y, target);
  EXPECT_NEAR(*step.loss.data<float>(), mse, 1e-5 * mse);
}

}  // namespace
}  // namespace strata
