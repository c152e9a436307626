#include "strata/graphs/mish_fusion.h"

#include "mul_activation_fusion.h"

namespace strata {

Graph fuseMish(const Graph& graph, int* fused) {
  return detail::fuseMulOfActivation(graph, {"Softplus", "Tanh"}, "Mish", fused);
}

}  // namespace strata
