#pragma once

// Attribute parsing and shape arithmetic of the convolution ops, shared by the CPU kernels (dnnl_conv.cpp,
// grad_nn_conv.cpp) and the CUDA ones (core/backend/cuda/cudnn_conv.cpp), so both backends read the same
// attributes, resolve the same windows and fail with the same messages. Host code only.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/op_registry.h"
#include "strata/shape.h"

namespace strata::cpu {

// The spatial dims of an [N, C, spatial...] shape.
std::vector<std::int64_t> spatialOf(const Shape& shape);

// The kernel's spatial sizes: W's dims 2..., which the kernel_shape attribute must match when given.
std::vector<std::int64_t> kernelShapeOf(const Attributes& attrs, const Shape& weight);

// ConvTranspose's window: x [N, C, in...] and w [C, M / group, k...] with the kernel_shape, strides, dilations,
// output_padding, output_shape, auto_pad and pads attributes resolved as the ONNX spec says. `output` holds the
// output's spatial sizes; padEnd may be negative (output_shape larger than the full result).
struct DeconvWindow {
  std::vector<std::int64_t> kernel, strides, dilations, outputPadding, padBegin, padEnd, output;
};

DeconvWindow resolveDeconvWindow(const Attributes& attrs, const Shape& x, const Shape& w);

// ConvGradInput (dY, W -> dX), ConvGradWeight (dY, X -> dW [, dB]), ConvGrad (dY, X, W -> dX, dW [, dB]).
enum class ConvGradMode { Input, Weight, Both };

// The shapes of X and W of a convolution gradient node (from inputs or the input_shape / weight_shape
// attributes), where X and W are among its inputs and where dX, dW and dB are among its outputs (-1: not there).
struct ConvGradOperands {
  Shape x, w;
  int xIndex = -1, wIndex = -1;            // input positions of X and W (dY is input 0)
  int dxOut = -1, dwOut = -1, dbOut = -1;  // output positions, -1 when the op has no such output
};

ConvGradOperands convGradOperands(ConvGradMode mode, const KernelInit& init);

// " (a GEMM per image and group)" when oneDNN's implementation `oneDnn` of a grouped convolution is its GEMM
// fallback, which runs one small GEMM per image and group (Note [Depthwise weight gradient]): a JIT kernel, but
// the slow path on small maps, which `strata run --profile` and bench/kernel_paths.py should show as such.
std::string perGroupGemmNote(const std::string& oneDnn, std::int64_t group);

}  // namespace strata::cpu
