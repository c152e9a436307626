// Softmax and LogSoftmax (opset 13: one axis) and their gradients on CUDA, mirroring
// core/backend/cpu/reduction_softmax.cpp and grad_reduction_ops.cpp. The tensor is viewed as [outer, axis, inner]:
// with inner == 1 a group of threads handles each contiguous row (warp-shuffle reductions); otherwise one thread
// handles each (outer, inner) column, reading neighbouring columns together.

#include <string>

#include "../../cpu/reduction_plan.h"
#include "reduce_kernels.cuh"

namespace strata::cuda {

namespace reduce {

namespace {

// The row maximum ignoring NaN, replaced by 0 when not finite: all -inf rows then give NaN (softmax) like the
// reference, and +inf/NaN propagate.
template <typename A>
__device__ __forceinline__ A finiteShift(A mx) {
  return dIsFinite(mx) ? mx : A(0);
}

template <typename T, bool Log>
__global__ void softmaxRowsKernel(const T* x, T* y, std::int64_t rows, std::int64_t len) {
  using A = typename AccTypeOf<T>::type;
  STRATA_ROW_LOOP(rowBase, rows) {
    const std::int64_t row = rowBase + threadIdx.y;
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * len;
    A mx = -std::numeric_limits<A>::infinity();
    if (active) {
      for (std::int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        mx = dMaxNum(mx, cvt<A>(xr[i]));
      }
    }
    mx = finiteShift(groupAllReduce(mx, MaxNumCombine<A>{}));
    A sum = A(0);
    if (active) {
      for (std::int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        sum += dExp(cvt<A>(xr[i]) - mx);
      }
    }
    sum = groupAllReduce(sum, SumCombine<A>{});
    if (active) {
      T* yr = y + row * len;
      if constexpr (Log) {
        const A shift = mx + dLog(sum);
        for (std::int64_t i = threadIdx.x; i < len; i += blockDim.x) {
          yr[i] = cvt<T>(cvt<A>(xr[i]) - shift);
        }
      } else {
        const A scale = A(1) / sum;
        for (std::int64_t i = threadIdx.x; i < len; i += blockDim.x) {
          yr[i] = cvt<T>(dExp(cvt<A>(xr[i]) - mx) * scale);
        }
      }
    }
  }
}

template <typename T, bool Log>
__global__ void softmaxColumnsKernel(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner) {
  using A = typename AccTypeOf<T>::type;
  STRATA_GRID_STRIDE_LOOP(t, outer * inner) {
    const std::int64_t base = (t / inner) * axis * inner + t % inner;
    const T* xc = x + base;
    T* yc = y + base;
    A mx = -std::numeric_limits<A>::infinity();
    for (std::int64_t a = 0; a < axis; ++a) {
      mx = dMaxNum(mx, cvt<A>(xc[a * inner]));
    }
    mx = finiteShift(mx);
    A sum = A(0);
    for (std::int64_t a = 0; a < axis; ++a) {
      sum += dExp(cvt<A>(xc[a * inner]) - mx);
    }
    if constexpr (Log) {
      const A shift = mx + dLog(sum);
      for (std::int64_t a = 0; a < axis; ++a) {
        yc[a * inner] = cvt<T>(cvt<A>(xc[a * inner]) - shift);
      }
    } else {
      for (std::int64_t a = 0; a < axis; ++a) {
        yc[a * inner] = cvt<T>(dExp(cvt<A>(xc[a * inner]) - mx) / sum);
      }
    }
  }
}

template <typename T, bool Log>
void softmaxAs(const T* x, T* y, std::int64_t outer, std::int64_t axis, std::int64_t inner, cudaStream_t stream) {
  if (inner == 1) {
    const RowLaunch launch = rowLaunch(outer, axis);
    softmaxRowsKernel<T, Log><<<launch.grid, launch.block, 0, stream>>>(x, y, outer, axis);
  } else {
    softmaxColumnsKernel<T, Log><<<blocksFor(outer * inner), kThreadsPerBlock, 0, stream>>>(x, y, outer, axis, inner);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

// dX of Softmax, Y * (dY - sum(dY * Y)), or LogSoftmax, dY - exp(Y) * sum(dY), given the forward output Y.
template <typename T, bool Log>
__device__ __forceinline__ typename AccTypeOf<T>::type softmaxGradTerm(T dy, T y) {
  using A = typename AccTypeOf<T>::type;
  if constexpr (Log) {
    return cvt<A>(dy);
  } else {
    return cvt<A>(dy) * cvt<A>(y);
  }
}

template <typename T, bool Log>
__device__ __forceinline__ T softmaxGradValue(T dy, T y, typename AccTypeOf<T>::type total) {
  using A = typename AccTypeOf<T>::type;
  if constexpr (Log) {
    return cvt<T>(cvt<A>(dy) - dExp(cvt<A>(y)) * total);
  } else {
    return cvt<T>(cvt<A>(y) * (cvt<A>(dy) - total));
  }
}

template <typename T, bool Log>
__global__ void softmaxGradRowsKernel(const T* dy, const T* y, T* dx, std::int64_t rows, std::int64_t len) {
  using A = typename AccTypeOf<T>::type;
  STRATA_ROW_LOOP(rowBase, rows) {
    const std::int64_t row = rowBase + threadIdx.y;
    const bool active = row < rows;
    const std::int64_t base = (active ? row : 0) * len;
    A sum = A(0);
    if (active) {
      for (std::int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        sum += softmaxGradTerm<T, Log>(dy[base + i], y[base + i]);
      }
    }
    sum = groupAllReduce(sum, SumCombine<A>{});
    if (active) {
      for (std::int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        dx[base + i] = softmaxGradValue<T, Log>(dy[base + i], y[base + i], sum);
      }
    }
  }
}

template <typename T, bool Log>
__global__ void softmaxGradColumnsKernel(const T* dy, const T* y, T* dx, std::int64_t outer, std::int64_t axis,
                                         std::int64_t inner) {
  using A = typename AccTypeOf<T>::type;
  STRATA_GRID_STRIDE_LOOP(t, outer * inner) {
    const std::int64_t base = (t / inner) * axis * inner + t % inner;
    A sum = A(0);
    for (std::int64_t a = 0; a < axis; ++a) {
      sum += softmaxGradTerm<T, Log>(dy[base + a * inner], y[base + a * inner]);
    }
    for (std::int64_t a = 0; a < axis; ++a) {
      const std::int64_t k = base + a * inner;
      dx[k] = softmaxGradValue<T, Log>(dy[k], y[k], sum);
    }
  }
}

using cpu::reduction_detail::AxisSplit;

// [outer, axis, inner] around `axis` as the CPU splits it (axis 0 of a scalar is a single element).
AxisSplit splitAtAxis(const Shape& shape, std::int64_t axisAttr) {
  if (shape.empty()) {
    return AxisSplit{};
  }
  return cpu::reduction_detail::splitAtAxis(shape, normalizeAxis(axisAttr, static_cast<std::int64_t>(shape.size())));
}

void addSoftmax(OpRegistry& registry, const std::string& type, bool logSoftmax) {
  addCudaKernelFactory(registry, type, [logSoftmax](const KernelInit& init) {
    const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
    return makeFunctionKernel([logSoftmax, axisAttr](KernelContext& ctx) {
      const Tensor& in = ctx.input(0);
      if (in.numel() == 0) {
        return;
      }
      const AxisSplit s = splitAtAxis(in.shape(), axisAttr);
      launchSoftmax(in.dtype(), in.rawData(), ctx.output(0).rawData(), s.outer, s.axis, s.inner, logSoftmax,
                    streamOf(ctx));
    });
  });
}

void addSoftmaxGrad(OpRegistry& registry, const std::string& type, bool logSoftmax) {
  addCudaKernelFactory(registry, type, [type, logSoftmax](const KernelInit& init) {
    const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
    return makeFunctionKernel([type, logSoftmax, axisAttr](KernelContext& ctx) {
      const Tensor& dy = ctx.input(0);
      if (dy.numel() == 0) {
        return;
      }
      const AxisSplit s = splitAtAxis(dy.shape(), axisAttr);
      const cudaStream_t stream = streamOf(ctx);
      visitDeviceFloat(dy.dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        const T* g = dy.data<T>();
        const T* y = ctx.input(1).data<T>();
        T* dx = ctx.output(0).data<T>();
        if (s.inner == 1) {
          const RowLaunch launch = rowLaunch(s.outer, s.axis);
          if (logSoftmax) {
            softmaxGradRowsKernel<T, true><<<launch.grid, launch.block, 0, stream>>>(g, y, dx, s.outer, s.axis);
          } else {
            softmaxGradRowsKernel<T, false><<<launch.grid, launch.block, 0, stream>>>(g, y, dx, s.outer, s.axis);
          }
        } else {
          const unsigned blocks = blocksFor(s.outer * s.inner);
          if (logSoftmax) {
            softmaxGradColumnsKernel<T, true>
                <<<blocks, kThreadsPerBlock, 0, stream>>>(g, y, dx, s.outer, s.axis, s.inner);
          } else {
            softmaxGradColumnsKernel<T, false>
                <<<blocks, kThreadsPerBlock, 0, stream>>>(g, y, dx, s.outer, s.axis, s.inner);
          }
        }
        STRATA_CUDA_CHECK_LAUNCH();
      });
    });
  });
}

}  // namespace

void launchSoftmax(DType dtype, const void* src, void* dst, std::int64_t outer, std::int64_t axis, std::int64_t inner,
                   bool logSoftmax, cudaStream_t stream) {
  if (outer * axis * inner == 0) {
    return;
  }
  visitDeviceFloat(dtype, logSoftmax ? "LogSoftmax" : "Softmax", [&](auto tag) {
    using T = decltype(tag);
    const auto* x = static_cast<const T*>(src);
    auto* y = static_cast<T*>(dst);
    if (logSoftmax) {
      softmaxAs<T, true>(x, y, outer, axis, inner, stream);
    } else {
      softmaxAs<T, false>(x, y, outer, axis, inner, stream);
    }
  });
}

}  // namespace reduce

void registerSoftmaxKernels(OpRegistry& registry) {
  reduce::addSoftmax(registry, "Softmax", false);
  reduce::addSoftmax(registry, "LogSoftmax", true);
}

void registerSoftmaxGradKernels(OpRegistry& registry) {
  reduce::addSoftmaxGrad(registry, "SoftmaxGrad", false);
  reduce::addSoftmaxGrad(registry, "LogSoftmaxGrad", true);
}

}  // namespace strata::cuda
