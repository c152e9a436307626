#pragma once

#include <filesystem>
#include <string>

#include <onnx/onnx_pb.h>

#include "strata/tensor.h"

namespace strata::detail {

// Converts a TensorProto (inline or external data) to a Tensor. `context` names the file and tensor in errors;
// `baseDir` resolves external data locations.
Tensor tensorFromProto(const onnx::TensorProto& proto, const std::string& context,
                       const std::filesystem::path& baseDir = {});
// The TensorProto of `tensor` (copied from the device if it is on one) named `name`, its bytes as raw_data.
onnx::TensorProto tensorToProto(const Tensor& tensor, const std::string& name);
// Everything of tensorToProto's result but the data: name, type and dims of a host tensor.
onnx::TensorProto tensorProtoHeader(const Tensor& host, const std::string& name);

}  // namespace strata::detail
