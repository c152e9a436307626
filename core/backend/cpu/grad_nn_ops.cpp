// Gradient kernels of the neural-network ops; the kernels themselves live in grad_nn_conv.cpp, grad_nn_pool.cpp
// and grad_nn_norm.cpp.

#include "cpu_ops.h"
#include "grad_nn_common.h"

namespace strata::cpu {

void registerNnGradOps(OpRegistry& registry) {
  grad_nn::registerConvGradOps(registry);
  grad_nn::registerPoolGradOps(registry);
  grad_nn::registerNormGradOps(registry);
}

}  // namespace strata::cpu
