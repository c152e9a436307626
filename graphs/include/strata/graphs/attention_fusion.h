#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Fused attention]: exporters write attention as its arithmetic,
//   Y = MatMul(Dropout?(Softmax(Mask?(Scale?(MatMul(Q, Transpose(K)))))), V)
// with Scale a Mul or Div by a scalar constant, Mask a Where(constant condition, constant fill, .) or an Add of a
// constant, and Dropout of ratio 0 (exported in training mode). Run as written it keeps the [T, T] scores and
// probabilities of every head for the backward pass (2 x T^2 per head and layer: at T = 1024 and 12 heads, 96 MiB per
// sample and layer in float32) and spends passes over them in Where, Softmax and their gradients. This pass replaces
// each such chain by one ScaledDotProductAttention node (core/backend/cpu/attention_ops.cpp) that forms the scores
// block by block and keeps only each row's log-sum-exp, so attention's memory grows with T, not T^2; its gradient
// recomputes the probabilities. Fused when: the mask is absent or exactly causal (row i sees columns 0..i; fill -inf or
// below -1e4, as masked_fill(-inf) and HF's finfo.min exports write it), the scale is a folded scalar (input 3 of
// the fused node, in the operands' dtype: exact for float64 checks), Q, K and V
// are float32 or float64 [..., T, D] with the same leading dims, no dropout (ratio 0), and the intermediate values have
// no other reader and are not graph outputs; other attention stays as written. Value ids keep their meaning; the
// result must be specialised again. Returns the number of chains fused through `fused`.
Graph fuseAttention(const Graph& graph, int* fused = nullptr);

}  // namespace strata
