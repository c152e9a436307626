#include "strata/graphs/specialize.h"

#include <gtest/gtest.h>

#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

using testing::TempDir;

// x[N,2,3] -> Reshape(x, Concat(Gather(Shape(x), 0), [-1])) -> y[N,6]: the shape arithmetic folds away.
onnx::ModelProto flattenByShapeArithmetic() {
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 2, 3});
  testing::addNode(model, "Shape", {"x"}, {"shape"}, "shape");
  auto* zero = testing::addNode(model, "Constant", {}, {"zero"}, "zero");
  auto* zeroAttr = zero->add_attribute();
  zeroAttr->set_name("value");
  zeroAttr->set_type(onnx::AttributeProto::TENSOR);
  zeroAttr->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  zeroAttr->mutable_t()->add_int64_data(0);
  testing::addNode(model, "Gather", {"shape", "zero"}, {"batch"}, "gather");
  auto* axes = testing::addNode(model, "Constant", {}, {"axes"}, "axes");
  auto* axesAttr = axes->add_attribute();
  axesAttr->set_name("value");
  axesAttr->set_type(onnx::AttributeProto::TENSOR);
  axesAttr->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  axesAttr->mutable_t()->add_dims(1);
  axesAttr->mutable_t()->add_int64_data(0);
  testing::addNode(model, "Unsqueeze", {"batch", "axes"}, {"batch1"}, "unsqueeze");
  auto* rest = testing::addNode(model, "Constant", {}, {"rest"}, "rest");
  auto* restAttr = rest->add_attribute();
  restAttr->set_name("value");
  restAttr->set_type(onnx::AttributeProto::TENSOR);
  restAttr->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  restAttr->mutable_t()->add_dims(1);
  restAttr->mutable_t()->add_int64_data(-1);
  auto* concat = testing::addNode(model, "Concat", {"batch1", "rest"}, {"target"}, "concat");
  auto* axis = concat->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
  testing::addNode(model, "Reshape", {"x", "target"}, {"y"}, "reshape");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 6});
  return model;
}

TEST(SpecializeTest, ShapeArithmeticIsFolded) {
  TempDir dir;
  const Graph graph = importOnnx(testing::save(flattenByShapeArithmetic(), dir / "m.onnx"));
  const Graph specialised = specialize(graph, SpecializeOptions{.defaultBatch = 5});
  ASSERT_EQ(specialised.nodes.size(), 1u);
  EXPECT_EQ(specialised.nodes[0].opType, "Reshape");
  EXPECT_EQ(specialised.values[static_cast<std::size_t>(specialised.outputs[0])].meta.shape, (Shape{5, 6}));

  Executor executor(lowerToProgram(specialised, LowerOptions{}));
  Tensor x = Tensor::empty(DType::Float32, {5, 2, 3});
  for (int i = 0; i < 30; ++i) {
    x.data<float>()[i] = static_cast<float>(i);
  }
  const std::vector<Tensor> y = executor.run({x});
  ASSERT_EQ(y[0].shape(), (Shape{5, 6}));
  EXPECT_EQ(y[0].data<float>()[29], 29.0f);
}

TEST(SpecializeTest, ParametersAreNeverFolded) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 2});
  testing::addInitializer(model, "w", {2, 2}, {1, 2, 3, 4});
  testing::addNode(model, "Transpose", {"w"}, {"wt"}, "transpose_weight");
  testing::addNode(model, "MatMul", {"x", "wt"}, {"y"}, "matmul");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 2});
  const Graph specialised = specialize(importOnnx(testing::save(model, dir / "p.onnx")), SpecializeOptions{});
  EXPECT_EQ(specialised.nodes.size(), 2u);  // the weight's Transpose stays so its gradient can flow
}

TEST(LowerTest, IntermediatesAreReleasedAfterLastUse) {
  TempDir dir;
  const Graph graph = importOnnx(testing::save(testing::reluChainModel(), dir / "relu.onnx"));
  const Program program = lowerToProgram(specialize(graph, SpecializeOptions{.defaultBatch = 8}), LowerOptions{});
  ASSERT_EQ(program.steps.size(), 3u);
  EXPECT_TRUE(program.steps[0].releaseAfter.empty());
  EXPECT_EQ(program.steps[1].releaseAfter.size(), 1u);  // a, after its reader relu_b
  EXPECT_EQ(program.steps[2].releaseAfter.size(), 1u);  // b; y is a graph output and stays
  // At most two [8,4] float buffers are alive at once: 2 * 128 bytes.
  EXPECT_EQ(program.peakActivationBytes, 256);

  const auto& stats = allocatorFor(Device::cpu()).stats();
  Executor executor(lowerToProgram(specialize(graph, SpecializeOptions{.defaultBatch = 8}), LowerOptions{}));
  const Tensor x = Tensor::zeros(DType::Float32, {8, 4});
  const auto activations = static_cast<std::size_t>(MemoryCategory::Activations);
  const std::int64_t before = stats.snapshot().current[activations];
  const_cast<MemoryStats&>(stats).resetPeaks();
  const std::vector<Tensor> y = executor.run({x});
  EXPECT_EQ(stats.snapshot().peak[activations] - before, 256);
  EXPECT_EQ(stats.snapshot().current[activations] - before, 128);  // only the output is still alive
}

TEST(ExecutorTest, NodeHooksFireAroundEachNodeAndCanBeRemoved) {
  TempDir dir;
  const Graph graph = importOnnx(testing::save(testing::reluChainModel(), dir / "relu.onnx"));
  Executor executor(lowerToProgram(specialize(graph, SpecializeOptions{}), LowerOptions{}));
  std::vector<std::string> events;
  const int before = executor.addBeforeNodeHook([&](const NodeEvent& e) { events.push_back("+" + e.step.nodeName); });
  executor.addAfterNodeHook([&](const NodeEvent& e) { events.push_back("-" + e.step.nodeName); });
  executor.run({Tensor::zeros(DType::Float32, {1, 4})});
  EXPECT_EQ(events, (std::vector<std::string>{"+relu_a", "-relu_a", "+relu_b", "-relu_b", "+relu_c", "-relu_c"}));
  executor.removeHook(before);
  events.clear();
  executor.run({Tensor::zeros(DType::Float32, {1, 4})});
  EXPECT_EQ(events.size(), 3u);
}

}  // namespace
}  // namespace strata
