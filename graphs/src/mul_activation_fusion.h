#pragma once

// Shared by the SiLU and Mish fusions (silu_fusion.cpp, mish_fusion.cpp). Internal to the graphs library.

#include <string>
#include <string_view>
#include <vector>

#include "strata/graphs/graph.h"

namespace strata::detail {

// Replaces every Mul(x, chain(x)) (operands in either order) by one `fused`(x) node, where chain(x) is the unary
// ops of `chain` applied to x in that order (Sigmoid; Softplus then Tanh), when each link's output has no other
// reader and is not a graph output. Returns the number of products fused through `fusedCount`.
Graph fuseMulOfActivation(const Graph& graph, const std::vector<std::string_view>& chain, const std::string& fused,
                          int* fusedCount);

}  // namespace strata::detail
