// LayerNormalization (opset 17) on CUDA, mirroring core/backend/cpu/reduction_softmax.cpp: one group of threads
// per normalised row, two passes (mean, then centred squares) to avoid the cancellation of E[x^2] - E[x]^2, and
// the optional Mean / InvStdDev outputs in the stash dtype (float or double).

#include "reduce_kernels.cuh"

namespace strata::cuda {

namespace reduce {

namespace {

template <typename T, typename S>
__global__ void layerNormKernel(const T* x, const T* scale, const T* bias, T* y, S* meanOut, S* invStdOut,
                                std::int64_t rows, std::int64_t norm, typename AccTypeOf<T>::type epsilon) {
  using A = typename AccTypeOf<T>::type;
  const A n = static_cast<A>(norm);
  STRATA_ROW_LOOP(rowBase, rows) {
    const std::int64_t row = rowBase + threadIdx.y;
    const bool active = row < rows;
    const T* xr = x + (active ? row : 0) * norm;
    A sum = A(0);
    if (active) {
      for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
        sum += cvt<A>(xr[i]);
      }
    }
    const A mean = groupAllReduce(sum, SumCombine<A>{}) / n;
    A sq = A(0);
    if (active) {
      for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
        const A d = cvt<A>(xr[i]) - mean;
        sq += d * d;
      }
    }
    const A invStd = A(1) / dSqrt(groupAllReduce(sq, SumCombine<A>{}) / n + epsilon);
    if (!active) {
      continue;
    }
    T* yr = y + row * norm;
    for (std::int64_t i = threadIdx.x; i < norm; i += blockDim.x) {
      A v = (cvt<A>(xr[i]) - mean) * invStd * cvt<A>(scale[i]);
      if (bias != nullptr) {
        v += cvt<A>(bias[i]);
      }
      yr[i] = cvt<T>(v);
    }
    if (threadIdx.x == 0) {
      if (meanOut != nullptr) {
        meanOut[row] = static_cast<S>(mean);
      }
      if (invStdOut != nullptr) {
        invStdOut[row] = static_cast<S>(invStd);
      }
    }
  }
}

template <typename T, typename S>
void layerNormAs(KernelContext& ctx, std::int64_t axis, double epsilon) {
  using A = typename AccTypeOf<T>::type;
  const Tensor& x = ctx.input(0);
  const Shape normShape(x.shape().begin() + axis, x.shape().end());
  const std::int64_t norm = numElements(normShape);
  const std::int64_t rows = norm == 0 ? 0 : x.numel() / norm;
  if (rows == 0) {
    return;
  }
  const cudaStream_t stream = streamOf(ctx);
  Tensor scaleStorage;
  Tensor biasStorage;
  const T* scale = expandTo<T>(ctx.input(1), normShape, scaleStorage, stream);
  const T* bias = ctx.hasInput(2) ? expandTo<T>(ctx.input(2), normShape, biasStorage, stream) : nullptr;
  S* meanOut = ctx.hasOutput(1) ? ctx.output(1).data<S>() : nullptr;
  S* invStdOut = ctx.hasOutput(2) ? ctx.output(2).data<S>() : nullptr;
  const RowLaunch launch = rowLaunch(rows, norm);
  layerNormKernel<T, S><<<launch.grid, launch.block, 0, stream>>>(
      x.data<T>(), scale, bias, ctx.output(0).data<T>(), meanOut, invStdOut, rows, norm, static_cast<A>(epsilon));
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

}  // namespace reduce

void registerLayerNormKernels(OpRegistry& registry) {
  addCudaKernelFactory(registry, "LayerNormalization", [](const KernelInit& init) {
    const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
    const double epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    return makeFunctionKernel([axisAttr, epsilon](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::int64_t axis = normalizeAxis(axisAttr, x.rank());
      // Mean and InvStdDev have the stash dtype, whichever of float/double that is.
      DType stash = DType::Float32;
      if (ctx.hasOutput(1)) {
        stash = ctx.output(1).dtype();
      } else if (ctx.hasOutput(2)) {
        stash = ctx.output(2).dtype();
      }
      visitDeviceFloat(x.dtype(), "LayerNormalization", [&](auto tag) {
        using T = decltype(tag);
        if (stash == DType::Float64) {
          reduce::layerNormAs<T, double>(ctx, axis, epsilon);
        } else {
          reduce::layerNormAs<T, float>(ctx, axis, epsilon);
        }
      });
    });
  });
}

}  // namespace strata::cuda
