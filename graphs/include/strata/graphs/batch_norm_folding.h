#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Batch norm folded into the convolution]: in a plan whose weights never change (`strata run`), a
// BatchNormalization in inference mode that alone reads a Conv's output is an affine map per output channel:
// y = s * (conv(x, W) + B - mean) + shift with s = scale / sqrt(var + epsilon), which is conv(x, W * s) + (B - mean)
// * s + shift. This pass writes the folded weights and bias as nodes on the parameters (Add, Sqrt, Div, Reshape, Mul,
// Sub), gives the Conv the batch norm's output value and drops the batch norm; specialising with foldParameters then
// evaluates those nodes once, when the plan is built. A file exported for training, or by a tool that does not fold
// (PyTorch's eval export folds already), saves a full activation's read and write per batch norm, and the Relu after
// it can then fuse into the Conv (Note [Fused ReLU]). Rounding differs from the two nodes' (the product W * s is
// rounded once in the weights' type): outputs agree to float32 rounding, not to the bit. Only where the Conv's output
// has no other reader and is not a graph output, the batch norm's statistics and the Conv's weights and bias are
// constants of one float type (float32 or float64), and the batch norm writes its output only. The result must be
// specialised again. Returns the number folded through `folded`.
Graph foldBatchNormIntoConv(const Graph& graph, int* folded = nullptr);

}  // namespace strata
