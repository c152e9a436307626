// Direct pooling kernels (cudnn_pool.cpp): the forward for what cuDNN cannot express, and both gradients. They
// mirror the CPU's loops (dnnl_pool.cpp's naivePool, grad_nn_pool.cpp) rule for rule. The gradients gather: one
// thread per input element sums the windows that hold it in increasing output order, the order in which the CPU's
// scatter adds them, so no atomics and the same sums.

#include <cmath>
#include <type_traits>

#include "nn_kernels.h"

namespace strata::cuda::nn {
namespace {

__device__ inline std::int64_t ceilDiv(std::int64_t a, std::int64_t b) {
  return a >= 0 ? (a + b - 1) / b : -((-a) / b);
}

__device__ inline std::int64_t clampTo(std::int64_t v, std::int64_t lo, std::int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

// The kernel positions [begin, end) whose input position start + k * dilation lies in [lo, hi).
__device__ inline void kernelRange(std::int64_t lo, std::int64_t hi, std::int64_t kernel, std::int64_t dilation,
                                   std::int64_t start, std::int64_t& begin, std::int64_t& end) {
  begin = clampTo(ceilDiv(lo - start, dilation), 0, kernel);
  end = clampTo(ceilDiv(hi - start, dilation), begin, kernel);
}

__device__ inline void unflatten(std::int64_t flat, const std::int64_t (&sizes)[3], std::int64_t (&coord)[3]) {
  coord[2] = flat % sizes[2];
  flat /= sizes[2];
  coord[1] = flat % sizes[1];
  coord[0] = flat / sizes[1];
}

// Where a plane's spatial positions lie in a tensor of `volume` positions per plane: element base + s * step for
// position s (PoolWindow::channels picks the layout).
struct PlaneAddress {
  std::int64_t base, step;
};

__device__ inline PlaneAddress planeAddress(const PoolWindow& w, std::int64_t plane, std::int64_t volume) {
  if (w.channels == 0)
    return {plane * volume, 1};
  const std::int64_t n = plane / w.channels;
  return {n * volume * w.channels + (plane - n * w.channels), w.channels};
}

// The plane and spatial position of element i of a tensor of `volume` positions per plane.
__device__ inline void locate(const PoolWindow& w, std::int64_t i, std::int64_t volume, std::int64_t& plane,
                              std::int64_t& local) {
  if (w.channels == 0) {
    plane = i / volume;
    local = i - plane * volume;
    return;
  }
  const std::int64_t rest = i / w.channels;  // n * volume + local
  const std::int64_t n = rest / volume;
  local = rest - n * volume;
  plane = n * w.channels + (i - rest * w.channels);
}

template <typename T>
__device__ inline double asDouble(T v) {
  return static_cast<double>(toAcc(v));  // the 16-bit floats through float
}

template <typename T>
__device__ inline T fromDouble(double v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __double2half(v);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __double2bfloat16(v);
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
__global__ void poolForwardKernel(bool isMax, bool countIncludePad, PoolWindow w, std::int64_t total, const T* x, T* y,
                                  std::int64_t* indices, bool columnMajor) {
  const std::int64_t inVolume = w.inVolume();
  const std::int64_t outVolume = w.outVolume();
  STRATA_GRID_STRIDE_LOOP(i, total) {
    std::int64_t plane, local;
    locate(w, i, outVolume, plane, local);
    std::int64_t o[3];
    unflatten(local, w.out, o);
    std::int64_t start[3];
    std::int64_t padded = 1;
    for (int d = 0; d < 3; ++d) {
      start[d] = o[d] * w.stride[d] - w.padBegin[d];
      std::int64_t b, e;
      kernelRange(-w.padBegin[d], w.in[d] + w.padEnd[d], w.kernel[d], w.dilation[d], start[d], b, e);
      padded *= e - b;
    }
    const PlaneAddress in = planeAddress(w, plane, inVolume);
    const T* p = x + in.base;
    double sum = 0;
    double best = -INFINITY;
    std::int64_t bestIndex = -1;
    std::int64_t count = 0;
    // Every window position in row-major order, invalid ones skipped: the first maximum wins, as on the CPU.
    for (std::int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
      const std::int64_t p0 = start[0] + k0 * w.dilation[0];
      if (p0 < 0 || p0 >= w.in[0])
        continue;
      for (std::int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
        const std::int64_t p1 = start[1] + k1 * w.dilation[1];
        if (p1 < 0 || p1 >= w.in[1])
          continue;
        for (std::int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
          const std::int64_t p2 = start[2] + k2 * w.dilation[2];
          if (p2 < 0 || p2 >= w.in[2])
            continue;
          const std::int64_t offset = (p0 * w.in[1] + p1) * w.in[2] + p2;
          const double v = asDouble(p[offset * in.step]);
          sum += v;
          ++count;
          if (v > best) {
            best = v;
            bestIndex = plane * inVolume +
                        (columnMajor ? p0 * w.colStride[0] + p1 * w.colStride[1] + p2 * w.colStride[2] : offset);
          }
        }
      }
    }
    double value = 0;
    if (isMax) {
      value = count > 0 ? best : 0.0;
    } else {
      const std::int64_t divisor = countIncludePad ? padded : count;
      value = divisor > 0 ? sum / static_cast<double>(divisor) : 0.0;
    }
    y[i] = fromDouble<T>(value);
    if (indices != nullptr)
      indices[i] = bestIndex;
  }
}

template <typename T>
__device__ inline bool isNan(T v) {
  return v != v;
}

// The plane-local index of each window's first maximum (first NaN when there is one), -1 for an empty window.
// Values compare in the accumulation type (float for the 16-bit floats, exact).
template <typename T>
__global__ void maxPoolArgmaxKernel(PoolWindow w, std::int64_t total, const T* x, std::int64_t* argmax) {
  using A = typename AccTypeOf<T>::type;
  const std::int64_t inVolume = w.inVolume();
  const std::int64_t outVolume = w.outVolume();
  STRATA_GRID_STRIDE_LOOP(i, total) {
    std::int64_t plane, local;
    locate(w, i, outVolume, plane, local);
    std::int64_t o[3];
    unflatten(local, w.out, o);
    std::int64_t start[3], kb[3], ke[3];
    for (int d = 0; d < 3; ++d) {
      start[d] = o[d] * w.stride[d] - w.padBegin[d];
      kernelRange(0, w.in[d], w.kernel[d], w.dilation[d], start[d], kb[d], ke[d]);
    }
    const PlaneAddress in = planeAddress(w, plane, inVolume);
    const T* p = x + in.base;
    std::int64_t best = -1;
    A bestValue = A(0);
    for (std::int64_t k0 = kb[0]; k0 < ke[0]; ++k0) {
      const std::int64_t p0 = start[0] + k0 * w.dilation[0];
      for (std::int64_t k1 = kb[1]; k1 < ke[1]; ++k1) {
        const std::int64_t row = (p0 * w.in[1] + start[1] + k1 * w.dilation[1]) * w.in[2];
        for (std::int64_t k2 = kb[2]; k2 < ke[2]; ++k2) {
          const std::int64_t index = row + start[2] + k2 * w.dilation[2];
          const A v = toAcc(p[index * in.step]);
          if (best < 0 || v > bestValue || (isNan(v) && !isNan(bestValue))) {
            best = index;
            bestValue = v;
          }
        }
      }
    }
    argmax[i] = best;
  }
}

// The output range [begin, end) along one dim whose windows may hold input position `pos` (then
// (pos + padBegin - o * stride) must be a multiple of the dilation, checked by the caller).
__device__ inline void windowsHolding(std::int64_t pos, std::int64_t out, std::int64_t stride, std::int64_t padBegin,
                                      std::int64_t kernel, std::int64_t dilation, std::int64_t& begin,
                                      std::int64_t& end) {
  const std::int64_t t = pos + padBegin;  // >= 0
  begin = clampTo(ceilDiv(t - (kernel - 1) * dilation, stride), 0, out);
  end = clampTo(t / stride + 1, begin, out);
}

__device__ inline bool holds(std::int64_t pos, std::int64_t o, std::int64_t stride, std::int64_t padBegin,
                             std::int64_t dilation) {
  return (pos + padBegin - o * stride) % dilation == 0;
}

// Sums in the accumulation type (float for the 16-bit floats).
template <typename T>
__global__ void maxPoolGradKernel(PoolWindow w, std::int64_t total, const T* dy, const std::int64_t* argmax, T* dx) {
  using A = typename AccTypeOf<T>::type;
  const std::int64_t inVolume = w.inVolume();
  const std::int64_t outVolume = w.outVolume();
  STRATA_GRID_STRIDE_LOOP(i, total) {
    std::int64_t plane, local;
    locate(w, i, inVolume, plane, local);
    std::int64_t pos[3];
    unflatten(local, w.in, pos);
    std::int64_t ob[3], oe[3];
    for (int d = 0; d < 3; ++d)
      windowsHolding(pos[d], w.out[d], w.stride[d], w.padBegin[d], w.kernel[d], w.dilation[d], ob[d], oe[d]);
    // argmax is laid out as dY.
    const PlaneAddress out = planeAddress(w, plane, outVolume);
    const std::int64_t* routes = argmax + out.base;
    const T* grad = dy + out.base;
    A sum = A(0);
    for (std::int64_t o0 = ob[0]; o0 < oe[0]; ++o0) {
      if (!holds(pos[0], o0, w.stride[0], w.padBegin[0], w.dilation[0]))
        continue;
      for (std::int64_t o1 = ob[1]; o1 < oe[1]; ++o1) {
        if (!holds(pos[1], o1, w.stride[1], w.padBegin[1], w.dilation[1]))
          continue;
        for (std::int64_t o2 = ob[2]; o2 < oe[2]; ++o2) {
          if (!holds(pos[2], o2, w.stride[2], w.padBegin[2], w.dilation[2]))
            continue;
          const std::int64_t oi = ((o0 * w.out[1] + o1) * w.out[2] + o2) * out.step;
          if (routes[oi] == local)
            sum += toAcc(grad[oi]);
        }
      }
    }
    dx[i] = fromAcc<T>(sum);
  }
}

template <typename T>
__global__ void averagePoolGradKernel(bool countIncludePad, PoolWindow w, std::int64_t total, const T* dy, T* dx) {
  using A = typename AccTypeOf<T>::type;
  const std::int64_t inVolume = w.inVolume();
  const std::int64_t outVolume = w.outVolume();
  STRATA_GRID_STRIDE_LOOP(i, total) {
    std::int64_t plane, local;
    locate(w, i, inVolume, plane, local);
    std::int64_t pos[3];
    unflatten(local, w.in, pos);
    std::int64_t ob[3], oe[3];
    for (int d = 0; d < 3; ++d)
      windowsHolding(pos[d], w.out[d], w.stride[d], w.padBegin[d], w.kernel[d], w.dilation[d], ob[d], oe[d]);
    const PlaneAddress out = planeAddress(w, plane, outVolume);
    const T* grad = dy + out.base;
    A sum = A(0);
    // A window's divisor factor along dim d: its positions inside the input, or inside input + explicit pads.
    auto factor = [&](int d, std::int64_t o) {
      const std::int64_t start = o * w.stride[d] - w.padBegin[d];
      std::int64_t b, e;
      if (countIncludePad) {
        kernelRange(-w.padBegin[d], w.in[d] + w.padEnd[d], w.kernel[d], w.dilation[d], start, b, e);
      } else {
        kernelRange(0, w.in[d], w.kernel[d], w.dilation[d], start, b, e);
      }
      return e - b;
    };
    for (std::int64_t o0 = ob[0]; o0 < oe[0]; ++o0) {
      if (!holds(pos[0], o0, w.stride[0], w.padBegin[0], w.dilation[0]))
        continue;
      const std::int64_t f0 = factor(0, o0);
      for (std::int64_t o1 = ob[1]; o1 < oe[1]; ++o1) {
        if (!holds(pos[1], o1, w.stride[1], w.padBegin[1], w.dilation[1]))
          continue;
        const std::int64_t f1 = factor(1, o1);
        for (std::int64_t o2 = ob[2]; o2 < oe[2]; ++o2) {
          if (!holds(pos[2], o2, w.stride[2], w.padBegin[2], w.dilation[2]))
            continue;
          const std::int64_t divisor = f0 * f1 * factor(2, o2);
          if (divisor == 0)
            continue;
          sum += toAcc(grad[((o0 * w.out[1] + o1) * w.out[2] + o2) * out.step]) / static_cast<A>(divisor);
        }
      }
    }
    dx[i] = fromAcc<T>(sum);
  }
}

template <typename T>
void poolForward(bool isMax, bool countIncludePad, const PoolWindow& window, std::int64_t planes, const void* x,
                 void* y, std::int64_t* indices, bool columnMajor, cudaStream_t stream) {
  const std::int64_t total = planes * window.outVolume();
  if (total == 0)
    return;
  poolForwardKernel<T><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      isMax, countIncludePad, window, total, static_cast<const T*>(x), static_cast<T*>(y), indices, columnMajor);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void maxPoolGrad(const PoolWindow& window, std::int64_t planes, const void* dy, const void* x, std::int64_t* argmax,
                 void* dx, cudaStream_t stream) {
  const std::int64_t outputs = planes * window.outVolume();
  const std::int64_t inputs = planes * window.inVolume();
  if (inputs == 0)
    return;
  if (outputs == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(inputs) * sizeof(T), stream));
    return;
  }
  maxPoolArgmaxKernel<T>
      <<<blocksFor(outputs), kThreadsPerBlock, 0, stream>>>(window, outputs, static_cast<const T*>(x), argmax);
  STRATA_CUDA_CHECK_LAUNCH();
  maxPoolGradKernel<T><<<blocksFor(inputs), kThreadsPerBlock, 0, stream>>>(window, inputs, static_cast<const T*>(dy),
                                                                           argmax, static_cast<T*>(dx));
  STRATA_CUDA_CHECK_LAUNCH();
}

template <typename T>
void averagePoolGrad(bool countIncludePad, const PoolWindow& window, std::int64_t planes, const void* dy, void* dx,
                     cudaStream_t stream) {
  const std::int64_t inputs = planes * window.inVolume();
  if (inputs == 0)
    return;
  if (window.outVolume() == 0) {
    STRATA_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(inputs) * sizeof(T), stream));
    return;
  }
  averagePoolGradKernel<T><<<blocksFor(inputs), kThreadsPerBlock, 0, stream>>>(
      countIncludePad, window, inputs, static_cast<const T*>(dy), static_cast<T*>(dx));
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launchPoolForward(DType dtype, bool isMax, bool countIncludePad, const PoolWindow& window, std::int64_t planes,
                       const void* x, void* y, std::int64_t* indices, bool columnMajorIndices, cudaStream_t stream) {
  switch (dtype) {
    case DType::Float32:
      poolForward<float>(isMax, countIncludePad, window, planes, x, y, indices, columnMajorIndices, stream);
      break;
    case DType::Float64:
      poolForward<double>(isMax, countIncludePad, window, planes, x, y, indices, columnMajorIndices, stream);
      break;
    case DType::Float16:
      poolForward<__half>(isMax, countIncludePad, window, planes, x, y, indices, columnMajorIndices, stream);
      break;
    case DType::BFloat16:
      poolForward<__nv_bfloat16>(isMax, countIncludePad, window, planes, x, y, indices, columnMajorIndices, stream);
      break;
    case DType::Int8:
      poolForward<std::int8_t>(isMax, countIncludePad, window, planes, x, y, indices, columnMajorIndices, stream);
      break;
    case DType::UInt8:
      poolForward<std::uint8_t>(isMax, countIncludePad, window, planes, x, y, indices, columnMajorIndices, stream);
      break;
    default:
      fail("pooling on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

void launchMaxPoolGrad(DType dtype, const PoolWindow& window, std::int64_t planes, const void* dy, const void* x,
                       std::int64_t* argmax, void* dx, cudaStream_t stream) {
  switch (dtype) {
    case DType::Float32:
      maxPoolGrad<float>(window, planes, dy, x, argmax, dx, stream);
      break;
    case DType::Float64:
      maxPoolGrad<double>(window, planes, dy, x, argmax, dx, stream);
      break;
    case DType::Float16:
      maxPoolGrad<__half>(window, planes, dy, x, argmax, dx, stream);
      break;
    case DType::BFloat16:
      maxPoolGrad<__nv_bfloat16>(window, planes, dy, x, argmax, dx, stream);
      break;
    default:
      fail("MaxPoolGrad on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

void launchAveragePoolGrad(DType dtype, bool countIncludePad, const PoolWindow& window, std::int64_t planes,
                           const void* dy, void* dx, cudaStream_t stream) {
  switch (dtype) {
    case DType::Float32:
      averagePoolGrad<float>(countIncludePad, window, planes, dy, dx, stream);
      break;
    case DType::Float64:
      averagePoolGrad<double>(countIncludePad, window, planes, dy, dx, stream);
      break;
    case DType::Float16:
      averagePoolGrad<__half>(countIncludePad, window, planes, dy, dx, stream);
      break;
    case DType::BFloat16:
      averagePoolGrad<__nv_bfloat16>(countIncludePad, window, planes, dy, dx, stream);
      break;
    default:
      fail("AveragePoolGrad on CUDA: unsupported dtype {}", dtypeName(dtype));
  }
}

}  // namespace strata::cuda::nn
