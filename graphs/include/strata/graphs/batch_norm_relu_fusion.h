#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Fused ReLU]: ResNets and DenseNets follow most batch norms with a Relu that is the norm's only reader. Run
// apart, the Relu reads and writes a full activation in forward, and its gradient another two in backward, and the
// norm's output lives until the Relu has read it. This pass gives such a BatchNormalization the attribute
// fused_relu = 1 and the Relu's output value, and drops the Relu: the CPU kernels apply max(y, 0) as they write y
// and gate dY by the output in backward (core/backend/cpu/batch_norm_loops.h), with the same arithmetic as the two
// nodes. Only where the norm's output has no other reader and is not a graph output. For CPU plans (the CUDA kernels
// refuse the attribute). Value ids keep their meaning; the result must be specialised again. Returns the number of
// pairs fused through `fused`.
Graph fuseBatchNormRelu(const Graph& graph, int* fused = nullptr);

}  // namespace strata
