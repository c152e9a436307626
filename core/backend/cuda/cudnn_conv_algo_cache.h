#pragma once

// Convolution algorithm choice, made once per problem and kept for the process.
// Note [Conv algorithm cache]: a convolution problem (direction, dtype, math mode, layout, dims, pads, strides,
// dilations, groups, device, workspace limit) is benchmarked once with cudnnFind*AlgorithmEx on the first run of a
// kernel that meets it, over the operands' own buffers (the output is overwritten, then computed for real) and
// workspace from the caching allocator; the fastest algorithm whose workspace fits convolutionWorkspaceLimit()
// wins. When Find fails, cuDNN's heuristics (cudnnGet*Algorithm_v7) choose. Every later kernel with the same problem
// (the many identical convolutions of a ResNet, every plan built by the same process) takes the cached choice.

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "strata/device.h"
#include "strata/dtype.h"

namespace strata::cuda {

enum class ConvDirection { Forward, BackwardData, BackwardFilter };

struct ConvAlgoChoice {
  int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, by direction
  cudnnMathType_t mathType = CUDNN_DEFAULT_MATH;
  std::size_t workspaceBytes = 0;
};

// One convolution as cuDNN sees it. x, w, y are the forward's input, filter and output: Forward reads x and w and
// writes y; BackwardData reads w and y (dY) and writes x (dX); BackwardFilter reads x and y (dY) and writes w (dW).
struct ConvAlgoProblem {
  ConvDirection direction = ConvDirection::Forward;
  DType dtype = DType::Float32;
  cudnnHandle_t handle = nullptr;  // bound to the kernel's stream
  Device device;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  bool channelsLast = false;  // NHWC tensors and filter (else NCHW): cuDNN's algorithms differ by layout
  void* xData = nullptr;
  void* wData = nullptr;
  void* yData = nullptr;
  std::string geometry;  // dims, pads, strides, dilations and groups as text (the cache key's shape part)
};

// The math type a convolution of `dtype` asks cuDNN for: tensor ops (TF32) for float32 when tf32Enabled(), plain
// FMA otherwise (true float32); tensor ops for float16 / bfloat16; the default for float64.
cudnnMathType_t requestedConvMathType(DType dtype);

// The algorithm for `problem` (from the cache, or searched and cached), with problem.conv's math type set to it.
ConvAlgoChoice chooseConvAlgo(const ConvAlgoProblem& problem);

}  // namespace strata::cuda
