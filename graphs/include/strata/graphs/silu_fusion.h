#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [SiLU fusion]: ONNX has no SiLU (Swish) before opset 24, so PyTorch's exporter spells nn.SiLU() as
// Mul(x, Sigmoid(x)) (operands in either order): two passes over the activation in forward, and in backward a Mul's
// gradient for each operand, a SigmoidGrad and a Sum. EfficientNetV2-S has 132 of them. This pass replaces each such
// pair by Strata's Silu node (x * sigmoid(x), one pass; its SiluGrad one pass too) when the Sigmoid's output has no
// other reader and is not a graph output. The Silu kernels are the CPU's: the training plan applies it to CPU plans
// without mixed precision. Value ids keep their meaning; the result must be specialised again. Returns the number of
// pairs fused through `fused`.
Graph fuseSilu(const Graph& graph, int* fused = nullptr);

}  // namespace strata
