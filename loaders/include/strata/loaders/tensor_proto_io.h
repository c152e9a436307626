#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "strata/tensor.h"

namespace strata {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Reads one serialized ONNX TensorProto (.pb, the ONNX test suite's format).
NamedTensor readTensorProto(const std::filesystem::path& file);
// Parses the bytes of such a file, already read (and checked) by the caller; `file` names them in errors and
// resolves external data.
NamedTensor parseTensorProto(std::string_view bytes, const std::filesystem::path& file);
// Writes a tensor as a serialized ONNX TensorProto named `name` (its data straight from the tensor; at most 2 GiB,
// protobuf's limit on a message, else a clear error).
void writeTensorProto(const std::filesystem::path& file, const Tensor& tensor, const std::string& name);

}  // namespace strata
