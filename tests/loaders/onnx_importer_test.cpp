#include "strata/loaders/onnx_importer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "strata/executor.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "test_models.h"

namespace strata {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

std::string importError(const std::filesystem::path& file) {
  try {
    importOnnx(file);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(OnnxImporterTest, MissingFileNamesThePath) {
  EXPECT_THAT(importError("/nonexistent/model.onnx"),
              AllOf(HasSubstr("/nonexistent/model.onnx"), HasSubstr("no such file")));
}

TEST(OnnxImporterTest, NotAnOnnxFile) {
  TempDir dir;
  std::ofstream(dir / "text.onnx") << "this is not a protobuf \xff\xff\xff\xff";
  EXPECT_THAT(importError(dir / "text.onnx"), HasSubstr("not an ONNX model"));
  std::ofstream(dir / "empty.onnx").flush();
  EXPECT_THAT(importError(dir / "empty.onnx"), HasSubstr("is empty"));
}

TEST(OnnxImporterTest, TruncatedModel) {
  TempDir dir;
  onnx::ModelProto model = testing::reluChainModel();
  testing::addInitializer(model, "w", {64}, std::vector<float>(64, 1.0f));
  const std::string bytes = model.SerializeAsString();
  std::ofstream(dir / "cut.onnx", std::ios::binary) << bytes.substr(0, bytes.size() - 17);
  EXPECT_THAT(importError(dir / "cut.onnx"), AllOf(HasSubstr("cut.onnx"), HasSubstr("truncated")));
}

TEST(OnnxImporterTest, CheckerFailureIsReported) {
  TempDir dir;
  onnx::ModelProto model = testing::reluChainModel();
  testing::addNode(model, "Relu", {"does_not_exist"}, {"z"}, "dangling");
  EXPECT_THAT(importError(testing::save(model, dir / "bad.onnx")), AllOf(HasSubstr("bad.onnx"), HasSubstr("checker")));
}

TEST(OnnxImporterTest, UnsupportedOpsAreListedOnceWithCountsAndFirstNode) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
  testing::addNode(model, "Det", {"x"}, {"a"}, "det_first");  // not square, but the checker does not infer it
  testing::addNode(model, "Relu", {"x"}, {"b"}, "relu");
  testing::addNode(model, "Hardmax", {"b"}, {"c"}, "hardmax_first");
  testing::addNode(model, "Hardmax", {"c"}, {"d"}, "hardmax_second");
  testing::setTensorType(model.mutable_graph()->add_output(), "d", onnx::TensorProto::FLOAT, {2, 3});
  const std::string error = importError(testing::save(model, dir / "ops.onnx"));
  EXPECT_THAT(error, AllOf(HasSubstr("ops.onnx"), HasSubstr("unsupported operators"),
                           HasSubstr("Hardmax x2 (first: node 'hardmax_first')"),
                           HasSubstr("Det x1 (first: node 'det_first')")));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("Relu")));
}

TEST(OnnxImporterTest, UnsupportedDtypeIsNamed) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "s", onnx::TensorProto::STRING, {2});
  testing::addNode(model, "Identity", {"s"}, {"t"}, "id");
  testing::setTensorType(model.mutable_graph()->add_output(), "t", onnx::TensorProto::STRING, {2});
  EXPECT_THAT(importError(testing::save(model, dir / "str.onnx")),
              AllOf(HasSubstr("graph input 's'"), HasSubstr("dtype string is not supported")));
}

TEST(OnnxImporterTest, DynamicNonBatchDimensionCannotBeSpecialised) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, -1});
  testing::addNode(model, "Relu", {"x"}, {"y"}, "relu");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, -1});
  const Graph graph = importOnnx(testing::save(model, dir / "dyn.onnx"));
  try {
    specialize(graph, SpecializeOptions{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("dyn.onnx"), HasSubstr("input 'x'"), HasSubstr("dynamic dimension 1")));
  }
  // With an explicit shape it specialises.
  const Graph fixed = specialize(graph, SpecializeOptions{.inputMetas = {{DType::Float32, {2, 5}}}});
  EXPECT_EQ(fixed.values[static_cast<std::size_t>(fixed.outputs[0])].meta.shape, (Shape{2, 5}));
}

TEST(OnnxImporterTest, InputThatDoesNotMatchTheGraphIsRejected) {
  TempDir dir;
  const Graph graph = importOnnx(testing::save(testing::reluChainModel(), dir / "relu.onnx"));
  EXPECT_THROW(specialize(graph, SpecializeOptions{.inputMetas = {{DType::Float32, {2, 5}}}}), Error);
  EXPECT_THROW(specialize(graph, SpecializeOptions{.inputMetas = {{DType::Int64, {2, 4}}}}), Error);

  Executor executor(lowerToProgram(specialize(graph, SpecializeOptions{.defaultBatch = 3}), LowerOptions{}));
  try {
    executor.run({Tensor::zeros(DType::Float32, {2, 4})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("'x'"), HasSubstr("[2, 4]"), HasSubstr("[3, 4]")));
  }
  EXPECT_THROW(executor.run({Tensor::zeros(DType::Float64, {3, 4})}), Error);
  EXPECT_THROW(executor.run({}), Error);
}

TEST(OnnxImporterTest, ExternalDataIsLoaded) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {3});
  auto* init = model.mutable_graph()->add_initializer();
  init->set_name("w");
  init->set_data_type(onnx::TensorProto::FLOAT);
  init->add_dims(3);
  init->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* location = init->add_external_data();
  location->set_key("location");
  location->set_value("weights.bin");
  auto* offset = init->add_external_data();
  offset->set_key("offset");
  offset->set_value("4");
  const float values[] = {0.0f, 1.5f, -2.0f, 4.0f};
  std::ofstream(dir / "weights.bin", std::ios::binary).write(reinterpret_cast<const char*>(values), sizeof(values));
  testing::addNode(model, "Add", {"x", "w"}, {"y"}, "add");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {3});

  const Graph graph = importOnnx(testing::save(model, dir / "ext.onnx"));
  const Tensor& w = graph.values[static_cast<std::size_t>(graph.findValue("w"))].constant;
  ASSERT_EQ(w.numel(), 3);
  EXPECT_EQ(w.data<float>()[0], 1.5f);
  EXPECT_EQ(w.data<float>()[2], 4.0f);

  std::filesystem::remove(dir / "weights.bin");
  EXPECT_THAT(importError(dir / "ext.onnx"), AllOf(HasSubstr("initializer 'w'"), HasSubstr("weights.bin")));
}

// An older opset goes through ONNX's converter; IR version 10 (PyTorch >= 2.9, Note [Newer IR versions]) at an
// opset Strata reads is checked as IR 8.
TEST(OnnxImporterTest, OlderOpsetsAndNewerIrVersionsImport) {
  TempDir dir;
  onnx::ModelProto old = testing::reluChainModel();
  old.mutable_opset_import(0)->set_version(11);
  onnx::ModelProto ir10 = testing::reluChainModel();
  ir10.set_ir_version(10);
  for (const onnx::ModelProto* model : {&old, &ir10}) {
    EXPECT_EQ(importOnnx(testing::save(*model, dir / "model.onnx")).nodes.size(), 3u);
  }
}

TEST(OnnxImporterTest, NewerIrVersionWithAFloat8TensorNamesTheType) {
  TempDir dir;
  onnx::ModelProto model = testing::emptyModel();
  model.set_ir_version(10);
  testing::setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
  testing::addNode(model, "Relu", {"x"}, {"y"}, "relu");
  testing::setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3});
  for (auto* value : {model.mutable_graph()->mutable_input(0), model.mutable_graph()->mutable_output(0)}) {
    value->mutable_type()->mutable_tensor_type()->set_elem_type(17);  // FLOAT8E4M3FN, new in IR 9
  }
  EXPECT_THAT(importError(testing::save(model, dir / "fp8.onnx")),
              AllOf(HasSubstr("fp8.onnx"), HasSubstr("'x'"), HasSubstr("float8e4m3fn is not supported")));
}

}  // namespace
}  // namespace strata
