#pragma once

// Shared pieces of the neural-network gradient kernels (grad_nn_*.cpp): registration per file and the window
// geometry helpers the direct loops use.

#include <algorithm>
#include <cstdint>

#include "dnnl_context.h"
#include "window3.h"

namespace strata::cpu::grad_nn {

void registerConvGradOps(OpRegistry& registry);  // ConvGradInput, ConvGradWeight, ConvGrad (grad_nn_conv.cpp)
void registerPoolGradOps(OpRegistry& registry);  // MaxPoolGrad, AveragePoolGrad (grad_nn_pool.cpp)
void registerNormGradOps(OpRegistry& registry);  // BatchNormalizationGrad (grad_nn_norm.cpp)

}  // namespace strata::cpu::grad_nn
