#pragma once

// Launchers of the small CUDA kernels behind the cuDNN / cuBLAS ops (cudnn_*.cpp, blas_gemm.cpp): what those
// libraries cannot express (asymmetric padding, pooling with dilation or ceil_mode, MaxPool indices, the pooling
// and batch-norm gradients with the CPU backend's exact rules, integer matrix products). Every launcher enqueues on
// `stream` and checks its launch; pointers are device pointers of contiguous row-major tensors.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernel_utils.cuh"
#include "strata/dtype.h"

namespace strata::cuda::nn {

// Sizes of up to 3 spatial dims, promoted to exactly 3 with leading 1s.
struct Spatial3 {
  std::int64_t d[3] = {1, 1, 1};
  __host__ __device__ std::int64_t volume() const { return d[0] * d[1] * d[2]; }
};

// out[p, j] = in[p, j + offset] where j + offset lies inside in's spatial extent, else 0, for every plane p < planes
// (planes = N * C). Pads (negative offsets) or crops (positive ones) the spatial dims; any dtype (copied by size).
void launchWindowCopy(std::size_t elementSize, const void* in, void* out, std::int64_t planes, const Spatial3& inSize,
                      const Spatial3& outSize, const Spatial3& offset, cudaStream_t stream);

// db[c] = the sum of dy[n, c, i] over n < batch and i < inner (a convolution's bias gradient), accumulated in float
// by the deterministic reduction engine (Note [CUDA reduction engine]); partial sums live in workspace on `device`.
// A channels-last dy [N, spatial..., C] is the view batch = N * spatial, inner = 1. dtype: float16 or bfloat16.
void launchChannelSum(DType dtype, const void* dy, void* db, std::int64_t batch, std::int64_t channels,
                      std::int64_t inner, Device device, cudaStream_t stream);

// A pooling window with the spatial dims promoted to 3 (leading dims: size 1, kernel 1, stride 1, no padding).
// The pooled tensors (X, Y, dX, dY) are [planes, spatial...], or with channels > 0 channels-last: [planes /
// channels, spatial..., channels] (every kernel then reads and writes that layout; planes is still N * C).
struct PoolWindow {
  std::int64_t in[3] = {1, 1, 1};
  std::int64_t out[3] = {1, 1, 1};
  std::int64_t kernel[3] = {1, 1, 1};
  std::int64_t stride[3] = {1, 1, 1};
  std::int64_t dilation[3] = {1, 1, 1};
  std::int64_t padBegin[3] = {0, 0, 0};
  std::int64_t padEnd[3] = {0, 0, 0};     // the explicit end pads (count_include_pad counts them)
  std::int64_t colStride[3] = {0, 0, 0};  // strides of a column-major spatial layout (MaxPool storage_order = 1)
  std::int64_t channels = 0;              // > 0: the channels-last layout with this many channels
  __host__ __device__ std::int64_t inVolume() const { return in[0] * in[1] * in[2]; }
  __host__ __device__ std::int64_t outVolume() const { return out[0] * out[1] * out[2]; }
};

// MaxPool / AveragePool forward as the CPU's direct loop: the max ignores NaN (a window of only NaN or only padding
// gives -inf or 0), the average divides by the window positions inside the input (count_include_pad = 0) or inside
// input + explicit pads (= 1). `indices` (nullable, MaxPool only, channels-first only): flat index of the max in X
// (row-major, or column-major spatial when columnMajorIndices), -1 when the window holds no value. dtype: float32,
// float64, float16, bfloat16 (compared and averaged in double, rounded once), int8, uint8.
void launchPoolForward(DType dtype, bool isMax, bool countIncludePad, const PoolWindow& window, std::int64_t planes,
                       const void* x, void* y, std::int64_t* indices, bool columnMajorIndices, cudaStream_t stream);

// MaxPoolGrad: dX receives each dY at the first maximum of its window (row-major window order; the first NaN when
// there is one). `argmax` is workspace of planes * outVolume int64. dtype: float32, float64, float16 or bfloat16 (the
// 16-bit floats compared and summed in float).
void launchMaxPoolGrad(DType dtype, const PoolWindow& window, std::int64_t planes, const void* dy, const void* x,
                       std::int64_t* argmax, void* dx, cudaStream_t stream);

// AveragePoolGrad with the forward's divisor rule. dtype: float32, float64, float16 or bfloat16 (summed in float).
void launchAveragePoolGrad(DType dtype, bool countIncludePad, const PoolWindow& window, std::int64_t planes,
                           const void* dy, void* dx, cudaStream_t stream);

// Batch norm keeps X, Y, dY and dX in xDtype and scale, bias, statistics and their gradients in paramDtype, which
// is also the arithmetic's: (float32, float32), (float64, float64), or 16-bit data with float32 parameters as cuDNN
// and PyTorch autocast do ((float16 or bfloat16, float32): computed in float32, each 16-bit output rounded once).
// Throws naming `op` and both dtypes for any other pair.
void checkBatchNormDTypes(const char* op, DType xDtype, DType paramDtype);

// y = (x - mean[c]) * (scale[c] / sqrt(var[c] + epsilon)) + bias[c] over x [batch, channels, inner], in paramDtype's
// arithmetic. A channels-last x [N, spatial..., C] is the view batch = N * spatial, inner = 1.
void launchBatchNormApply(DType xDtype, DType paramDtype, const void* x, const void* scale, const void* bias,
                          const void* mean, const void* var, double epsilon, void* y, std::int64_t batch,
                          std::int64_t channels, std::int64_t inner, cudaStream_t stream);

// out[i] = float(in[i]) for count elements (exact). dtype: float16 or bfloat16.
void launchWidenToFloat(DType dtype, const void* in, float* out, std::int64_t count, cudaStream_t stream);

// After a training-mode forward: running = input * momentum + batch * (1 - momentum) (ONNX's convention), with the
// biased batch variance recovered from cuDNN's unbiased one (times (count - 1) / count). Outputs are nullable;
// savedMean / savedVar get the batch statistics themselves (biased variance). Every pointer holds `dtype`, the
// parameters' dtype (float32 or float64).
void launchBatchNormRunningStats(DType dtype, const void* inputMean, const void* inputVar, const void* batchMean,
                                 const void* unbiasedVar, double momentum, std::int64_t count, void* runningMean,
                                 void* runningVar, void* savedMean, void* savedVar, std::int64_t channels,
                                 cudaStream_t stream);

// The training-mode batch statistics without cuDNN (cudnn_batchnorm.cpp uses it where cuDNN refuses): per channel
// of x [batch, channels, inner] (channelsLast: [batch, inner, channels]) the mean, the biased variance and the
// unbiased one, from shifted sums in double as the gradient computes them. mean, biasedVar and unbiasedVar hold
// paramDtype; `workspace` holds batchNormStatsWorkspaceBytes(...) bytes.
std::size_t batchNormStatsWorkspaceBytes(std::int64_t batch, std::int64_t channels, std::int64_t inner,
                                         bool channelsLast);
void launchBatchNormBatchStats(DType xDtype, DType paramDtype, const void* x, void* mean, void* biasedVar,
                               void* unbiasedVar, std::int64_t batch, std::int64_t channels, std::int64_t inner,
                               bool channelsLast, void* workspace, cudaStream_t stream);

// BatchNormalizationGrad as the CPU computes it (Note [Batch-norm backward] in grad_nn_norm.cpp): per-channel sums
// of dY, dY * (x - shift), x - shift and (x - shift)^2 in double, then dX = a * dY + b * X + c. training = false
// takes mean and var (the others are then unused, may be null). dx, dscale, dbias are nullable. dy, x, dx hold
// xDtype; scale, mean, var, dscale, dbias paramDtype (see checkBatchNormDTypes). dy, x, dx are [batch, channels,
// inner], or with channelsLast [batch, inner, channels]. `workspace` holds batchNormGradWorkspaceBytes(...) bytes.
std::size_t batchNormGradWorkspaceBytes(DType paramDtype, std::int64_t batch, std::int64_t channels, std::int64_t inner,
                                        bool channelsLast);
void launchBatchNormGrad(DType xDtype, DType paramDtype, bool training, double epsilon, const void* dy, const void* x,
                         const void* scale, const void* mean, const void* var, void* dx, void* dscale, void* dbias,
                         std::int64_t batch, std::int64_t channels, std::int64_t inner, bool channelsLast,
                         void* workspace, cudaStream_t stream);

// InstanceNormalization (float32): per (n, c) plane of `size` elements, mean and variance in double.
void launchInstanceNorm(const float* x, const float* scale, const float* bias, float epsilon, float* y,
                        std::int64_t planes, std::int64_t channels, std::int64_t size, cudaStream_t stream);

// y[i, j] = T(scale * double(c[i * rowStride + j * colStride])) for y [rows, cols] (Gemm's C broadcast).
// dtype: float32, float64, float16, bfloat16, int32, int64.
void launchBroadcastFill(DType dtype, const void* c, void* y, std::int64_t rows, std::int64_t cols,
                         std::int64_t rowStride, std::int64_t colStride, double scale, cudaStream_t stream);

// Integer Gemm as the CPU loop: acc in int64, y = T(double(alpha) * double(acc) + (accumulate ? double(y) : 0)).
// dtype: int32 or int64.
void launchIntegerGemm(DType dtype, const void* a, const void* b, void* y, std::int64_t m, std::int64_t n,
                       std::int64_t k, bool transA, bool transB, double alpha, bool accumulate, cudaStream_t stream);

// Integer MatMul with broadcast batch dims: batch index -> element offsets of A and B through the indexers (whose
// sizes are the output's batch dims); y is [batches, m, n]. dtype: int32 or int64.
void launchIntegerMatmul(DType dtype, const void* a, const void* b, void* y, std::int64_t batches, std::int64_t m,
                         std::int64_t n, std::int64_t k, const Indexer& batchA, const Indexer& batchB,
                         cudaStream_t stream);

// Pointer arrays for cublasGemmBatchedEx: a[i] = a + offA(i) elements, b[i] likewise, y[i] = y + i * yStride.
// `pointers` holds 3 * batches device pointers (A's, then B's, then Y's).
void launchBatchPointers(const void* a, const void* b, void* y, std::size_t elementSize, std::int64_t batches,
                         const Indexer& batchA, const Indexer& batchB, std::int64_t yStride, void** pointers,
                         cudaStream_t stream);

}  // namespace strata::cuda::nn
