#pragma once

#include "strata/op_registry.h"

namespace strata::cuda {

// Each family of native CUDA kernels registers itself here (kernels only: the schemas are the CPU backend's).
void registerElementwiseKernels(OpRegistry& registry);      // unary, binary with broadcasting, comparisons, Where, Cast
void registerElementwiseGradKernels(OpRegistry& registry);  // ReluGrad, SigmoidGrad, ..., DropoutGrad
void registerReductionKernels(OpRegistry& registry);        // Reduce*, Softmax, LogSoftmax, LayerNormalization, losses
void registerReductionGradKernels(OpRegistry& registry);    // SoftmaxGrad, LayerNormalizationGrad, loss grads
void registerDataMovementKernels(OpRegistry& registry);     // Reshape, Transpose, Concat, Split, Slice, Pad, Gather...
void registerDataMovementGradKernels(OpRegistry& registry);  // SliceGrad, PadGrad, GatherGrad, ...
void registerCudnnKernels(OpRegistry& registry);             // Conv, pooling, BatchNormalization and their grads
void registerBlasKernels(OpRegistry& registry);              // Gemm, MatMul (cuBLAS / cuBLASLt)

// Every op with a CPU kernel but no native CUDA kernel runs through host staging (Note [Host fallback]).
void registerHostFallbackKernels(OpRegistry& registry);

}  // namespace strata::cuda
