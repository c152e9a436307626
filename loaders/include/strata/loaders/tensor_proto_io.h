#pragma once

#include <filesystem>
#include <string>

#include "strata/tensor.h"

namespace strata {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Reads one serialized ONNX TensorProto (.pb, the ONNX test suite's format).
NamedTensor readTensorProto(const std::filesystem::path& file);
// Writes a tensor as a serialized ONNX TensorProto named `name`.
void writeTensorProto(const std::filesystem::path& file, const Tensor& tensor, const std::string& name);

}  // namespace strata
