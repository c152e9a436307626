// Batch-norm pieces around cuDNN's training forward (cudnn_batchnorm.cpp): the inference-mode apply, the ONNX
// running-statistics update, the backward with the CPU's formula, and InstanceNormalization.
//
// Batch-norm kernels take two types: T for X, Y, dY and dX, P for scale, bias and the statistics, which is also the
// compute type. T = P (float, double) is the plain kernel. A 16-bit T with P = float is that float kernel on X
// widened to float with each 16-bit output rounded once, which is what the CPU's emulation computes (Note [Low
// precision on the CPU]).

#include <algorithm>
#include <cmath>

#include "nn_kernels.h"

namespace strata::cuda::nn {
namespace {

constexpr int kReduceThreads = 256;  // the block size of every reduction below (a multiple of the warp size)

__device__ inline float deviceSqrt(float v) {
  return sqrtf(v);
}
__device__ inline double deviceSqrt(double v) {
  return sqrt(v);
}

// The sum of `value` over the block, in a fixed order (so the same inputs give the same bits); valid in thread 0.
// `scratch` holds one double per warp. Every thread of the block must call it.
__device__ double blockSum(double value, double* scratch) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffU, value, offset);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  double total = 0;
  if (threadIdx.x == 0) {
    const int warps = static_cast<int>(blockDim.x) / 32;
    for (int w = 0; w < warps; ++w)
      total += scratch[w];
  }
  return total;
}

template <typename T, typename P>
__global__ void batchNormApplyKernel(const T* x, const P* scale, const P* bias, const P* mean, const P* var, P epsilon,
                                     T* y, std::int64_t total, std::int64_t channels, std::int64_t inner) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t c = (i / inner) % channels;
    const P a = scale[c] / deviceSqrt(var[c] + epsilon);
    y[i] = static_cast<T>((static_cast<P>(x[i]) - mean[c]) * a + bias[c]);
  }
}

__global__ void widenKernel(const __half* in, float* out, std::int64_t count) {
  STRATA_GRID_STRIDE_LOOP(i, count) {
    out[i] = __half2float(in[i]);
  }
}

__global__ void widenKernel(const __nv_bfloat16* in, float* out, std::int64_t count) {
  STRATA_GRID_STRIDE_LOOP(i, count) {
    out[i] = __bfloat162float(in[i]);
  }
}

template <typename T>
__global__ void runningStatsKernel(const T* inputMean, const T* inputVar, const T* batchMean, const T* unbiasedVar,
                                   T momentum, double varianceFactor, T* runningMean, T* runningVar, T* savedMean,
                                   T* savedVar, std::int64_t channels) {
  STRATA_GRID_STRIDE_LOOP(c, channels) {
    const T mean = batchMean[c];
    const T variance =
        unbiasedVar != nullptr ? static_cast<T>(static_cast<double>(unbiasedVar[c]) * varianceFactor) : T{0};
    const T keep = T{1} - momentum;
    if (runningMean != nullptr)
      runningMean[c] = inputMean[c] * momentum + mean * keep;
    if (runningVar != nullptr)
      runningVar[c] = inputVar[c] * momentum + variance * keep;
    if (savedMean != nullptr)
      savedMean[c] = mean;
    if (savedVar != nullptr)
      savedVar[c] = variance;
  }
}

// Splits of one channel's batch * inner elements among blocks of the sums kernel.
std::int64_t gradSplits(std::int64_t count) {
  const std::int64_t splits = (count + 8191) / 8192;
  return splits < 1 ? 1 : (splits > 64 ? 64 : splits);
}

// The same for the channels-last sums kernel, whose blocks each take 32 channels: about 1024 blocks in all, each
// split at least 256 rows, at most 512 splits.
std::int64_t gradSplitsLast(std::int64_t rows, std::int64_t channels) {
  const std::int64_t tiles = (channels + 31) / 32;
  return std::clamp<std::int64_t>(std::min((rows + 255) / 256, 1024 / tiles), 1, 512);
}

std::int64_t gradSplitsFor(bool channelsLast, std::int64_t rows, std::int64_t channels) {
  return channelsLast ? gradSplitsLast(rows, channels) : gradSplits(rows);
}

template <typename T, typename P>
__device__ inline P channelShift(bool training, const T* x, const P* mean, std::int64_t c, std::int64_t inner,
                                 std::int64_t count) {
  return training ? (count > 0 ? static_cast<P>(x[c * inner]) : P{0}) : mean[c];
}

// Grid: x = channel, y = split. partials[(c * splits + split) * 4 + q] for q = sum(x - shift),
// sum((x - shift)^2), sum(dY), sum(dY * (x - shift)).
template <typename T, typename P>
__global__ void channelSumsKernel(bool training, const T* dy, const T* x, const P* mean, std::int64_t batch,
                                  std::int64_t channels, std::int64_t inner, std::int64_t splits, double* partials) {
  __shared__ double scratch[kReduceThreads / 32];
  const auto c = static_cast<std::int64_t>(blockIdx.x);
  const auto split = static_cast<std::int64_t>(blockIdx.y);
  const std::int64_t count = batch * inner;
  const std::int64_t chunk = (count + splits - 1) / splits;
  const std::int64_t begin = split * chunk;
  const std::int64_t end = begin + chunk < count ? begin + chunk : count;
  const P shift = channelShift(training, x, mean, c, inner, count);
  double sx = 0, sxx = 0, sdy = 0, sdyx = 0;
  std::int64_t j = begin + threadIdx.x;
  if (j < end) {
    // Walk (n, i) without a division per element.
    const std::int64_t step = blockDim.x;
    const std::int64_t stepN = step / inner, stepI = step % inner;
    std::int64_t n = j / inner, i = j % inner;
    for (; j < end; j += step) {
      const std::int64_t index = (n * channels + c) * inner + i;
      const P xs = static_cast<P>(x[index]) - shift;
      const double g = static_cast<double>(static_cast<P>(dy[index]));
      const double v = static_cast<double>(xs);
      sx += v;
      sxx += v * v;
      sdy += g;
      sdyx += g * v;
      n += stepN;
      i += stepI;
      if (i >= inner) {
        i -= inner;
        ++n;
      }
    }
  }
  const double totals[4] = {blockSum(sx, scratch), blockSum(sxx, scratch), blockSum(sdy, scratch),
                            blockSum(sdyx, scratch)};
  if (threadIdx.x == 0) {
    for (int q = 0; q < 4; ++q)
      partials[(c * splits + split) * 4 + q] = totals[q];
  }
}

// channelSumsKernel for channels-last x and dY [rows, channels]: a block takes 32 neighbouring channels (so a warp
// reads one row's channels together) and kReduceThreads / 32 threads per channel stride over the split's rows; the
// lanes' sums are then added in lane order. Grid: x = channel tile, y = split; the same partials.
template <typename T, typename P>
__global__ void channelSumsLastKernel(bool training, const T* dy, const T* x, const P* mean, std::int64_t rows,
                                      std::int64_t channels, std::int64_t splits, double* partials) {
  constexpr int kLanes = kReduceThreads / 32;
  __shared__ double scratch[4][kLanes][32];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const auto split = static_cast<std::int64_t>(blockIdx.y);
  const std::int64_t chunk = (rows + splits - 1) / splits;
  const std::int64_t begin = split * chunk;
  const std::int64_t end = begin + chunk < rows ? begin + chunk : rows;
  double sums[4] = {0, 0, 0, 0};
  if (c < channels) {
    const P shift = channelShift(training, x, mean, c, 1, rows);
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kLanes) {
      const std::int64_t index = r * channels + c;
      const P xs = static_cast<P>(x[index]) - shift;
      const double g = static_cast<double>(static_cast<P>(dy[index]));
      const double v = static_cast<double>(xs);
      sums[0] += v;
      sums[1] += v * v;
      sums[2] += g;
      sums[3] += g * v;
    }
  }
  for (int q = 0; q < 4; ++q)
    scratch[q][threadIdx.y][threadIdx.x] = sums[q];
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int q = 0; q < 4; ++q) {
      double total = 0;
      for (int lane = 0; lane < kLanes; ++lane)
        total += scratch[q][lane][threadIdx.x];
      partials[(c * splits + split) * 4 + q] = total;
    }
  }
}

// Per channel: dScale, dB and the coefficients of dX = a * dY + b * X + c (grad_nn_norm.cpp's batchNormGrad).
template <typename T, typename P>
__global__ void gradCoefficientsKernel(bool training, double epsilon, const T* x, const P* scale, const P* mean,
                                       const P* var, std::int64_t batch, std::int64_t channels, std::int64_t inner,
                                       std::int64_t splits, const double* partials, P* dscale, P* dbias,
                                       P* coefficients) {
  const std::int64_t count = batch * inner;
  const double countD = static_cast<double>(count);
  STRATA_GRID_STRIDE_LOOP(c, channels) {
    double sums[4] = {0, 0, 0, 0};
    for (std::int64_t s = 0; s < splits; ++s) {
      for (int q = 0; q < 4; ++q)
        sums[q] += partials[(c * splits + s) * 4 + q];
    }
    const double shift = static_cast<double>(channelShift(training, x, mean, c, inner, count));
    double centre = shift;
    double variance = 0;
    double sumDyCentred = sums[3];
    if (training) {
      const double meanShift = count > 0 ? sums[0] / countD : 0.0;
      centre += meanShift;
      variance = count > 0 ? fmax(0.0, sums[1] / countD - meanShift * meanShift) : 0.0;
      sumDyCentred -= meanShift * sums[2];
    } else {
      variance = static_cast<double>(var[c]);
    }
    const double invStd = 1.0 / sqrt(variance + epsilon);
    const double gradScale = sumDyCentred * invStd;
    if (dscale != nullptr)
      dscale[c] = static_cast<P>(gradScale);
    if (dbias != nullptr)
      dbias[c] = static_cast<P>(sums[2]);
    const double ca = static_cast<double>(scale[c]) * invStd;
    double cb = 0, cc = 0;
    if (training && count > 0) {
      cb = -ca * invStd * gradScale / countD;
      cc = -ca * sums[2] / countD - cb * centre;
    }
    coefficients[c * 3] = static_cast<P>(ca);
    coefficients[c * 3 + 1] = static_cast<P>(cb);
    coefficients[c * 3 + 2] = static_cast<P>(cc);
  }
}

// Per channel, from channelSums*Kernel's partials over X (training shift): the batch mean, the biased variance
// (which normalises) and the unbiased one (which launchBatchNormRunningStats expects, as cuDNN returns it).
template <typename T, typename P>
__global__ void batchStatsKernel(const T* x, std::int64_t count, std::int64_t channels, std::int64_t inner,
                                 std::int64_t splits, const double* partials, P* mean, P* biasedVar, P* unbiasedVar) {
  const double countD = static_cast<double>(count);
  STRATA_GRID_STRIDE_LOOP(c, channels) {
    double sum = 0, squares = 0;
    for (std::int64_t s = 0; s < splits; ++s) {
      sum += partials[(c * splits + s) * 4];
      squares += partials[(c * splits + s) * 4 + 1];
    }
    const double shift = static_cast<double>(channelShift(true, x, static_cast<const P*>(nullptr), c, inner, count));
    const double meanShift = count > 0 ? sum / countD : 0.0;
    const double variance = count > 0 ? fmax(0.0, squares / countD - meanShift * meanShift) : 0.0;
    mean[c] = static_cast<P>(shift + meanShift);
    biasedVar[c] = static_cast<P>(variance);
    unbiasedVar[c] = static_cast<P>(count > 1 ? variance * countD / (countD - 1.0) : 0.0);
  }
}

template <typename T, typename P>
__global__ void gradApplyKernel(const T* dy, const T* x, const P* coefficients, T* dx, std::int64_t total,
                                std::int64_t channels, std::int64_t inner) {
  STRATA_GRID_STRIDE_LOOP(i, total) {
    const std::int64_t c = (i / inner) % channels;
    const P ca = coefficients[c * 3], cb = coefficients[c * 3 + 1], cc = coefficients[c * 3 + 2];
    if (cb == P{0} && cc == P{0}) {
      dx[i] = static_cast<T>(ca * static_cast<P>(dy[i]));
    } else {
      dx[i] = static_cast<T>(ca * static_cast<P>(dy[i]) + cb * static_cast<P>(x[i]) + cc);
    }
  }
}

__global__ void instanceNormKernel(const float* x, const float* scale, const float* bias, float epsilon, float* y,
                                   std::int64_t channels, std::int64_t size) {
  __shared__ double scratch[kReduceThreads / 32];
  __shared__ float coefficient[2];
  const auto plane = static_cast<std::int64_t>(blockIdx.x);
  const float* in = x + plane * size;
  float* out = y + plane * size;
  double sum = 0;
  for (std::int64_t i = threadIdx.x; i < size; i += blockDim.x)
    sum += static_cast<double>(in[i]);
  sum = blockSum(sum, scratch);
  __shared__ double meanShared;
  if (threadIdx.x == 0)
    meanShared = size > 0 ? sum / static_cast<double>(size) : 0.0;
  __syncthreads();
  const double mean = meanShared;
  double squares = 0;
  for (std::int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    const double d = static_cast<double>(in[i]) - mean;
    squares += d * d;
  }
  squares = blockSum(squares, scratch);
  if (threadIdx.x == 0) {
    const double var = size > 0 ? squares / static_cast<double>(size) : 0.0;
    const std::int64_t c = plane % channels;
    const auto a = static_cast<float>(static_cast<double>(scale[c]) / sqrt(var + static_cast<double>(epsilon)));
    coefficient[0] = a;
    coefficient[1] = static_cast<float>(static_cast<double>(bias[c]) - mean * static_cast<double>(a));
  }
  __syncthreads();
  const float a = coefficient[0], b = coefficient[1];
  for (std::int64_t i = threadIdx.x; i < size; i += blockDim.x)
    out[i] = in[i] * a + b;
}

// Calls fn(T{}, P{}) for a supported (X, parameters) dtype pair; any other pair is an error naming `op`.
template <typename Fn>
void visitBatchNormTypes(DType xDtype, DType paramDtype, const char* op, Fn&& fn) {
  checkBatchNormDTypes(op, xDtype, paramDtype);
  switch (xDtype) {
    case DType::Float32:
      return fn(float{}, float{});
    case DType::Float64:
      return fn(double{}, double{});
    case DType::Float16:
      return fn(__half{}, float{});
    default:
      return fn(__nv_bfloat16{}, float{});
  }
}

template <typename T, typename P>
void batchNormApply(const void* x, const void* scale, const void* bias, const void* mean, const void* var,
                    double epsilon, void* y, std::int64_t batch, std::int64_t channels, std::int64_t inner,
                    cudaStream_t stream) {
  const std::int64_t total = batch * channels * inner;
  if (total == 0)
    return;
  batchNormApplyKernel<T, P><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const P*>(scale), static_cast<const P*>(bias), static_cast<const P*>(mean),
      static_cast<const P*>(var), static_cast<P>(epsilon), static_cast<T*>(y), total, channels, inner);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void runningStats(const void* inputMean, const void* inputVar, const void* batchMean, const void* unbiasedVar,
                  double momentum, std::int64_t count, void* runningMean, void* runningVar, void* savedMean,
                  void* savedVar, std::int64_t channels, cudaStream_t stream) {
  if (channels == 0)
    return;
  const double factor = count > 1 ? static_cast<double>(count - 1) / static_cast<double>(count) : 0.0;
  runningStatsKernel<T><<<blocksFor(channels), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(inputMean), static_cast<const T*>(inputVar), static_cast<const T*>(batchMean),
      static_cast<const T*>(unbiasedVar), static_cast<T>(momentum), factor, static_cast<T*>(runningMean),
      static_cast<T*>(runningVar), static_cast<T*>(savedMean), static_cast<T*>(savedVar), channels);
  STRATA_CUDA_CHECK_LAUNCH();
}

// Launches the per-channel sums of (dy, x) into `partials` (channelSums*Kernel's layout, gradSplitsFor splits) and
// turns a channels-last [batch, inner, channels] into the [batch * inner, channels, 1] view the per-channel kernels
// take.
template <typename T, typename P>
void launchChannelSums(bool training, const T* dy, const T* x, const P* mean, std::int64_t& batch,
                       std::int64_t channels, std::int64_t& inner, bool channelsLast, std::int64_t splits,
                       double* partials, cudaStream_t stream) {
  STRATA_CHECK(channels <= 0x7fffffff, "BatchNormalization on CUDA: {} channels is too many", channels);
  const std::int64_t count = batch * inner;
  if (channelsLast) {
    const dim3 grid(static_cast<unsigned>((channels + 31) / 32), static_cast<unsigned>(splits));
    channelSumsLastKernel<T, P>
        <<<grid, dim3(32, kReduceThreads / 32), 0, stream>>>(training, dy, x, mean, count, channels, splits, partials);
    batch = count;
    inner = 1;
  } else {
    const dim3 grid(static_cast<unsigned>(channels), static_cast<unsigned>(splits));
    channelSumsKernel<T, P>
        <<<grid, kReduceThreads, 0, stream>>>(training, dy, x, mean, batch, channels, inner, splits, partials);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T, typename P>
void batchStats(const void* x, void* mean, void* biasedVar, void* unbiasedVar, std::int64_t batch,
                std::int64_t channels, std::int64_t inner, bool channelsLast, void* workspace, cudaStream_t stream) {
  if (channels == 0)
    return;
  const std::int64_t count = batch * inner;
  const std::int64_t splits = gradSplitsFor(channelsLast, count, channels);
  auto* partials = static_cast<double*>(workspace);
  const auto* typedX = static_cast<const T*>(x);
  // X stands in for dY: the kernel's dY sums are not read.
  launchChannelSums<T, P>(true, typedX, typedX, nullptr, batch, channels, inner, channelsLast, splits, partials,
                          stream);
  batchStatsKernel<T, P><<<blocksFor(channels), kThreadsPerBlock, 0, stream>>>(
      typedX, count, channels, inner, splits, partials, static_cast<P*>(mean), static_cast<P*>(biasedVar),
      static_cast<P*>(unbiasedVar));
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T, typename P>
void batchNormGrad(bool training, double epsilon, const void* dy, const void* x, const void* scale, const void* mean,
                   const void* var, void* dx, void* dscale, void* dbias, std::int64_t batch, std::int64_t channels,
                   std::int64_t inner, bool channelsLast, void* workspace, cudaStream_t stream) {
  if (channels == 0)
    return;
  const std::int64_t count = batch * inner;
  const std::int64_t splits = gradSplitsFor(channelsLast, count, channels);
  auto* partials = static_cast<double*>(workspace);
  auto* coefficients = reinterpret_cast<P*>(partials + channels * splits * 4);
  const auto* typedX = static_cast<const T*>(x);
  const auto* typedMean = static_cast<const P*>(mean);
  launchChannelSums<T, P>(training, static_cast<const T*>(dy), typedX, typedMean, batch, channels, inner, channelsLast,
                          splits, partials, stream);
  gradCoefficientsKernel<T, P><<<blocksFor(channels), kThreadsPerBlock, 0, stream>>>(
      training, epsilon, typedX, static_cast<const P*>(scale), typedMean, static_cast<const P*>(var), batch, channels,
      inner, splits, partials, static_cast<P*>(dscale), static_cast<P*>(dbias), coefficients);
  STRATA_CUDA_CHECK_LAUNCH();
  const std::int64_t total = count * channels;
  if (dx == nullptr || total == 0)
    return;
  gradApplyKernel<T, P><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      static_cast<const T*>(dy), typedX, coefficients, static_cast<T*>(dx), total, channels, inner);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void checkBatchNormDTypes(const char* op, DType xDtype, DType paramDtype) {
  const bool supported = paramDtype == DType::Float32
                             ? (xDtype == DType::Float32 || xDtype == DType::Float16 || xDtype == DType::BFloat16)
                             : (paramDtype == DType::Float64 && xDtype == DType::Float64);
  STRATA_CHECK(supported,
               "{} on CUDA: X is {} with parameters in {}; supported are float32, float16 or bfloat16 X with float32 "
               "parameters and float64 X with float64 parameters",
               op, dtypeName(xDtype), dtypeName(paramDtype));
}

void launchBatchNormApply(DType xDtype, DType paramDtype, const void* x, const void* scale, const void* bias,
                          const void* mean, const void* var, double epsilon, void* y, std::int64_t batch,
                          std::int64_t channels, std::int64_t inner, cudaStream_t stream) {
  visitBatchNormTypes(xDtype, paramDtype, "BatchNormalization", [&](auto xTag, auto paramTag) {
    batchNormApply<decltype(xTag), decltype(paramTag)>(x, scale, bias, mean, var, epsilon, y, batch, channels, inner,
                                                       stream);
  });
}

void launchWidenToFloat(DType dtype, const void* in, float* out, std::int64_t count, cudaStream_t stream) {
  if (count == 0)
    return;
  switch (dtype) {
    case DType::Float16:
      widenKernel<<<blocksFor(count), kThreadsPerBlock, 0, stream>>>(static_cast<const __half*>(in), out, count);
      break;
    case DType::BFloat16:
      widenKernel<<<blocksFor(count), kThreadsPerBlock, 0, stream>>>(static_cast<const __nv_bfloat16*>(in), out, count);
      break;
    default:
      fail("widening to float32 on CUDA takes float16 or bfloat16, not {}", dtypeName(dtype));
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

void launchBatchNormRunningStats(DType dtype, const void* inputMean, const void* inputVar, const void* batchMean,
                                 const void* unbiasedVar, double momentum, std::int64_t count, void* runningMean,
                                 void* runningVar, void* savedMean, void* savedVar, std::int64_t channels,
                                 cudaStream_t stream) {
  switch (dtype) {
    case DType::Float32:
      runningStats<float>(inputMean, inputVar, batchMean, unbiasedVar, momentum, count, runningMean, runningVar,
                          savedMean, savedVar, channels, stream);
      break;
    case DType::Float64:
      runningStats<double>(inputMean, inputVar, batchMean, unbiasedVar, momentum, count, runningMean, runningVar,
                           savedMean, savedVar, channels, stream);
      break;
    default:
      fail("BatchNormalization on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

std::size_t batchNormGradWorkspaceBytes(DType paramDtype, std::int64_t batch, std::int64_t channels, std::int64_t inner,
                                        bool channelsLast) {
  (void)paramDtype;  // the coefficients (parameter dtype) take a double's room whatever it is
  const auto c = static_cast<std::size_t>(channels);
  const auto splits = static_cast<std::size_t>(gradSplitsFor(channelsLast, batch * inner, channels));
  return (c * splits * 4 + c * 3) * sizeof(double);
}

std::size_t batchNormStatsWorkspaceBytes(std::int64_t batch, std::int64_t channels, std::int64_t inner,
                                         bool channelsLast) {
  const auto c = static_cast<std::size_t>(channels);
  return c * static_cast<std::size_t>(gradSplitsFor(channelsLast, batch * inner, channels)) * 4 * sizeof(double);
}

void launchBatchNormBatchStats(DType xDtype, DType paramDtype, const void* x, void* mean, void* biasedVar,
                               void* unbiasedVar, std::int64_t batch, std::int64_t channels, std::int64_t inner,
                               bool channelsLast, void* workspace, cudaStream_t stream) {
  visitBatchNormTypes(xDtype, paramDtype, "BatchNormalization", [&](auto xTag, auto paramTag) {
    batchStats<decltype(xTag), decltype(paramTag)>(x, mean, biasedVar, unbiasedVar, batch, channels, inner,
                                                   channelsLast, workspace, stream);
  });
}

void launchBatchNormGrad(DType xDtype, DType paramDtype, bool training, double epsilon, const void* dy, const void* x,
                         const void* scale, const void* mean, const void* var, void* dx, void* dscale, void* dbias,
                         std::int64_t batch, std::int64_t channels, std::int64_t inner, bool channelsLast,
                         void* workspace, cudaStream_t stream) {
  visitBatchNormTypes(xDtype, paramDtype, "BatchNormalizationGrad", [&](auto xTag, auto paramTag) {
    batchNormGrad<decltype(xTag), decltype(paramTag)>(training, epsilon, dy, x, scale, mean, var, dx, dscale, dbias,
                                                      batch, channels, inner, channelsLast, workspace, stream);
  });
}

void launchInstanceNorm(const float* x, const float* scale, const float* bias, float epsilon, float* y,
                        std::int64_t planes, std::int64_t channels, std::int64_t size, cudaStream_t stream) {
  if (planes == 0 || size == 0)
    return;
  STRATA_CHECK(planes <= 0x7fffffff, "InstanceNormalization on CUDA: {} planes is too many", planes);
  instanceNormKernel<<<static_cast<unsigned>(planes), kReduceThreads, 0, stream>>>(x, scale, bias, epsilon, y, channels,
                                                                                   size);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::nn
