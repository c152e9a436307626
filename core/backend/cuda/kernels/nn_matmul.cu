// Helpers of the cuBLAS Gemm / MatMul kernels (blas_gemm.cpp): Gemm's broadcast C, the integer products cuBLAS
// does not have (mirroring the CPU's loops: int64 accumulation), and pointer arrays for broadcast batches.

#include "nn_kernels.h"

namespace strata::cuda::nn {
namespace {

template <typename T>
__device__ inline double toDouble(T v) {
  return static_cast<double>(v);
}
template <>
__device__ inline double toDouble<__half>(__half v) {
  return static_cast<double>(__half2float(v));
}
template <>
__device__ inline double toDouble<__nv_bfloat16>(__nv_bfloat16 v) {
  return static_cast<double>(__bfloat162float(v));
}

template <typename T>
__device__ inline T fromDouble(double v) {
  return static_cast<T>(v);
}
template <>
__device__ inline __half fromDouble<__half>(double v) {
  return __double2half(v);
}
template <>
__device__ inline __nv_bfloat16 fromDouble<__nv_bfloat16>(double v) {
  return __double2bfloat16(v);
}

template <typename T>
__global__ void broadcastFillKernel(const T* c, T* y, std::int64_t total, std::int64_t cols, std::int64_t rowStride,
                                    std::int64_t colStride, double scale) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t row = i / cols;
    const std::int64_t col = i - row * cols;
    y[i] = fromDouble<T>(scale * toDouble(c[row * rowStride + col * colStride]));
  }
}

template <typename T>
__global__ void integerGemmKernel(const T* a, const T* b, T* y, std::int64_t m, std::int64_t n, std::int64_t k,
                                  std::int64_t ai, std::int64_t ak, std::int64_t bk, std::int64_t bj, double alpha,
                                  bool accumulate) {
  STRATA_GRID_STRIDE_LOOP(idx, m * n) {
    const std::int64_t i = idx / n;
    const std::int64_t j = idx - i * n;
    std::int64_t acc = 0;
    for (std::int64_t kk = 0; kk < k; ++kk)
      acc += static_cast<std::int64_t>(a[i * ai + kk * ak]) * static_cast<std::int64_t>(b[kk * bk + j * bj]);
    const double value = alpha * static_cast<double>(acc) + (accumulate ? static_cast<double>(y[idx]) : 0.0);
    y[idx] = static_cast<T>(value);
  }
}

template <typename T>
__global__ void integerMatmulKernel(const T* a, const T* b, T* y, std::int64_t total, std::int64_t m, std::int64_t n,
                                    std::int64_t k, Indexer batchA, Indexer batchB) {
  STRATA_GRID_STRIDE_LOOP(idx, total) {
    const std::int64_t batch = idx / (m * n);
    const std::int64_t rest = idx - batch * m * n;
    const std::int64_t i = rest / n;
    const std::int64_t j = rest - i * n;
    const T* pa = a + batchA.offset(batch) + i * k;
    const T* pb = b + batchB.offset(batch) + j;
    std::int64_t acc = 0;
    for (std::int64_t kk = 0; kk < k; ++kk)
      acc += static_cast<std::int64_t>(pa[kk]) * static_cast<std::int64_t>(pb[kk * n]);
    y[idx] = static_cast<T>(acc);
  }
}

__global__ void batchPointersKernel(const char* a, const char* b, char* y, std::int64_t elementSize,
                                    std::int64_t batches, Indexer batchA, Indexer batchB, std::int64_t yStride,
                                    void** pointers) {
  STRATA_GRID_STRIDE_LOOP(i, batches) {
    pointers[i] = const_cast<char*>(a) + batchA.offset(i) * elementSize;
    pointers[batches + i] = const_cast<char*>(b) + batchB.offset(i) * elementSize;
    pointers[2 * batches + i] = y + i * yStride * elementSize;
  }
}

template <typename T>
void broadcastFill(const void* c, void* y, std::int64_t rows, std::int64_t cols, std::int64_t rowStride,
                   std::int64_t colStride, double scale, cudaStream_t stream) {
  const std::int64_t total = rows * cols;
  if (total == 0)
    return;
  broadcastFillKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(c), static_cast<T*>(y), total, cols, rowStride, colStride, scale);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void integerGemm(const void* a, const void* b, void* y, std::int64_t m, std::int64_t n, std::int64_t k, bool transA,
                 bool transB, double alpha, bool accumulate, cudaStream_t stream) {
  if (m * n == 0)
    return;
  // A(i, k) = a[i * ai + k * ak], B(k, j) = b[k * bk + j * bj].
  const std::int64_t ai = transA ? 1 : k, ak = transA ? m : 1;
  const std::int64_t bk = transB ? 1 : n, bj = transB ? k : 1;
  integerGemmKernel<T><<<blocksFor(m * n), kThreadsPerBlock, 0, stream>>>(static_cast<const T*>(a),
                                                                          static_cast<const T*>(b), static_cast<T*>(y),
                                                                          m, n, k, ai, ak, bk, bj, alpha, accumulate);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void integerMatmul(const void* a, const void* b, void* y, std::int64_t batches, std::int64_t m, std::int64_t n,
                   std::int64_t k, const Indexer& batchA, const Indexer& batchB, cudaStream_t stream) {
  const std::int64_t total = batches * m * n;
  if (total == 0)
    return;
  integerMatmulKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), total, m, n, k, batchA, batchB);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launchBroadcastFill(DType dtype, const void* c, void* y, std::int64_t rows, std::int64_t cols,
                         std::int64_t rowStride, std::int64_t colStride, double scale, cudaStream_t stream) {
  switch (dtype) {
    case DType::Float32:
      broadcastFill<float>(c, y, rows, cols, rowStride, colStride, scale, stream);
      break;
    case DType::Float64:
      broadcastFill<double>(c, y, rows, cols, rowStride, colStride, scale, stream);
      break;
    case DType::Float16:
      broadcastFill<__half>(c, y, rows, cols, rowStride, colStride, scale, stream);
      break;
    case DType::BFloat16:
      broadcastFill<__nv_bfloat16>(c, y, rows, cols, rowStride, colStride, scale, stream);
      break;
    case DType::Int32:
      broadcastFill<std::int32_t>(c, y, rows, cols, rowStride, colStride, scale, stream);
      break;
    case DType::Int64:
      broadcastFill<std::int64_t>(c, y, rows, cols, rowStride, colStride, scale, stream);
      break;
    default:
      fail("Gemm on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

void launchIntegerGemm(DType dtype, const void* a, const void* b, void* y, std::int64_t m, std::int64_t n,
                       std::int64_t k, bool transA, bool transB, double alpha, bool accumulate, cudaStream_t stream) {
  switch (dtype) {
    case DType::Int32:
      integerGemm<std::int32_t>(a, b, y, m, n, k, transA, transB, alpha, accumulate, stream);
      break;
    case DType::Int64:
      integerGemm<std::int64_t>(a, b, y, m, n, k, transA, transB, alpha, accumulate, stream);
      break;
    default:
      fail("integer Gemm on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

void launchIntegerMatmul(DType dtype, const void* a, const void* b, void* y, std::int64_t batches, std::int64_t m,
                         std::int64_t n, std::int64_t k, const Indexer& batchA, const Indexer& batchB,
                         cudaStream_t stream) {
  switch (dtype) {
    case DType::Int32:
      integerMatmul<std::int32_t>(a, b, y, batches, m, n, k, batchA, batchB, stream);
      break;
    case DType::Int64:
      integerMatmul<std::int64_t>(a, b, y, batches, m, n, k, batchA, batchB, stream);
      break;
    default:
      fail("integer MatMul on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

void launchBatchPointers(const void* a, const void* b, void* y, std::size_t elementSize, std::int64_t batches,
                         const Indexer& batchA, const Indexer& batchB, std::int64_t yStride, void** pointers,
                         cudaStream_t stream) {
  if (batches == 0)
    return;
  batchPointersKernel<<<blocksFor(batches), kThreadsPerBlock, 0, stream>>>(
      static_cast<const char*>(a), static_cast<const char*>(b), static_cast<char*>(y),
      static_cast<std::int64_t>(elementSize), batches, batchA, batchB, yStride, pointers);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::nn
