#pragma once

// Small ONNX models built in code for tests, written to a fresh temporary directory.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace strata::testing {

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

}  // namespace strata::testing
