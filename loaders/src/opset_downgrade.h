#pragma once

#include <cstdint>
#include <filesystem>

#include <onnx/onnx_pb.h>

namespace strata {

// The newest default-domain opset downgradeToOpset17 knows the changes of (ONNX 1.18's).
constexpr std::int64_t kNewestDowngradableOpset = 23;

// Note [Opsets above 17]: PyTorch >= 2.9 exports at opset 18 to 20 by default, and this build's ONNX library (Debian
// 12's 1.12) knows opsets up to 17 only: its checker, shape inference and version converter all refuse newer files.
// Most ops did not change between 17 and 23 but for the types they accept (bfloat16 in 22, 8-bit floats in 19,
// 4-bit integers in 21): those nodes stay as they are. The rest are rewritten into their opset-17 form where one
// exists: the Reduce ops' `axes` input (18) back into an attribute when it is a constant, the defaults of attributes
// added since (AveragePool's dilations, Cast's saturate, Resize's antialias, ...) dropped, and Gelu (20) and Mish
// (18) spelled in the opset-13 ops they are defined by. A node that uses what opset 17 cannot say (a Split by
// num_outputs, a computed axes input, a new op such as GroupNormalization) is an error naming the file, the node and
// why. The model's default-domain opset becomes 17.
// `opset` is the model's default-domain opset (18..kNewestDowngradableOpset).
void downgradeToOpset17(onnx::ModelProto& model, const std::filesystem::path& file, std::int64_t opset);

}  // namespace strata
