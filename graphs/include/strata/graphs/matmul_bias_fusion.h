#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [MatMul bias fusion]: PyTorch exports nn.Linear on inputs of rank 3 or more (ConvNeXt's and transformers'
// channel MLPs) as MatMul(x, W^T) followed by Add(bias), a second pass over the output: ConvNeXt-Tiny's forward
// spent 3.4% of its time in Adds, 36 of its 54 being these (16x3x32x32, AVX2 cap; 0.1 ms after this pass). For
// inference plans on the CPU this pass gives such a MatMul the bias as a third input, which the CPU kernel passes to
// oneDNN's matmul, and drops the Add: when B is a constant 2-D matrix [K, N], the float32 bias is a constant of N
// elements (shape [N] or [1, ..., N], not of higher rank than the product; or the Identity of one), the Add alone reads
// the product, and the product is not a graph output. Value ids keep their meaning; the result must be specialised
// again. Returns the number fused through `fused`.
Graph fuseBiasIntoMatMul(const Graph& graph, int* fused = nullptr);

}  // namespace strata
