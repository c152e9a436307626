#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Transposed weights]: PyTorch exports nn.Linear on inputs of rank 3 or more (ConvNeXt's MLPs on [N, H, W, C])
// as MatMul(X, Transpose(W)). In a training graph W is a parameter, so the Transpose runs every step and its output,
// a transposed copy of W, is what backward reads: an activation the size of W held from the forward pass to the
// backward one (99 MiB of ConvNeXt-Tiny's 126 MiB of activations at batch 8), and a full-size copy FSDP cannot
// free after the forward, which made shard=full hold as much as grad_op. This rewrite reads W itself instead:
//   MatMul(X [..., K], Transpose(W [N, K], perm [1, 0]))  ->  Reshape(Gemm(Reshape(X, [rows, K]), W, transB=1))
// (Gemm's gradient rule then reads W too), and drops Transposes nothing reads any more. Value ids keep their
// meaning; the result must be specialised again. Returns the number of MatMuls rewritten through `rewritten`.
Graph foldTransposedWeights(const Graph& graph, int* rewritten = nullptr);

}  // namespace strata
