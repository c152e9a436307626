#pragma once

#include "strata/op_registry.h"

namespace strata::cpu {

// Each family of CPU ops registers its schemas (shape functions) and kernels here.
void registerElementwiseOps(OpRegistry& registry);  // unary, binary (broadcasting), comparison, Where, Cast, ...
void registerReductionOps(OpRegistry& registry);    // Reduce*, Softmax, LogSoftmax, LayerNormalization, losses
void registerShapeOps(OpRegistry& registry);        // Reshape, Transpose, Concat, Slice, Gather, Shape, ...
void registerDnnlOps(OpRegistry& registry);         // Conv, pooling, BatchNormalization, Gemm, MatMul (oneDNN)
void registerAttentionOps(OpRegistry& registry);    // ScaledDotProductAttention and its gradient (fused attention)
void registerResizeOps(OpRegistry& registry);       // Resize and its gradient, ResizeGrad
void registerEinsumOps(OpRegistry& registry);       // Einsum (contractions on the MatMul kernel)

}  // namespace strata::cpu

namespace strata::cpu {

// Gradient kernels used by the backward graphs that graphs/autodiff builds.
void registerElementwiseGradOps(OpRegistry& registry);  // ReluGrad, SigmoidGrad, DropoutGrad, ...
void registerReductionGradOps(OpRegistry& registry);    // SoftmaxGrad, LayerNormalizationGrad, loss grads, ...
void registerShapeGradOps(OpRegistry& registry);        // SliceGrad, GatherGrad, PadGrad, ...
void registerNnGradOps(OpRegistry& registry);           // ConvGradInput/Weight, pooling grads, BatchNormalizationGrad

// Marks the ops mixed precision runs in float16/bfloat16 and wraps their CPU kernels to emulate that (after all
// the others are registered).
void registerLowPrecisionOps(OpRegistry& registry);

}  // namespace strata::cpu
