#pragma once

namespace strata::cuda {

// Registers the fused SGD / Adam / AdamW updates and the global-norm reduction for parameters on CUDA devices
// (strata::DeviceOptimizerKernels for DeviceType::CUDA). Idempotent; needs no device.
void registerCudaOptimizerKernels();

}  // namespace strata::cuda
