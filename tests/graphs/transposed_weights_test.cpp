#include "strata/graphs/transposed_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

const Shape kInput{4, 3, 5, 8};

// x [N, 3, 5, 8] -> MatMul(x, Transpose(w [6, 8])) -> Relu -> MatMul(., Transpose(w2 [8, 6])) -> ReduceMean over
// everything but N -> y [N, 1]: two Linear layers on rank-4 inputs as PyTorch exports them (ConvNeXt's MLP).
// With `pretransposed`, the same model with the weights stored transposed and no Transpose nodes.
onnx::ModelProto linearModel(bool pretransposed, bool transposeAlsoRead = false) {
  using namespace testing;
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3, 5, 8});
  const std::vector<float> w = randomValues(48, 21, 0.5f), w2 = randomValues(48, 22, 0.5f);
  auto transposed = [](const std::vector<float>& v, int rows, int cols) {
    std::vector<float> t(v.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c)
        t[static_cast<std::size_t>(c * rows + r)] = v[static_cast<std::size_t>(r * cols + c)];
    return t;
  };
  if (pretransposed) {
    addInitializer(model, "wt", {8, 6}, transposed(w, 6, 8));
    addInitializer(model, "w2t", {6, 8}, transposed(w2, 8, 6));
  } else {
    addInitializer(model, "w", {6, 8}, w);
    addInitializer(model, "w2", {8, 6}, w2);
    setInts(addNode(model, "Transpose", {"w"}, {"wt"}, "fc1_t"), "perm", {1, 0});
    setInts(addNode(model, "Transpose", {"w2"}, {"w2t"}, "fc2_t"), "perm", {1, 0});
  }
  addNode(model, "MatMul", {"x", "wt"}, {"h"}, "fc1");
  addNode(model, "Relu", {"h"}, {"r"}, "act");
  addNode(model, "MatMul", {"r", "w2t"}, {"o"}, "fc2");
  std::string last = "o";
  if (transposeAlsoRead) {  // the transposed weight feeds another node too: its Transpose must stay
    addNode(model, "ReduceSum", {"wt"}, {"wsum"}, "wsum");
    addNode(model, "Add", {"o", "wsum"}, {"o2"}, "plus_wsum");
    last = "o2";
  }
  auto* mean = addNode(model, "ReduceMean", {last}, {"m"}, "mean");
  setInts(mean, "axes", {1, 2, 3});
  addNode(model, "Flatten", {"m"}, {"y"}, "flatten");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 1});
  return model;
}

Graph load(const testing::TempDir& dir, const onnx::ModelProto& model, const std::string& name) {
  return importOnnx(testing::save(model, dir / (name + ".onnx")));
}

Graph specialised(const Graph& graph) {
  SpecializeOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, kInput}};
  options.training = true;
  return specialize(graph, options);
}

int countOps(const Graph& graph, const std::string& type) {
  int count = 0;
  for (const Node& node : graph.nodes)
    count += node.opType == type ? 1 : 0;
  return count;
}

TEST(TransposedWeightsTest, LinearLayersReadTheirWeightsThroughGemm) {
  testing::TempDir dir;
  const Graph model = specialised(load(dir, linearModel(false), "linear"));
  int rewritten = 0;
  const Graph folded = specialised(foldTransposedWeights(model, &rewritten));
  EXPECT_EQ(rewritten, 2);
  EXPECT_EQ(countOps(folded, "Transpose"), 0);
  EXPECT_EQ(countOps(folded, "MatMul"), 0);
  ASSERT_EQ(countOps(folded, "Gemm"), 2);
  for (const Node& node : folded.nodes) {
    if (node.opType != "Gemm")
      continue;
    EXPECT_EQ(node.attrs.getInt("transB", 0), 1) << node.name;
    const std::string& weight = folded.values[static_cast<std::size_t>(node.inputs[1])].name;
    EXPECT_TRUE(weight == "w" || weight == "w2") << weight;
  }
  // The MatMuls' outputs keep their ids and shapes.
  const int h = model.findValue("h");
  EXPECT_EQ(folded.values[static_cast<std::size_t>(h)].meta.shape, (Shape{4, 3, 5, 6}));
  EXPECT_NE(folded.values[static_cast<std::size_t>(h)].producer, kNoValue);
}

TEST(TransposedWeightsTest, ATransposeOthersReadStays) {
  testing::TempDir dir;
  const Graph model = specialised(load(dir, linearModel(false, true), "linear_read"));
  const Graph folded = specialised(foldTransposedWeights(model));
  EXPECT_EQ(countOps(folded, "Transpose"), 1);  // fc1_t feeds wsum; fc2_t is gone
  EXPECT_EQ(countOps(folded, "Gemm"), 2);
}

// The training plan folds them: its loss and gradients equal those of the same model stored pretransposed (whose
// gradients are those of the transposed weights).
TEST(TransposedWeightsTest, TrainsAsTheModelWithPretransposedWeights) {
  testing::TempDir dir;
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, kInput}};
  options.loss = LossKind::Mse;
  TrainingPlan folded(load(dir, linearModel(false), "linear"), options);
  TrainingPlan reference(load(dir, linearModel(true), "pretransposed"), options);
  int transposes = 0;
  for (const Node& node : folded.trainingGraph().graph.nodes)
    transposes += node.opType == "Transpose" ? 1 : 0;
  EXPECT_EQ(transposes, 0) << "the training graph still transposes a weight";

  const Tensor x = testing::randomTensor(kInput, 31, 1.0f);
  const Tensor target = testing::randomTensor({kInput[0], 1}, 32, 1.0f);
  const StepResult a = folded.step({x}, target);
  const StepResult b = reference.step({x}, target);
  EXPECT_NEAR(*a.loss.data<float>(), *b.loss.data<float>(), 1e-6 * std::abs(*b.loss.data<float>()));
  ASSERT_EQ(folded.parameters().size(), 2u);
  for (std::size_t p = 0; p < 2; ++p) {
    const Tensor g = folded.parameters().gradient(p);      // [N, K]
    const Tensor gt = reference.parameters().gradient(p);  // [K, N]
    const std::int64_t rows = g.dim(0), cols = g.dim(1);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const float want = gt.data<float>()[c * rows + r];
        ASSERT_NEAR(g.data<float>()[r * cols + c], want, 1e-5f * (1.0f + std::abs(want)))
            << folded.parameterNames()[p] << "[" << r << ", " << c << "]";
      }
    }
  }
}

}  // namespace
}  // namespace strata
