#include "strata/graphs/silu_fusion.h"

#include "mul_activation_fusion.h"

namespace strata {

Graph fuseSilu(const Graph& graph, int* fused) {
  return detail::fuseMulOfActivation(graph, {"Sigmoid"}, "Silu", fused);
}

}  // namespace strata
