#pragma once

// Every CUDA, cuDNN, cuBLAS and NCCL call goes through one of these macros. A failure throws strata::Error with the
// call's text, the library's own error name and message, and the source location; the executor prefixes the node
// and op that was running ("node 'conv1' (Conv): cudnnConvolutionForward(...) failed: ..."), so every GPU error
// names the call and the op that made it.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "strata/error.h"

namespace strata::cuda {

[[noreturn]] void throwCudaError(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throwCudnnError(cudnnStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throwCublasError(cublasStatus_t status, const char* call, const char* file, int line);

// The name cuBLAS gives a status (cublasGetStatusName), kept here so NCCL's translation unit need not include it.
const char* cublasStatusName(cublasStatus_t status);

}  // namespace strata::cuda

#define STRATA_CUDA_CHECK(call)                                                  \
  do {                                                                           \
    const cudaError_t strata_status_ = (call);                                   \
    if (strata_status_ != cudaSuccess) {                                         \
      ::strata::cuda::throwCudaError(strata_status_, #call, __FILE__, __LINE__); \
    }                                                                            \
  } while (false)

#define STRATA_CUDNN_CHECK(call)                                                  \
  do {                                                                            \
    const cudnnStatus_t strata_status_ = (call);                                  \
    if (strata_status_ != CUDNN_STATUS_SUCCESS) {                                 \
      ::strata::cuda::throwCudnnError(strata_status_, #call, __FILE__, __LINE__); \
    }                                                                             \
  } while (false)

#define STRATA_CUBLAS_CHECK(call)                                                  \
  do {                                                                             \
    const cublasStatus_t strata_status_ = (call);                                  \
    if (strata_status_ != CUBLAS_STATUS_SUCCESS) {                                 \
      ::strata::cuda::throwCublasError(strata_status_, #call, __FILE__, __LINE__); \
    }                                                                              \
  } while (false)

// After a kernel launch: reports launch-configuration errors at once (execution errors surface at the next
// synchronising call, which is checked too).
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_CHECK(cudaGetLastError())
