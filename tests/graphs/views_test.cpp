// Note [Views without copies]: a CPU plan hands a Reshape/Flatten/Squeeze/Unsqueeze of an activation on as a view of
// its input's bytes; the storage lives until the last reader of any of its names, and memory estimates count it once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace views_test {

using testing::TempDir;

Program lowered(const onnx::ModelProto& model, const TempDir& dir) {
  return lowerToProgram(specialize(importOnnx(testing::save(model, dir / "m.onnx")), SpecializeOptions{}),
                        LowerOptions{});
}

// x[2,3,4] -> Relu -> a -> Reshape [2,12] -> b -> Relu -> c -> Reshape [6,4] -> y (a graph output, a view of c).
// With `readLater`, a Mul(a, a) after the second Relu reads a through its own name after b's last reader.
onnx::ModelProto reshapeChain(bool readLater) {
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
  testing::addInt64Initializer(model, "flat", {2, 12});
  testing::addInt64Initializer(model, "rows", {6, 4});
  testing::addNode(model, "Relu", {"x"}, {"a"}, "relu_a");
  testing::addNode(model, "Reshape", {"a", "flat"}, {"b"}, "reshape_b");
  testing::addNode(model, "Neg", {"b"}, {"c"}, "neg_c");
  testing::addNode(model, "Reshape", {"c", "rows"}, {"y"}, "reshape_y");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {6, 4});
  if (readLater) {
    testing::addNode(model, "Mul", {"a", "a"}, {"z"}, "square_a");
    testing::setTensorType(model.mutable_graph()->add_output(), "z", onnx::TensorProto::FLOAT, {2, 3, 4});
  }
  return model;
}

const ProgramStep& stepNamed(const Program& program, const std::string& name) {
  auto it = std::find_if(program.steps.begin(), program.steps.end(),
                         [&](const ProgramStep& step) { return step.nodeName == name; });
  EXPECT_NE(it, program.steps.end()) << name;
  return *it;
}

TEST(ViewsTest, AReshapeOfAnActivationIsAViewCountedOnce) {
  TempDir dir;
  Program program = lowered(reshapeChain(false), dir);
  const ProgramStep& reshape = stepNamed(program, "reshape_b");
  EXPECT_TRUE(reshape.viewsInput);
  EXPECT_EQ(program.values[static_cast<std::size_t>(reshape.outputs[0])].viewOf, reshape.inputs[0]);
  EXPECT_TRUE(stepNamed(program, "reshape_y").viewsInput);
  // a (96 bytes) and c (96 bytes) alive together at most: the views add nothing.
  EXPECT_EQ(program.peakActivationBytes, 2 * 24 * 4);

  Executor executor(std::move(program));
  const Tensor x = testing::randomTensor({2, 3, 4}, 7);
  const std::vector<Tensor> out = executor.run({x});
  ASSERT_EQ(out[0].shape(), (Shape{6, 4}));
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(out[0].data<float>()[i], -std::max(0.0f, x.data<float>()[i])) << i;
  }
  // The outputs are the caller's: a second run does not write into the first run's results.
  const std::vector<Tensor> again = executor.run({testing::randomTensor({2, 3, 4}, 8)});
  EXPECT_EQ(out[0].data<float>()[0], -std::max(0.0f, x.data<float>()[0]));
  EXPECT_EQ(again[0].shape(), (Shape{6, 4}));
}

TEST(ViewsTest, TheStorageLivesUntilTheLastReaderOfAnyOfItsNames) {
  TempDir dir;
  Executor executor(lowered(reshapeChain(true), dir));
  EXPECT_TRUE(stepNamed(executor.program(), "reshape_b").viewsInput);
  const Tensor x = testing::randomTensor({2, 3, 4}, 9);
  const std::vector<Tensor> out = executor.run({x});
  for (int i = 0; i < 24; ++i) {
    const float a = std::max(0.0f, x.data<float>()[i]);
    EXPECT_EQ(out[0].data<float>()[i], -a) << i;
    EXPECT_EQ(out[1].data<float>()[i], a * a) << i;
  }
}

TEST(ViewsTest, AGraphInputIsCopiedNotAliased) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
  testing::addInt64Initializer(model, "flat", {2, 12});
  testing::addNode(model, "Reshape", {"x", "flat"}, {"y"}, "reshape_x");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 12});
  const Program program = lowered(model, dir);
  EXPECT_FALSE(stepNamed(program, "reshape_x").viewsInput);
}

}  // namespace views_test
}  // namespace strata
