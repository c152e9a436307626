#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>

#include "strata/op_registry.h"

namespace strata::cuda {

// Per-device library handles, created once when the backend initialises a device.
struct CudaContext {
  int device = 0;
  cudaDeviceProp properties{};
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublasLt = nullptr;
};

// The context of the device a kernel runs on, with the cuDNN and cuBLAS handles bound to the kernel's stream.
CudaContext& contextOf(const KernelContext& ctx);
// The context of an initialised device (for kernel creation at plan time; handles keep whatever stream they had).
CudaContext& contextFor(int device);

// Precision knobs shared by every kernel, set from --precision before plans are built.
// TF32 tensor-core math for float32 convolutions and GEMMs (on by default, as in cuDNN; --precision fp32 turns
// it off).
bool tf32Enabled();
void setTf32Enabled(bool enabled);
// The most workspace bytes a cuDNN convolution algorithm may ask for (algorithms needing more are not chosen).
std::size_t convolutionWorkspaceLimit();
void setConvolutionWorkspaceLimit(std::size_t bytes);

}  // namespace strata::cuda
