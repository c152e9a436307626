#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// How a node runs under mixed precision (PyTorch autocast's three lists, for the ops Strata trains).
enum class AutocastClass {
  LowPrecision,  // matrix products (Conv, ConvTranspose, Gemm, MatMul): every floating input cast to 16 bits
  Follow,        // cheap ops (Relu, MaxPool, Add, data movement) and batch norm: 16 bits when their data inputs are
  Float32,       // everything else (layer norm, softmax, losses, reductions, exp/log): inputs cast to float32
};

AutocastClass autocastClassOf(const std::string& opType);

// Mixed precision as a graph rewrite of a specialised forward graph (loss included): LowPrecision ops, and Follow
// ops whose floating inputs are all 16-bit, run in `low` (Float16 or BFloat16). Cast nodes are inserted where a
// value crosses between the two; each value is cast at most once per direction, so a parameter is cast once per
// step and its gradient flows back through the Cast into the float32 master weights. Every value id of the input
// graph keeps its float32 meaning (outputs, loss, parameters); 16-bit values are new ids. Ops whose schema does
// not declare 16-bit support stay in float32. The result must be specialised again to infer the new values.
Graph autocast(const Graph& graph, DType low);

}  // namespace strata
