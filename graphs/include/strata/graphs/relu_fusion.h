#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Fused ReLU]: ResNets and DenseNets follow most batch norms, and ResNets every residual Add, with a Relu that is
// the only reader of its input; VGGs and every model exported for inference (batch norms folded into the
// convolutions) follow their convolutions with one. Run apart, the Relu reads and writes a full activation in
// forward, and the value it reads lives until it has. This pass gives such a BatchNormalization, Add or Conv the
// attribute fused_relu = 1 and the Relu's output value, and drops the Relu: the CPU kernels apply max(y, 0) as they
// write y. In backward a fused batch norm gates dY by its output inside its own passes
// (core/backend/cpu/batch_norm_loops.h); a fused Add's or Conv's rule emits the ReluGrad first. Same arithmetic as the
// two nodes, so the same results to the bit. Only where the first node's output has no other reader and is not a graph
// output; for CPU plans (the CUDA kernels refuse the attribute). Value ids keep their meaning; the result must be
// specialised again. Returns the number of pairs fused through `fused`.
Graph fuseRelu(const Graph& graph, int* fused = nullptr);

// For plans that are never differentiated (`strata run` on the CPU): a Conv read only by a Clip whose bounds are
// constants (MobileNets' ReLU6) writes the clipped value itself (attributes fused_clip = 1, clip_min, clip_max),
// and the Clip is dropped. Not for training: Clip's gradient passes where min <= X <= max, which the clipped output
// cannot tell. Returns the number of pairs fused through `fused`; the result must be specialised again.
Graph fuseClipIntoConv(const Graph& graph, int* fused = nullptr);

}  // namespace strata
