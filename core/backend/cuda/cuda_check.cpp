#include "cuda_check.h"

#include <filesystem>

namespace strata::cuda {
namespace {

std::string where(const char* file, int line) {
  return fmt::format("{}:{}", std::filesystem::path(file).filename().string(), line);
}

}  // namespace

void throwCudaError(cudaError_t status, const char* call, const char* file, int line) {
  // Clear a sticky launch error so the next check reports its own call (sticky context errors stay sticky).
  (void)cudaGetLastError();
  fail("CUDA call {} failed: {} ({}) [{}]", call, cudaGetErrorString(status), cudaGetErrorName(status),
       where(file, line));
}

void throwCudnnError(cudnnStatus_t status, const char* call, const char* file, int line) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  fail("cuDNN call {} failed: {}{}{} [{}]", call, cudnnGetErrorString(status), detail[0] != 0 ? ": " : "", detail,
       where(file, line));
}

const char* cublasStatusName(cublasStatus_t status) {
  return cublasGetStatusName(status);
}

void throwCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  fail("cuBLAS call {} failed: {} ({}) [{}]", call, cublasGetStatusString(status), cublasGetStatusName(status),
       where(file, line));
}

}  // namespace strata::cuda
