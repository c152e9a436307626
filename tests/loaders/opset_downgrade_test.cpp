// Note [Opsets above 17]: models of opsets 18..23 are read as opset 17. Checked through importOnnx and a run of the
// imported graph against the ops' definitions (std::erf, std::tanh, a mean by hand), and the error paths.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"
#include "test_models.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

// x[2, 3, 4] -> op -> y, at `opset` and IR 10 (as PyTorch >= 2.9 writes).
onnx::ModelProto unaryModel(const std::string& op, std::int64_t opset, std::vector<std::int64_t> outDims = {2, 3, 4}) {
  onnx::ModelProto model = testing::emptyModel(opset);
  model.set_ir_version(10);
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3, 4});
  testing::addNode(model, op, {"x"}, {"y"}, "the_" + op);
  auto* output = model.mutable_graph()->add_output();
  output->set_name("y");
  output->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (std::int64_t d : outDims) {
    output->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  }
  return model;
}

std::vector<Tensor> run(const onnx::ModelProto& model, const Tensor& x) {
  TempDir dir;
  const Graph graph = importOnnx(testing::save(model, dir / "model.onnx"));
  EXPECT_EQ(graph.opsetVersion, 17);
  EXPECT_EQ(graph.fileOpsetVersion, model.opset_import(0).version());
  Executor executor(lowerToProgram(specialize(graph, SpecializeOptions{}), LowerOptions{}));
  return executor.run({x});
}

std::string importError(const onnx::ModelProto& model) {
  TempDir dir;
  try {
    importOnnx(testing::save(model, dir / "new.onnx"));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

void setString(onnx::NodeProto* node, const std::string& name, const std::string& value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::STRING);
  attribute->set_s(value);
}

TEST(OpsetDowngradeTest, GeluOfOpset20MatchesItsDefinitionExactAndTanh) {
  const Tensor x = testing::randomTensor({2, 3, 4}, 7, 3.0f);
  for (const std::string approximate : {"none", "tanh"}) {
    onnx::ModelProto model = unaryModel("Gelu", 20);
    setString(model.mutable_graph()->mutable_node(0), "approximate", approximate);
    const Tensor y = run(model, x)[0];
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.data<float>()[i];
      const double expected = approximate == "none"
                                  ? 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))
                                  : 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR(y.data<float>()[i], expected, 1e-5) << approximate << " at " << v;
    }
  }
}

TEST(OpsetDowngradeTest, MishOfOpset18MatchesItsDefinition) {
  const Tensor x = testing::randomTensor({2, 3, 4}, 8, 4.0f);
  const Tensor y = run(unaryModel("Mish", 18), x)[0];
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.data<float>()[i];
    EXPECT_NEAR(y.data<float>()[i], v * std::tanh(std::log1p(std::exp(v))), 1e-5) << v;
  }
}

TEST(OpsetDowngradeTest, ReduceMeanAxesFromAnInitializerOrAConstantBecomeTheAttribute) {
  const Tensor x = testing::randomTensor({2, 3, 4}, 9);
  for (const bool fromConstantNode : {false, true}) {
    onnx::ModelProto model = unaryModel("ReduceMean", 18, {2, 1, 4});
    model.mutable_graph()->mutable_node(0)->add_input("axes");
    if (fromConstantNode) {
      onnx::NodeProto* node = testing::addNode(model, "Constant", {}, {"axes"}, "axes_constant");
      auto* value = node->add_attribute();
      value->set_name("value");
      value->set_type(onnx::AttributeProto::TENSOR);
      value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
      value->mutable_t()->add_dims(1);
      value->mutable_t()->add_int64_data(1);
      model.mutable_graph()->mutable_node()->SwapElements(0, 1);  // the Constant first
    } else {
      testing::addInt64Initializer(model, "axes", {1});
    }
    const Tensor y = run(model, x)[0];
    ASSERT_EQ(y.shape(), (Shape{2, 1, 4}));
    for (std::int64_t n = 0; n < 2; ++n) {
      for (std::int64_t k = 0; k < 4; ++k) {
        double sum = 0;
        for (std::int64_t c = 0; c < 3; ++c) {
          sum += x.data<float>()[(n * 3 + c) * 4 + k];
        }
        EXPECT_NEAR(y.data<float>()[n * 4 + k], sum / 3.0, 1e-6);
      }
    }
  }
}

TEST(OpsetDowngradeTest, ReduceWithoutAxesAndNoopWithEmptyAxesIsTheIdentity) {
  const Tensor x = testing::randomTensor({2, 3, 4}, 10);
  onnx::ModelProto model = unaryModel("ReduceMax", 20);
  testing::setInt(model.mutable_graph()->mutable_node(0), "noop_with_empty_axes", 1);
  const Tensor y = run(model, x)[0];
  ASSERT_EQ(y.shape(), x.shape());
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);
  }
}

// Resize-19 with its new attributes at their defaults runs as Resize-17: bilinear x2 along the last axis
// (half_pixel), by hand; antialias and half_pixel_symmetric have no opset-17 form.
TEST(OpsetDowngradeTest, ResizeOfOpset19WithDefaultOptionsRunsAsOpset17) {
  const Tensor x = testing::randomTensor({2, 3, 4}, 12);
  const auto model = [](const std::string& coordinates, std::int64_t antialias) {
    onnx::ModelProto m = unaryModel("Resize", 19, {2, 3, 8});
    onnx::NodeProto* node = m.mutable_graph()->mutable_node(0);
    node->add_input("");
    node->add_input("scales");
    testing::addInitializer(m, "scales", {3}, {1.0f, 1.0f, 2.0f});
    setString(node, "mode", "linear");
    setString(node, "coordinate_transformation_mode", coordinates);
    setString(node, "keep_aspect_ratio_policy", "stretch");
    testing::setInt(node, "antialias", antialias);
    return m;
  };
  const Tensor y = run(model("half_pixel", 0), x)[0];
  ASSERT_EQ(y.shape(), (Shape{2, 3, 8}));
  for (std::int64_t row = 0; row < 6; ++row) {
    for (std::int64_t r = 0; r < 8; ++r) {
      const double at = std::clamp((static_cast<double>(r) + 0.5) / 2.0 - 0.5, 0.0, 3.0);
      const auto left = static_cast<std::int64_t>(std::floor(at));
      const std::int64_t right = std::min<std::int64_t>(left + 1, 3);
      const double w = at - static_cast<double>(left);
      const double expected = (1 - w) * x.data<float>()[row * 4 + left] + w * x.data<float>()[row * 4 + right];
      EXPECT_NEAR(y.data<float>()[row * 8 + r], expected, 1e-6) << row << ", " << r;
    }
  }
  EXPECT_THAT(importError(model("half_pixel", 1)), AllOf(HasSubstr("node 'the_Resize'"), HasSubstr("antialias=1")));
  EXPECT_THAT(importError(model("half_pixel_symmetric", 0)),
              AllOf(HasSubstr("node 'the_Resize'"), HasSubstr("half_pixel_symmetric")));
}

TEST(OpsetDowngradeTest, OpsThatChangedOnlyTheirTypesStayAsTheyAre) {
  const Tensor x = testing::randomTensor({2, 3, 4}, 11);
  const Tensor y = run(unaryModel("Softsign", 23), x)[0];  // Softsign-22: bfloat16 added
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i];
    EXPECT_NEAR(y.data<float>()[i], v / (1.0f + std::abs(v)), 1e-6f);
  }
}

TEST(OpsetDowngradeTest, WhatOpset17CannotSayIsAnErrorNamingTheNode) {
  onnx::ModelProto split = unaryModel("Split", 18, {2, 3, 2});
  testing::setInt(split.mutable_graph()->mutable_node(0), "num_outputs", 2);
  EXPECT_THAT(importError(split),
              AllOf(HasSubstr("new.onnx"), HasSubstr("node 'the_Split'"), HasSubstr("Split of opset 18"),
                    HasSubstr("num_outputs"), HasSubstr("opset_version=17")));

  onnx::ModelProto computed = unaryModel("ReduceMean", 18, {2, 1, 4});
  testing::setTensorType(computed.mutable_graph()->add_input(), "axes_in", onnx::TensorProto::INT64, {1});
  computed.mutable_graph()->mutable_node(0)->add_input("axes_in");
  EXPECT_THAT(importError(computed),
              AllOf(HasSubstr("node 'the_ReduceMean'"), HasSubstr("'axes_in'"), HasSubstr("computed, not a constant")));

  onnx::ModelProto pool = unaryModel("AveragePool", 19, {2, 3, 2});
  testing::setInts(pool.mutable_graph()->mutable_node(0), "kernel_shape", {2});
  testing::setInts(pool.mutable_graph()->mutable_node(0), "dilations", {2});
  EXPECT_THAT(importError(pool), AllOf(HasSubstr("node 'the_AveragePool'"), HasSubstr("dilations other than 1")));

  onnx::ModelProto bare = unaryModel("Gelu", 20);  // as a fuzzer might write it: no input, no name
  bare.mutable_graph()->mutable_node(0)->clear_input();
  bare.mutable_graph()->mutable_node(0)->clear_name();
  EXPECT_THAT(importError(bare), AllOf(HasSubstr("node 'y'"), HasSubstr("other than one input and one output")));

  EXPECT_THAT(importError(unaryModel("GroupNormalization", 21)),
              AllOf(HasSubstr("node 'the_GroupNormalization'"), HasSubstr("an op opset 17 does not have")));
}

TEST(OpsetDowngradeTest, OpsetsNewerThanItKnowsGoToTheConverterWhoseErrorSaysHowToExport) {
  EXPECT_THAT(importError(unaryModel("Relu", 24)), AllOf(HasSubstr("opset 24"), HasSubstr("opset_version=17")));
}

}  // namespace
}  // namespace strata
