#pragma once

// Small ONNX models built in code for tests, written to a fresh temporary directory.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "strata/error.h"
#include "strata/tensor.h"

namespace strata::testing {

// The message of the Error `fn` throws, or "no error": for checking that an error says what, where and why.
inline std::string errorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("strata-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path_;
};

// dims: a value >= 0 is static; -1 is the symbolic dimension "N".
inline void setTensorType(onnx::ValueInfoProto* info, const std::string& name, int elemType,
                          std::initializer_list<std::int64_t> dims) {
  info->set_name(name);
  auto* tensorType = info->mutable_type()->mutable_tensor_type();
  tensorType->set_elem_type(elemType);
  auto* shape = tensorType->mutable_shape();
  for (std::int64_t d : dims) {
    auto* dim = shape->add_dim();
    if (d >= 0) {
      dim->set_dim_value(d);
    } else {
      dim->set_dim_param("N");
    }
  }
}

inline onnx::ModelProto emptyModel(std::int64_t opset = 17) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("strata-tests");
  auto* op = model.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  model.mutable_graph()->set_name("test");
  return model;
}

inline onnx::NodeProto* addNode(onnx::ModelProto& model, const std::string& op, std::vector<std::string> inputs,
                                std::vector<std::string> outputs, const std::string& name) {
  auto* node = model.mutable_graph()->add_node();
  node->set_op_type(op);
  node->set_name(name);
  for (auto& in : inputs) {
    node->add_input(in);
  }
  for (auto& out : outputs) {
    node->add_output(out);
  }
  return node;
}

// A 1-D int64 initializer: a shape, axes or indices operand.
inline void addInt64Initializer(onnx::ModelProto& model, const std::string& name,
                                const std::vector<std::int64_t>& values) {
  auto* init = model.mutable_graph()->add_initializer();
  init->set_name(name);
  init->set_data_type(onnx::TensorProto::INT64);
  init->add_dims(static_cast<std::int64_t>(values.size()));
  for (std::int64_t v : values) {
    init->add_int64_data(v);
  }
}

inline void addInitializer(onnx::ModelProto& model, const std::string& name, std::vector<std::int64_t> dims,
                           const std::vector<float>& values) {
  auto* init = model.mutable_graph()->add_initializer();
  init->set_name(name);
  init->set_data_type(onnx::TensorProto::FLOAT);
  for (auto d : dims) {
    init->add_dims(d);
  }
  for (float v : values) {
    init->add_float_data(v);
  }
}

inline std::filesystem::path save(const onnx::ModelProto& model, const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::binary);
  model.SerializeToOstream(&out);
  return file;
}

// x[N,4] -> Relu -> Relu -> Relu -> y
inline onnx::ModelProto reluChainModel() {
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 4});
  addNode(model, "Relu", {"x"}, {"a"}, "relu_a");
  addNode(model, "Relu", {"a"}, {"b"}, "relu_b");
  addNode(model, "Relu", {"b"}, {"y"}, "relu_c");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 4});
  return model;
}

inline std::vector<float> randomValues(std::size_t count, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(count);
  for (float& v : values) {
    v = dist(rng);
  }
  return values;
}

// A float32 host tensor of `shape` holding randomValues.
inline Tensor randomTensor(Shape shape, unsigned seed, float scale = 1.0f) {
  Tensor t = Tensor::empty(DType::Float32, std::move(shape));
  const std::vector<float> values = randomValues(static_cast<std::size_t>(t.numel()), seed, scale);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

inline void setInt(onnx::NodeProto* node, const std::string& name, std::int64_t value) {
  auto* attr = node->add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::INT);
  attr->set_i(value);
}

inline void setInts(onnx::NodeProto* node, const std::string& name, std::vector<std::int64_t> values) {
  auto* attr = node->add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::INTS);
  for (std::int64_t v : values) {
    attr->add_ints(v);
  }
}

// x[N,3,8,8] -> Conv -> BatchNorm -> Relu -> MaxPool -> Conv -> Relu -> Conv -> Add(residual) -> Add(bias2) ->
// Flatten -> Gemm -> y[N,10]: each autocast class, a parameter used twice (w2), a residual between two 16-bit
// values, and an Add that mixes 16 bits with a float32 parameter.
// Numeric comparisons of 16-bit runs pool with AveragePool instead: 16-bit rounding reorders near-ties in a max-pool
// window, and each flip sends a window's gradient to another element, which at this tiny batch moves w1's gradient by
// ~10%.
inline onnx::ModelProto smallCnnModel(const std::string& pool = "MaxPool") {
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 3, 8, 8});
  addInitializer(model, "w1", {4, 3, 3, 3}, randomValues(108, 1, 0.4f));
  addInitializer(model, "b1", {4}, randomValues(4, 2, 0.1f));
  addInitializer(model, "scale", {4}, {1.0f, 0.9f, 1.1f, 1.2f});
  addInitializer(model, "shift", {4}, {0.1f, -0.1f, 0.0f, 0.2f});
  addInitializer(model, "mean", {4}, {0.0f, 0.0f, 0.0f, 0.0f});
  addInitializer(model, "var", {4}, {1.0f, 1.0f, 1.0f, 1.0f});
  addInitializer(model, "w2", {4, 4, 3, 3}, randomValues(144, 3, 0.3f));
  addInitializer(model, "bias2", {4, 1, 1}, randomValues(4, 6, 0.1f));
  addInitializer(model, "wf", {10, 64}, randomValues(640, 4, 0.2f));
  addInitializer(model, "bf", {10}, randomValues(10, 5, 0.1f));
  setInts(addNode(model, "Conv", {"x", "w1", "b1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  addNode(model, "BatchNormalization", {"c1", "scale", "shift", "mean", "var"}, {"n1"}, "bn1");
  addNode(model, "Relu", {"n1"}, {"r1"}, "relu1");
  auto* pooling = addNode(model, pool, {"r1"}, {"p1"}, "pool1");
  setInts(pooling, "kernel_shape", {2, 2});
  setInts(pooling, "strides", {2, 2});
  setInts(addNode(model, "Conv", {"p1", "w2"}, {"c2"}, "conv2"), "pads", {1, 1, 1, 1});
  addNode(model, "Relu", {"c2"}, {"r2"}, "relu2");
  setInts(addNode(model, "Conv", {"r2", "w2"}, {"c3"}, "conv3"), "pads", {1, 1, 1, 1});
  addNode(model, "Add", {"c3", "p1"}, {"sum"}, "residual");
  addNode(model, "Add", {"sum", "bias2"}, {"biased"}, "bias");
  addNode(model, "Flatten", {"biased"}, {"flat"}, "flatten");
  setInt(addNode(model, "Gemm", {"flat", "wf", "bf"}, {"y"}, "fc"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 10});
  return model;
}

// x[N,4] -> Dropout (ratio 0.5) -> MatMul -> y[N,3]
inline onnx::ModelProto dropoutModel() {
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, 4});
  addInitializer(model, "w", {4, 3}, randomValues(12, 1, 0.5f));
  addNode(model, "Dropout", {"x"}, {"d"}, "drop");
  addNode(model, "MatMul", {"d", "w"}, {"y"}, "fc");
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, 3});
  return model;
}

}  // namespace strata::testing
