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
onnx::TensorProto tensorToProto(const Tensor& tensor, const std::string& name);

}  // namespace strata::detail
